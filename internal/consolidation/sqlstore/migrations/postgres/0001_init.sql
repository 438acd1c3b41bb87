CREATE EXTENSION IF NOT EXISTS pg_trgm;

CREATE TABLE promptops_banks (
  id          text PRIMARY KEY,
  created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE promptops_facts (
  bank             text NOT NULL,
  id               text NOT NULL,
  text             text NOT NULL CHECK (text <> ''),
  entities         text NOT NULL DEFAULT '[]',
  tags             text NOT NULL DEFAULT '[]',
  occurred_start   timestamptz,
  occurred_end     timestamptz,
  mentioned_at     timestamptz,
  created_at       timestamptz NOT NULL DEFAULT now(),
  status           text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'consolidated', 'failed')),
  failure_reason   text,
  consolidated_at  timestamptz,
  PRIMARY KEY (bank, id)
);
CREATE INDEX promptops_facts_pending ON promptops_facts (bank, status, created_at, id);

CREATE TABLE promptops_observations (
  bank            text NOT NULL,
  id              text NOT NULL,
  text            text NOT NULL,
  text_norm       text NOT NULL,
  proof_count     integer NOT NULL,
  occurred_start  timestamptz,
  occurred_end    timestamptz,
  entities_norm   text NOT NULL DEFAULT '[]',
  created_at      timestamptz NOT NULL,
  updated_at      timestamptz NOT NULL,
  PRIMARY KEY (bank, id)
);
CREATE INDEX promptops_observations_norm ON promptops_observations (bank, text_norm);
CREATE INDEX promptops_observations_trgm ON promptops_observations USING gist (text gist_trgm_ops);

CREATE TABLE promptops_observation_sources (
  bank            text NOT NULL,
  observation_id  text NOT NULL,
  fact_id         text NOT NULL,
  PRIMARY KEY (bank, observation_id, fact_id)
);

CREATE TABLE promptops_observation_history (
  seq             bigserial PRIMARY KEY,
  bank            text NOT NULL,
  observation_id  text NOT NULL,
  change          text NOT NULL CHECK (change IN ('update', 'delete')),
  previous_text   text NOT NULL,
  changed_at      timestamptz NOT NULL
);
CREATE INDEX promptops_observation_history_obs ON promptops_observation_history (bank, observation_id, seq);
