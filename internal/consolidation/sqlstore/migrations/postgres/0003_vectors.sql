-- Embeddings: each fact and observation keeps its vector with the model and
-- dimension it came from (little-endian float32, unit length). A run reads
-- only the vectors of its own (model, dims) and compares them in Go; a
-- change of model or dimensions re-embeds, bounded per run.
CREATE TABLE promptops_fact_vectors (
  bank     text NOT NULL,
  fact_id  text NOT NULL,
  model    text NOT NULL,
  dims     integer NOT NULL CHECK (dims > 0),
  vec      bytea NOT NULL,
  PRIMARY KEY (bank, fact_id)
);

CREATE TABLE promptops_observation_vectors (
  bank            text NOT NULL,
  observation_id  text NOT NULL,
  model           text NOT NULL,
  dims            integer NOT NULL CHECK (dims > 0),
  vec             bytea NOT NULL,
  PRIMARY KEY (bank, observation_id)
);
CREATE INDEX promptops_observation_vectors_space ON promptops_observation_vectors (bank, model, dims);
