-- qvec before vec. SQLite keeps a row's columns in order and spills a large
-- row to a chain of overflow pages: a qvec stored after the 6 KiB of a
-- 1,536-dimension vec was reached only by reading the whole chain, so
-- loading a bank's quantized vectors read five times their bytes. The
-- table is rebuilt with qvec first; the statements name their columns.
CREATE TABLE promptops_observation_vectors_new (
  bank            TEXT NOT NULL,
  observation_id  TEXT NOT NULL,
  model           TEXT NOT NULL,
  dims            INTEGER NOT NULL CHECK (dims > 0),
  qvec            BLOB,
  vec             BLOB NOT NULL,
  PRIMARY KEY (bank, observation_id)
);
INSERT INTO promptops_observation_vectors_new (bank, observation_id, model, dims, qvec, vec)
  SELECT bank, observation_id, model, dims, qvec, vec FROM promptops_observation_vectors;
DROP TABLE promptops_observation_vectors;
ALTER TABLE promptops_observation_vectors_new RENAME TO promptops_observation_vectors;
CREATE INDEX promptops_observation_vectors_space ON promptops_observation_vectors (bank, model, dims);
