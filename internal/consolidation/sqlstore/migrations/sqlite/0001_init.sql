CREATE TABLE promptops_banks (
  id          TEXT PRIMARY KEY,
  created_at  TEXT NOT NULL
);

CREATE TABLE promptops_facts (
  bank             TEXT NOT NULL,
  id               TEXT NOT NULL,
  text             TEXT NOT NULL CHECK (text <> ''),
  entities         TEXT NOT NULL DEFAULT '[]',
  tags             TEXT NOT NULL DEFAULT '[]',
  occurred_start   TEXT,
  occurred_end     TEXT,
  mentioned_at     TEXT,
  created_at       TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  status           TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'consolidated', 'failed')),
  failure_reason   TEXT,
  consolidated_at  TEXT,
  PRIMARY KEY (bank, id)
);
CREATE INDEX promptops_facts_pending ON promptops_facts (bank, status, created_at, id);

CREATE TABLE promptops_observations (
  bank            TEXT NOT NULL,
  id              TEXT NOT NULL,
  text            TEXT NOT NULL,
  text_norm       TEXT NOT NULL,
  proof_count     INTEGER NOT NULL,
  occurred_start  TEXT,
  occurred_end    TEXT,
  entities_norm   TEXT NOT NULL DEFAULT '[]',
  created_at      TEXT NOT NULL,
  updated_at      TEXT NOT NULL,
  PRIMARY KEY (bank, id)
);
CREATE INDEX promptops_observations_norm ON promptops_observations (bank, text_norm);

-- Trigram full-text index of observation texts, for recall (works for
-- Chinese as for English). Kept in step by the store in each transaction.
CREATE VIRTUAL TABLE promptops_observations_fts USING fts5(text, bank UNINDEXED, observation_id UNINDEXED, tokenize = 'trigram');

CREATE TABLE promptops_observation_sources (
  bank            TEXT NOT NULL,
  observation_id  TEXT NOT NULL,
  fact_id         TEXT NOT NULL,
  PRIMARY KEY (bank, observation_id, fact_id)
);

CREATE TABLE promptops_observation_history (
  seq             INTEGER PRIMARY KEY AUTOINCREMENT,
  bank            TEXT NOT NULL,
  observation_id  TEXT NOT NULL,
  change          TEXT NOT NULL CHECK (change IN ('update', 'delete')),
  previous_text   TEXT NOT NULL,
  changed_at      TEXT NOT NULL
);
CREATE INDEX promptops_observation_history_obs ON promptops_observation_history (bank, observation_id, seq);
