package llmtest

import (
	"encoding/json"
	"regexp"
	"strings"
	"time"
)

// The extraction side of a scripted model (package extraction's prompts).

// Message is a message line of an extraction prompt: "[label] role (at[,
// part]): content".
type Message struct {
	Label, Role, Part, Content string
	At                         time.Time
	// Earlier is set for the context window's lines.
	Earlier bool
}

var messageLineRE = regexp.MustCompile(`^\[([^\]]+)\] (user|assistant|tool|system) \(([^,)]+)(?:, (part \d+ of \d+))?\): (.*)$`)

// IsExtraction says whether a request is an extraction call.
func IsExtraction(req Request) bool {
	return strings.Contains(req.User, "NEW MESSAGES:\n") && strings.Contains(req.System, "You extract durable facts")
}

// Messages parses the message lines of an extraction prompt's user
// message, the context window's marked Earlier; a content's continuation
// lines (indented) are joined back with line breaks.
func Messages(user string) []Message {
	var out []Message
	earlier := false
	for _, line := range strings.Split(user, "\n") {
		switch {
		case line == "EARLIER MESSAGES:":
			earlier = true
			continue
		case line == "NEW MESSAGES:":
			earlier = false
			continue
		case strings.HasPrefix(line, "    ") && len(out) > 0:
			out[len(out)-1].Content += "\n" + line[4:]
			continue
		}
		m := messageLineRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, _ := time.Parse(time.RFC3339, m[3])
		out = append(out, Message{Label: m[1], Role: m[2], At: at, Part: m[4], Content: m[5], Earlier: earlier})
	}
	return out
}

// ExtractedFact is a fact of an extraction answer.
type ExtractedFact struct {
	Text             string   `json:"text"`
	SourceMessageIDs []string `json:"source_message_ids"`
	OccurredStart    string   `json:"occurred_start,omitempty"`
	OccurredEnd      string   `json:"occurred_end,omitempty"`
	Entities         []string `json:"entities,omitempty"`
}

// ExtractionAnswer renders an extraction answer.
func ExtractionAnswer(facts []ExtractedFact) string {
	if facts == nil {
		facts = []ExtractedFact{}
	}
	b, _ := json.Marshal(map[string]any{"facts": facts})
	return string(b)
}
