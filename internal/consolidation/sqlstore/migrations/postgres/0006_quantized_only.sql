-- Vectors are written quantized only, as qvec (the scale as little-endian
-- float32, then one int8 a dimension): the form a run compares in, a
-- quarter of vec's bytes to write with every batch and to load with every
-- run. vec stays for the rows written before, which are read from it; a
-- row written again has qvec and no vec. Fact vectors get qvec as well.
ALTER TABLE promptops_observation_vectors ALTER COLUMN vec DROP NOT NULL;
ALTER TABLE promptops_observation_vectors ADD CONSTRAINT promptops_observation_vectors_stored CHECK (qvec IS NOT NULL OR vec IS NOT NULL);
ALTER TABLE promptops_fact_vectors ADD COLUMN qvec bytea;
ALTER TABLE promptops_fact_vectors ALTER COLUMN vec DROP NOT NULL;
ALTER TABLE promptops_fact_vectors ADD CONSTRAINT promptops_fact_vectors_stored CHECK (qvec IS NOT NULL OR vec IS NOT NULL);
