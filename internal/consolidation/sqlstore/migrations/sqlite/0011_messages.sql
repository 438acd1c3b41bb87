-- Messages: what was said in a conversation, retained as it was said for
-- a run to extract facts from. Keyed as facts are (bank holds the scope's
-- key), so a scope's erasure, export and retention reach them. The role
-- is the message's source for the trust rules. A new table: no existing
-- row changes.
CREATE TABLE promptops_messages (
  bank            TEXT NOT NULL,
  id              TEXT NOT NULL,
  conversation    TEXT NOT NULL CHECK (conversation <> ''),
  role            TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool', 'system')),
  content         TEXT NOT NULL CHECK (content <> ''),
  at              TEXT NOT NULL,
  created_at      TEXT NOT NULL,
  status          TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'extracted', 'failed')),
  failure_reason  TEXT,
  PRIMARY KEY (bank, id)
);
CREATE INDEX promptops_messages_conversation ON promptops_messages (bank, conversation, at, id);
CREATE INDEX promptops_messages_created ON promptops_messages (bank, created_at, id);
