-- Provenance: a fact's source (who said it; 'unspecified' when not
-- given), and an observation's provenance, the distinct sources of the
-- facts it cites, sorted, as a JSON array of strings (as entities_norm).
-- Every row written before sources existed is of 'unspecified'. Adding a
-- column with a constant default rewrites no row.
ALTER TABLE promptops_facts ADD COLUMN source text NOT NULL DEFAULT 'unspecified';
ALTER TABLE promptops_observations ADD COLUMN provenance text NOT NULL DEFAULT '["unspecified"]';
