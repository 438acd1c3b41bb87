-- Claims: a run claims the facts it sends to the LLM; only the holder may
-- consolidate or fail them, and a claim expires at claimed_until.
ALTER TABLE promptops_facts ADD COLUMN claimed_by text, ADD COLUMN claimed_until timestamptz;
