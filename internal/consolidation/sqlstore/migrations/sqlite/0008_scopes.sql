-- Scopes: a scope's rows carry the key namespace/name/scope in bank (the
-- shared scope keeps namespace/name), so every per-bank index and
-- generation works per scope. erasures counts the erasures in a bank (on
-- its own row): a served copy of a scope made before one is never served
-- after it. The partial index lists the scopes with pending facts.
ALTER TABLE promptops_banks ADD COLUMN erasures INTEGER NOT NULL DEFAULT 0;
CREATE INDEX promptops_facts_pending_scopes ON promptops_facts (bank, created_at) WHERE status = 'pending';
