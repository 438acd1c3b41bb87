-- Vectors are written quantized only, as qvec (the scale as little-endian
-- float32, then one int8 a dimension): the form a run compares in, a
-- quarter of vec's bytes to write with every batch and to load with every
-- run. vec stays for the rows written before, which are read from it; a
-- row written again has qvec and no vec. SQLite cannot drop a NOT NULL,
-- so both tables are rebuilt (once, copying the rows as they are), qvec
-- before vec as in migration 6.
CREATE TABLE promptops_observation_vectors_new (
  bank            TEXT NOT NULL,
  observation_id  TEXT NOT NULL,
  model           TEXT NOT NULL,
  dims            INTEGER NOT NULL CHECK (dims > 0),
  qvec            BLOB,
  vec             BLOB,
  CHECK (qvec IS NOT NULL OR vec IS NOT NULL),
  PRIMARY KEY (bank, observation_id)
);
INSERT INTO promptops_observation_vectors_new (bank, observation_id, model, dims, qvec, vec)
  SELECT bank, observation_id, model, dims, qvec, vec FROM promptops_observation_vectors;
DROP TABLE promptops_observation_vectors;
ALTER TABLE promptops_observation_vectors_new RENAME TO promptops_observation_vectors;
CREATE INDEX promptops_observation_vectors_space ON promptops_observation_vectors (bank, model, dims);

CREATE TABLE promptops_fact_vectors_new (
  bank     TEXT NOT NULL,
  fact_id  TEXT NOT NULL,
  model    TEXT NOT NULL,
  dims     INTEGER NOT NULL CHECK (dims > 0),
  qvec     BLOB,
  vec      BLOB,
  CHECK (qvec IS NOT NULL OR vec IS NOT NULL),
  PRIMARY KEY (bank, fact_id)
);
INSERT INTO promptops_fact_vectors_new (bank, fact_id, model, dims, vec)
  SELECT bank, fact_id, model, dims, vec FROM promptops_fact_vectors;
DROP TABLE promptops_fact_vectors;
ALTER TABLE promptops_fact_vectors_new RENAME TO promptops_fact_vectors;
