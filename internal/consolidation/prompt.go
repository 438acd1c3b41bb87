package consolidation

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// DefaultMission is used when a bank sets none.
const DefaultMission = "Track every detail: names, numbers, dates, places, and relationships. Prefer specifics over abstractions, never generalise."

const roleLine = "You are a memory consolidation system. Synthesize facts into observations and merge with existing observations when appropriate."

// ProcessingRules are always present, whatever the mission.
const ProcessingRules = `Processing rules (always apply):

1. ONE OBSERVATION PER DISTINCT FACET: each observation tracks exactly one specific facet — a count ("has 3 items"), a named entity ("has a dog named Rex"), a relationship ("works at Google"), etc. Never merge different facets into one observation.

2. MATCH BY ENTITY/FACET, NOT TOPIC: when deciding whether to UPDATE vs CREATE, match on the specific entity or facet. "Sold item X" updates only the X observation. "Now has 5 items" updates only the count observation. Do not update observations about different entities just because they share a general topic.

3. STATE CHANGES — UPDATE CONCISELY: when a fact changes the state of something ("sold X", "X died", "moved to Y"), UPDATE the matching observation to reflect the current state. Include dates when available. Keep it concise — only information about THAT specific facet. Example: "User owned a dog named Rex who died on March 15, 2025". Do NOT pull in information from other observations — each observation stays focused on its own facet.

4. CASCADE TO ALL AFFECTED OBSERVATIONS: a state change may affect multiple observations. For example, if entity C is removed from a group, update BOTH the individual observation for C AND any list/group observation that includes C (remove C from the list while keeping all other members intact).

5. NO COMPUTATION: you do not have the full picture — never calculate, derive, or adjust numeric values. If the user says "I have 2 dogs" and then "I have a dog named Rex", do NOT update the count to 3 — you don't know if Rex is one of the 2 or a new one. If the user says "I sold X", do NOT decrement a count. Only update a count when the user explicitly states a new count. Synthesize and consolidate what was stated, but never do arithmetic or logical deductions.

6. SAME FACET → UPDATE, NOT CREATE: a new count supersedes the old count — UPDATE the existing count observation, don't create a second one. If there's an existing observation for the same specific facet, always UPDATE it rather than creating a duplicate.

7. PRESERVE HISTORY: observations that record significant events (sold, died, moved, changed) are important history — never DELETE them. Only delete an observation when it is restated identically or truly meaningless. Be very conservative with deletes.

8. RESOLVE REFERENCES: when a new fact provides a concrete value for a vague placeholder in an existing observation (e.g., "home country" → "Sweden"), UPDATE to embed the resolved value.

9. NEVER merge observations about different people or unrelated topics.`

// OutputFormat is the answer format with its example.
const OutputFormat = `Output a JSON object with three arrays.

## EXAMPLE

Input facts:
[a1b2c3d4-e5f6-7890-abcd-ef1234567890] Alice mentioned she works long hours, often past midnight | Involving: Alice (occurred_start=2024-01-15, mentioned_at=2024-01-15)
[b2c3d4e5-f6a7-8901-bcde-f12345678901] Alice said she's exhausted from the project deadlines | Involving: Alice (occurred_start=2024-01-20, mentioned_at=2024-01-20)

Good observation text — clean prose, no metadata, each fact tracked distinctly:
  "Alice works long hours, often past midnight."
  "Alice feels exhausted from project deadlines."

Bad observation text — NEVER do this (verbatim copy of fact text with metadata):
  "Alice mentioned she works long hours, often past midnight | Involving: Alice (occurred_start=2024-01-15, mentioned_at=2024-01-15)"

Observation text rules:
- Write clean prose — NEVER copy raw fact lines or their metadata (temporal fields, "Involving:", "When:" labels, UUIDs).
- Parenthesized metadata like (occurred_start=...) and pipe-separated labels like "| Involving: ..." are fact formatting — strip them entirely from observation text.
- How many observations to create and how much to aggregate is driven by the MISSION above.

{"creates": [{"text": "Alice works long hours, often past midnight.", "source_fact_ids": ["a1b2c3d4-e5f6-7890-abcd-ef1234567890"]}, {"text": "Alice feels exhausted from project deadlines.", "source_fact_ids": ["b2c3d4e5-f6a7-8901-bcde-f12345678901"]}],
  "updates": [{"text": "Alice works at Acme Corp as a senior engineer", "observation_id": "c3d4e5f6-a7b8-9012-cdef-123456789012", "source_fact_ids": ["d4e5f6a7-b8c9-0123-defa-234567890123"]}],
  "deletes": [{"observation_id": "e5f6a7b8-c9d0-1234-efab-345678901234"}]}

Rules:
- "source_fact_ids": copy the EXACT UUID strings shown in brackets [uuid] from NEW FACTS — never use integers or positions.
- "observation_id": copy the EXACT "id" UUID string from EXISTING OBSERVATIONS.
- One create/update may reference multiple facts when they jointly support the observation.
- "deletes": only when an observation is directly superseded or contradicted by new facts.
- Do NOT include "tags" — handled automatically.
- Return {"creates": [], "updates": [], "deletes": []} if nothing durable is found.`

const dataSection = `NEW FACTS:
%s

EXISTING OBSERVATIONS (JSON array, pooled from recalls across all facts above):
%s

Each observation includes:
- id: unique identifier for updating
- text: the observation content
- proof_count: number of supporting memories
- occurred_start/occurred_end: temporal range of source facts
- source_memories: array of supporting facts with their text and dates

Compare the facts against existing observations:
- Same facet as an existing observation → UPDATE it (observation_id + source_fact_ids)
- New facet with durable knowledge → CREATE a new observation (source_fact_ids)
- Cross-reference facts within the batch: a later fact may resolve a vague reference in an earlier one
- Purely ephemeral facts → omit them unless the MISSION above explicitly targets such data (e.g. timestamped events, session state, screen content)`

// SystemPrompt is the part of the consolidation prompt that never changes
// for a bank (role, mission, rules, output format): it goes first, as the
// system message, so providers can cache it.
func SystemPrompt(mission string) string {
	if strings.TrimSpace(mission) == "" {
		mission = DefaultMission
	}
	return roleLine + "\n\n## MISSION\n" + mission + "\n\n" + ProcessingRules + "\n\n" + OutputFormat
}

// MissionHash identifies a mission: "sha256:" and the hash of the system
// prompt it produces, so the default mission has a hash too.
func MissionHash(mission string) string {
	sum := sha256.Sum256([]byte(SystemPrompt(mission)))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// CapacityNote says how many observations may still be created, or "" when
// the bank has no cap or plenty of room.
func CapacityNote(maxObservations, count int) string {
	return capacityNote("The bank", maxObservations, count)
}

// ScopeCapacityNote is CapacityNote for a scope's own cap
// (maxObservationsPerScope), said of the memory of the one counterpart the
// call's facts are about.
func ScopeCapacityNote(maxObservations, count int) string {
	return capacityNote("The memory these facts belong to", maxObservations, count)
}

func capacityNote(subject string, maxObservations, count int) string {
	if maxObservations <= 0 {
		return ""
	}
	left := maxObservations - count
	switch {
	case left <= 0:
		return fmt.Sprintf("%s is at its capacity of %d observations. Do NOT create any observation: only UPDATE or DELETE existing ones. Fold new information into the closest matching observation.", subject, maxObservations)
	case left <= max(3, maxObservations/10):
		return fmt.Sprintf("%s holds %d of at most %d observations: only %d more may be created. Strongly prefer UPDATING existing observations; create only for clearly new, durable facets.", subject, count, maxObservations, left)
	default:
		return ""
	}
}

// Remaining is how many creates capacity allows; -1 means no cap.
func Remaining(maxObservations, count int) int {
	if maxObservations <= 0 {
		return -1
	}
	return max(0, maxObservations-count)
}

// UserPrompt is the per-call part: the capacity note and the data.
func UserPrompt(capacityNote string, facts []Fact, pool []Candidate) string {
	var b strings.Builder
	if capacityNote != "" {
		b.WriteString("## CAPACITY CONSTRAINT\n")
		b.WriteString(capacityNote)
		b.WriteString("\n\n")
	}
	b.WriteString(fmt.Sprintf(dataSection, FormatFacts(facts), FormatObservations(pool)))
	return b.String()
}

// FormatFacts renders facts as
// "[uuid] text | Involving: A, B (occurred_start=..., mentioned_at=...)".
func FormatFacts(facts []Fact) string {
	lines := make([]string, 0, len(facts))
	for _, f := range facts {
		var b strings.Builder
		b.WriteString("[" + f.ID + "] " + oneLine(f.Text))
		if len(f.Entities) > 0 {
			b.WriteString(" | Involving: " + strings.Join(f.Entities, ", "))
		}
		var dates []string
		if f.OccurredStart != nil {
			dates = append(dates, "occurred_start="+day(*f.OccurredStart))
		}
		if f.OccurredEnd != nil {
			dates = append(dates, "occurred_end="+day(*f.OccurredEnd))
		}
		if f.MentionedAt != nil {
			dates = append(dates, "mentioned_at="+day(*f.MentionedAt))
		}
		if len(dates) > 0 {
			b.WriteString(" (" + strings.Join(dates, ", ") + ")")
		}
		lines = append(lines, b.String())
	}
	return strings.Join(lines, "\n")
}

type promptObservation struct {
	ID             string         `json:"id"`
	Text           string         `json:"text"`
	ProofCount     int            `json:"proof_count"`
	OccurredStart  string         `json:"occurred_start,omitempty"`
	OccurredEnd    string         `json:"occurred_end,omitempty"`
	SourceMemories []sourceMemory `json:"source_memories"`
}

type sourceMemory struct {
	Text          string `json:"text"`
	OccurredStart string `json:"occurred_start,omitempty"`
	MentionedAt   string `json:"mentioned_at,omitempty"`
}

// FormatObservations renders the pool as a JSON array.
func FormatObservations(pool []Candidate) string {
	out := make([]promptObservation, 0, len(pool))
	for _, c := range pool {
		po := promptObservation{ID: c.ID, Text: c.Text, ProofCount: c.ProofCount, OccurredStart: dayPtr(c.OccurredStart), OccurredEnd: dayPtr(c.OccurredEnd), SourceMemories: []sourceMemory{}}
		for _, s := range c.Sources {
			po.SourceMemories = append(po.SourceMemories, sourceMemory{Text: s.Text, OccurredStart: dayPtr(s.OccurredStart), MentionedAt: dayPtr(s.MentionedAt)})
		}
		out = append(out, po)
	}
	data, _ := json.MarshalIndent(out, "", "  ")
	return string(data)
}

func day(t time.Time) string { return t.UTC().Format("2006-01-02") }

func dayPtr(t *time.Time) string {
	if t == nil {
		return ""
	}
	return day(*t)
}

// oneLine keeps a fact on one line of the prompt.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// ResponseSchema is the JSON schema of an answer; creates has maxItems when
// capacity caps it (remaining >= 0).
func ResponseSchema(remaining int) map[string]any {
	ids := map[string]any{"type": "array", "items": map[string]any{"type": "string"}}
	creates := map[string]any{"type": "array", "items": map[string]any{
		"type":                 "object",
		"properties":           map[string]any{"text": map[string]any{"type": "string"}, "source_fact_ids": ids},
		"required":             []string{"text", "source_fact_ids"},
		"additionalProperties": false,
	}}
	if remaining >= 0 {
		creates["maxItems"] = remaining
	}
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"creates": creates,
			"updates": map[string]any{"type": "array", "items": map[string]any{
				"type":                 "object",
				"properties":           map[string]any{"text": map[string]any{"type": "string"}, "observation_id": map[string]any{"type": "string"}, "source_fact_ids": ids},
				"required":             []string{"text", "observation_id", "source_fact_ids"},
				"additionalProperties": false,
			}},
			"deletes": map[string]any{"type": "array", "items": map[string]any{
				"type":                 "object",
				"properties":           map[string]any{"observation_id": map[string]any{"type": "string"}},
				"required":             []string{"observation_id"},
				"additionalProperties": false,
			}},
		},
		"required":             []string{"creates", "updates", "deletes"},
		"additionalProperties": false,
	}
}
