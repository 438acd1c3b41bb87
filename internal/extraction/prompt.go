package extraction

import (
	"strings"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
)

// systemPromptRules is the unchanging part of every extraction prompt,
// after the bank's mission.
const systemPromptRules = `You extract durable facts from a conversation for the memory bank described above.

A durable fact is something that will still be true and useful in a later conversation: a preference, a plan, a decision, a change in the user's situation, something the user owns, uses or is responsible for, a relationship, an event that happened. Greetings, thanks, small talk, questions, the assistant's own offers and anything true only for this turn are not facts.

Rules:
- Extract facts from the NEW MESSAGES only. The EARLIER MESSAGES are context: use them to understand the new ones, never extract from them.
- Write each fact as one short standalone sentence in the third person that names who it is about ("The user prefers window seats.", "The assistant booked the user's flight to Lisbon for 14 March."), understandable without the conversation.
- Say who said it: a fact stated by the assistant or a tool is written as what they said or did, not as the user's claim.
- Resolve relative dates ("yesterday", "next Friday", "in two weeks") from the time of the message they appear in, shown in parentheses after the role, and write the resolved date in the text; give occurred_start (and occurred_end for a span) as RFC 3339 when the fact happened at a known time.
- When a message changes something said before, write the new state as a fact ("The user now lives in Porto.").
- source_message_ids lists the ids (in square brackets) of the new messages the fact comes from; cite only ids shown under NEW MESSAGES, copied exactly.
- entities lists the proper names and key things the fact is about (at most 16), optional.
- Never copy secrets, passwords, keys or text shown as [REDACTED:...] into a fact.
- No durable fact in the new messages: answer {"facts": []}.

Answer with exactly one JSON object: {"facts": [{"text": "...", "source_message_ids": ["..."], "occurred_start": "...", "occurred_end": "...", "entities": ["..."]}]}; occurred_start, occurred_end and entities may be left out.`

// SystemPrompt is the system message of every extraction call of a bank:
// its mission (consolidation.DefaultMission when it sets none), then
// the rules. It depends on nothing else, so that a
// provider's prompt cache serves it across calls.
func SystemPrompt(mission string) string {
	var b strings.Builder
	b.WriteString("## MISSION OF THIS MEMORY BANK\n")
	if mission = strings.TrimSpace(mission); mission == "" {
		mission = consolidation.DefaultMission
	}
	b.WriteString(mission)
	b.WriteString("\n\n")
	b.WriteString(systemPromptRules)
	return b.String()
}

// Line is a message as a prompt shows it: "[<label>] <role> (<at>):
// <content>", the content's own line breaks indented so that every line
// of the prompt that starts with "[" starts a message. part, when not
// empty, says which part of a cut message this is ("part 2 of 5").
func Line(label string, m consolidation.Message, content, part string) string {
	var b strings.Builder
	b.Grow(len(label) + len(content) + 64)
	b.WriteString("[")
	b.WriteString(label)
	b.WriteString("] ")
	b.WriteString(string(m.Role))
	b.WriteString(" (")
	b.WriteString(m.At.UTC().Format(time.RFC3339))
	if part != "" {
		b.WriteString(", ")
		b.WriteString(part)
	}
	b.WriteString("): ")
	b.WriteString(strings.ReplaceAll(strings.ReplaceAll(content, "\r\n", "\n"), "\n", "\n    "))
	return b.String()
}

// UserPrompt is the user message of a call: the context window under
// EARLIER MESSAGES (left out when empty), the batch under NEW MESSAGES,
// and, on a retry, the note that says why the last answer was rejected.
func UserPrompt(earlier, batch []string, correction string) string {
	var b strings.Builder
	if len(earlier) > 0 {
		b.WriteString("EARLIER MESSAGES:\n")
		for _, l := range earlier {
			b.WriteString(l)
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	b.WriteString("NEW MESSAGES:\n")
	for _, l := range batch {
		b.WriteString(l)
		b.WriteString("\n")
	}
	if correction != "" {
		b.WriteString("\n")
		b.WriteString(correction)
		b.WriteString("\n")
	}
	return b.String()
}

// AnswerSchema is the JSON schema of an answer, sent with every call.
func AnswerSchema() map[string]any {
	str := map[string]any{"type": "string"}
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"facts": map[string]any{"type": "array", "items": map[string]any{
				"type": "object",
				"properties": map[string]any{
					"text":               str,
					"source_message_ids": map[string]any{"type": "array", "items": str},
					"occurred_start":     str,
					"occurred_end":       str,
					"entities":           map[string]any{"type": "array", "items": str},
				},
				"required":             []string{"text", "source_message_ids"},
				"additionalProperties": false,
			}},
		},
		"required":             []string{"facts"},
		"additionalProperties": false,
	}
}
