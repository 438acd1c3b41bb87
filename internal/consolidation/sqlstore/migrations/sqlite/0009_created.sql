-- Retention: a run lists the bank's facts stored before a time in the
-- order of this index, each batch after the last one's (bank, created_at,
-- id), so every expired fact is read once a run however many there are.
CREATE INDEX promptops_facts_created ON promptops_facts (bank, created_at, id);
