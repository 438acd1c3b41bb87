-- Claims: a run claims the facts it sends to the LLM; only the holder may
-- consolidate or fail them, and a claim expires at claimed_until (UTC text
-- of fixed width, so that it compares as it sorts).
ALTER TABLE promptops_facts ADD COLUMN claimed_by TEXT;
ALTER TABLE promptops_facts ADD COLUMN claimed_until TEXT;
