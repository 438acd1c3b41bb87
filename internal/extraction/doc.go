// Package extraction turns a bank's retained messages into facts: the
// first step of a consolidation run when applications retain
// conversations (POST .../messages) rather than facts.
//
// A run extracts conversation by conversation, a batch of one
// conversation's pending messages at a time (Settings.MessagesPerBatch),
// with a bounded window of the messages said before them for context
// (Settings.ContextMessages), in a prompt that fits Settings.MaxPromptTokens
// in exact tokens of the bank's encoding. The prompt's system message is
// the same for every call of a bank (the mission and the rules), so a
// provider's prompt cache serves it; the messages follow in the user
// message. The answer is validated strictly (Parse): a fact must cite
// messages of its batch. An unusable answer is asked again with the
// reason, then the batch is split in halves, and a single message still
// without a usable answer is marked failed and kept. A message too long
// for any prompt is cut at token boundaries into parts that each fit.
//
// Extracted facts get derived ids (consolidation.DerivedFactID), so a
// message extracted twice makes no second fact; their scope is the
// conversation's, their source the least trusted role of the messages they
// cite, their mention time the latest of those messages' times. They are
// stored pending, and the same run consolidates them.
//
// The package knows nothing of SQL or HTTP: the Store and the LLM are
// ports (sqlstore and the llm client implement them), and the run's token
// budget is consolidation.Budget.
package extraction
