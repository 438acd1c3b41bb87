-- Observation vectors also as the run keeps them in memory: float32 scale
-- (little-endian) then one int8 a dimension. A run loads these, a quarter
-- of vec's bytes; rows written before have none and are loaded from vec.
ALTER TABLE promptops_observation_vectors ADD COLUMN qvec bytea;
