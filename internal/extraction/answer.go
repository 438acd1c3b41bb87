package extraction

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/promptops/promptops/internal/strictjson"
)

// Bounds of an answer.
const (
	// MaxFactText bounds an extracted fact's text, in bytes.
	MaxFactText = 2000
	// MaxFactsPerMessage bounds the facts of an answer: this many per
	// message of its batch (or part of one).
	MaxFactsPerMessage = 16
	// MaxEntities bounds a fact's entities, MaxEntityBytes each one.
	MaxEntities    = 16
	MaxEntityBytes = 200
)

// AnswerFact is a fact of an answer as the model writes it.
type AnswerFact struct {
	Text             string   `json:"text"`
	SourceMessageIDs []string `json:"source_message_ids"`
	OccurredStart    string   `json:"occurred_start,omitempty"`
	OccurredEnd      string   `json:"occurred_end,omitempty"`
	Entities         []string `json:"entities,omitempty"`
}

// Answer is a model's answer to an extraction call.
type Answer struct {
	Facts []AnswerFact `json:"facts"`
}

// Extracted is a fact of a valid answer: its text, the batch's messages
// it cites (by index into the batch) and its times.
type Extracted struct {
	Text          string
	Messages      []int
	OccurredStart *time.Time
	OccurredEnd   *time.Time
	Entities      []string
}

// Parse decodes an answer strictly (one JSON object of the known fields,
// each once) and validates it against its batch, whose messages the
// prompt labelled labels: every fact has a text of 1 to MaxFactText bytes,
// cites at least one message of the batch and only those (a label of the
// context window or none at all refuses the answer), has RFC 3339 (or
// YYYY-MM-DD) times with the end not before the start, and at most
// MaxEntities entities; an answer holds at most MaxFactsPerMessage facts per
// message. The first problem refuses the whole answer, named by its path
// ("facts[2].source_message_ids[0]"), so that the model is asked again.
func Parse(content string, labels []string) ([]Extracted, error) {
	var a Answer
	if err := strictjson.Unmarshal([]byte(content), &a); err != nil {
		return nil, errors.New(strictjson.Describe(err).String())
	}
	if a.Facts == nil {
		return nil, errors.New(`"facts" is required`)
	}
	if most := MaxFactsPerMessage * max(1, len(labels)); len(a.Facts) > most {
		return nil, fmt.Errorf("facts: %d facts, at most %d for %d messages", len(a.Facts), most, len(labels))
	}
	index := make(map[string]int, len(labels))
	for i, l := range labels {
		index[l] = i
	}
	out := make([]Extracted, 0, len(a.Facts))
	for i, f := range a.Facts {
		x, err := validFact(f, index)
		if err != nil {
			return nil, fmt.Errorf("facts[%d].%w", i, err)
		}
		out = append(out, x)
	}
	return out, nil
}

func validFact(f AnswerFact, index map[string]int) (Extracted, error) {
	var x Extracted
	x.Text = strings.TrimSpace(f.Text)
	switch {
	case x.Text == "":
		return x, errors.New("text: is empty")
	case len(x.Text) > MaxFactText:
		return x, fmt.Errorf("text: %d bytes, at most %d", len(x.Text), MaxFactText)
	case len(f.SourceMessageIDs) == 0:
		return x, errors.New("source_message_ids: cite at least one of the NEW MESSAGES")
	case len(f.SourceMessageIDs) > 2*len(index):
		return x, fmt.Errorf("source_message_ids: %d ids, the batch has %d messages", len(f.SourceMessageIDs), len(index))
	}
	seen := map[int]bool{}
	for j, id := range f.SourceMessageIDs {
		k, ok := index[id]
		if !ok {
			return x, fmt.Errorf("source_message_ids[%d]: %q is not the id of one of the NEW MESSAGES", j, clip(id))
		}
		if !seen[k] {
			seen[k] = true
			x.Messages = append(x.Messages, k)
		}
	}
	var err error
	if x.OccurredStart, err = parseTime(f.OccurredStart); err != nil {
		return x, fmt.Errorf("occurred_start: %w", err)
	}
	if x.OccurredEnd, err = parseTime(f.OccurredEnd); err != nil {
		return x, fmt.Errorf("occurred_end: %w", err)
	}
	if x.OccurredStart != nil && x.OccurredEnd != nil && x.OccurredEnd.Before(*x.OccurredStart) {
		return x, errors.New("occurred_end: before occurred_start")
	}
	if len(f.Entities) > MaxEntities {
		return x, fmt.Errorf("entities: %d, at most %d", len(f.Entities), MaxEntities)
	}
	for j, e := range f.Entities {
		e = strings.TrimSpace(e)
		if e == "" || len(e) > MaxEntityBytes {
			return x, fmt.Errorf("entities[%d]: empty or longer than %d bytes", j, MaxEntityBytes)
		}
		x.Entities = append(x.Entities, e)
	}
	return x, nil
}

// parseTime reads an RFC 3339 time or a date (the day's start, UTC); ""
// is no time.
func parseTime(s string) (*time.Time, error) {
	if s == "" {
		return nil, nil
	}
	for _, layout := range []string{time.RFC3339Nano, time.DateOnly} {
		if t, err := time.Parse(layout, s); err == nil {
			t = t.UTC()
			return &t, nil
		}
	}
	return nil, fmt.Errorf("%q is not RFC 3339 nor YYYY-MM-DD", clip(s))
}

// clip bounds what an error quotes of the model's answer.
func clip(s string) string {
	if len(s) <= 80 {
		return s
	}
	cut := 80
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
