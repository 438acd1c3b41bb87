-- Messages: what was said in a conversation, retained as it was said for
-- a run to extract facts from. Keyed as facts are (bank holds the scope's
-- key), so a scope's erasure, export and retention reach them. The role
-- is the message's source for the trust rules. A new table: no existing
-- row changes.
CREATE TABLE promptops_messages (
  bank            text NOT NULL,
  id              text NOT NULL,
  conversation    text NOT NULL CHECK (conversation <> ''),
  role            text NOT NULL CHECK (role IN ('user', 'assistant', 'tool', 'system')),
  content         text NOT NULL CHECK (content <> ''),
  at              timestamptz NOT NULL,
  created_at      timestamptz NOT NULL,
  -- A message's place in its conversation, as integers both stores
  -- compare alike: when it was said and when the bank stored it, in
  -- nanoseconds since 1970 (then its id).
  at_ns           bigint NOT NULL,
  created_ns      bigint NOT NULL,
  status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'extracted', 'failed')),
  failure_reason  text,
  PRIMARY KEY (bank, id)
);
CREATE INDEX promptops_messages_conversation ON promptops_messages (bank, conversation, at_ns, created_ns, id);
-- A run finds the conversations with pending messages.
CREATE INDEX promptops_messages_pending ON promptops_messages (bank, status, conversation);
CREATE INDEX promptops_messages_created ON promptops_messages (bank, created_at, id);
