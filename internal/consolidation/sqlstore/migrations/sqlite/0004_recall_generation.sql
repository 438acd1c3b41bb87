-- Recall: a run keeps the bank's observations in a lexical index in
-- memory. Every batch applied bumps the bank's generation in its
-- transaction, so a store whose index is behind (another run applied a
-- batch) reloads it before it recalls.
ALTER TABLE promptops_banks ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;

-- Recall no longer asks SQLite for trigram matches.
DROP TABLE IF EXISTS promptops_observations_fts;
