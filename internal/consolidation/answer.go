package consolidation

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// Answer is the LLM's JSON answer as parsed, before validation.
type Answer struct {
	Creates []struct {
		Text          string   `json:"text"`
		SourceFactIDs []string `json:"source_fact_ids"`
	} `json:"creates"`
	Updates []struct {
		Text          string   `json:"text"`
		ObservationID string   `json:"observation_id"`
		SourceFactIDs []string `json:"source_fact_ids"`
	} `json:"updates"`
	Deletes []struct {
		ObservationID string `json:"observation_id"`
	} `json:"deletes"`
}

// MaxObservationText bounds an observation's text, in bytes.
const MaxObservationText = 4000

var fenceRE = regexp.MustCompile("(?s)^```[a-zA-Z0-9_-]*\\s*\n(.*?)\n?```$")

// ParseAnswer parses an answer strictly: one JSON object (optionally in a
// code fence), the three known keys only, ids as strings.
func ParseAnswer(content string) (*Answer, error) {
	s := strings.TrimSpace(content)
	if m := fenceRE.FindStringSubmatch(s); m != nil {
		s = strings.TrimSpace(m[1])
	}
	if s == "" {
		return nil, errors.New("empty answer")
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	a := &Answer{}
	if err := dec.Decode(a); err != nil {
		return nil, fmt.Errorf("answer is not the expected JSON object: %w", err)
	}
	if dec.More() {
		return nil, errors.New("answer has data after the JSON object")
	}
	var rest bytes.Buffer
	if _, err := rest.ReadFrom(dec.Buffered()); err == nil && strings.TrimSpace(rest.String()) != "" {
		return nil, errors.New("answer has data after the JSON object")
	}
	return a, nil
}

// Batch is what validation checks an answer against.
type Batch struct {
	Facts []Fact
	Pool  []Candidate
	// RecalledBy maps an observation id to the ids of the batch's facts that
	// recalled it.
	RecalledBy map[string][]string
	// Remaining creates capacity allows; -1: no cap.
	Remaining int
}

// Dropped is an item of an answer that validation left out, and why.
type Dropped struct {
	Item   string
	Reason string
}

// InvalidAnswerError means the answer cannot be used at all; the batch is
// asked again, then split.
type InvalidAnswerError struct{ Reason string }

func (e *InvalidAnswerError) Error() string { return "invalid answer: " + e.Reason }

var (
	bracketUUIDRE = regexp.MustCompile(`\[[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\]`)
	involvingRE   = regexp.MustCompile(`\s*\|\s*Involving:[^()\n]*`)
	metaParenRE   = regexp.MustCompile(`\s*\((?:occurred_start|occurred_end|mentioned_at)=[^)]*\)`)
	metaFieldRE   = regexp.MustCompile(`(?:occurred_start|occurred_end|mentioned_at)=\S*`)
)

// CleanText strips fact metadata ("| Involving: ...", "(occurred_start=...)",
// bracketed UUIDs) from an observation's text.
func CleanText(s string) string {
	s = bracketUUIDRE.ReplaceAllString(s, "")
	s = metaParenRE.ReplaceAllString(s, "")
	s = involvingRE.ReplaceAllString(s, "")
	s = metaFieldRE.ReplaceAllString(s, "")
	return strings.Join(strings.Fields(s), " ")
}

// Normalize is the form used to find repeated observations: lower case,
// letters and digits only, single spaces.
func Normalize(s string) string {
	var b strings.Builder
	space := false
	for _, r := range strings.ToLower(s) {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			if space && b.Len() > 0 {
				b.WriteByte(' ')
			}
			space = false
			b.WriteRune(r)
		} else {
			space = true
		}
	}
	return b.String()
}

// Validate turns an answer into operations that are safe to apply. Items
// that are merely unusable are dropped with a reason; an answer that names
// observations outside the pool, or would delete more than the batch can
// justify, is invalid as a whole. exists tells whether a normalised text is
// already an observation of the bank.
func Validate(a *Answer, b Batch, exists func(norm string) (bool, error)) (Ops, []Dropped, error) {
	factIDs := map[string]bool{}
	for _, f := range b.Facts {
		factIDs[f.ID] = true
	}
	pool := map[string]*Candidate{}
	poolNorm := map[string]bool{}
	for i := range b.Pool {
		pool[b.Pool[i].ID] = &b.Pool[i]
		poolNorm[Normalize(b.Pool[i].Text)] = true
	}
	var ops Ops
	var dropped []Dropped
	drop := func(item, reason string) { dropped = append(dropped, Dropped{Item: item, Reason: reason}) }
	validSources := func(ids []string) []string {
		var out []string
		seen := map[string]bool{}
		for _, id := range ids {
			if factIDs[id] && !seen[id] {
				seen[id] = true
				out = append(out, id)
			}
		}
		return out
	}

	// Deletes: only pooled observations, at most one per fact of the batch
	// and never most of the pool, so a runaway answer cannot wipe a bank.
	deleted := map[string]bool{}
	for _, d := range a.Deletes {
		if pool[d.ObservationID] == nil {
			return Ops{}, nil, &InvalidAnswerError{Reason: fmt.Sprintf("delete names observation %q, which is not among the existing observations shown", d.ObservationID)}
		}
		if !deleted[d.ObservationID] {
			deleted[d.ObservationID] = true
			ops.Deletes = append(ops.Deletes, Delete{ObservationID: d.ObservationID})
		}
	}
	if n := len(ops.Deletes); n > 0 && (n > len(b.Facts) || (len(b.Pool) > 1 && n*2 > len(b.Pool))) {
		return Ops{}, nil, &InvalidAnswerError{Reason: fmt.Sprintf("answer deletes %d of %d existing observations for %d new facts; deletes are only for observations directly superseded", n, len(b.Pool), len(b.Facts))}
	}

	updated := map[string]bool{}
	for _, u := range a.Updates {
		obs := pool[u.ObservationID]
		if obs == nil {
			return Ops{}, nil, &InvalidAnswerError{Reason: fmt.Sprintf("update names observation %q, which is not among the existing observations shown", u.ObservationID)}
		}
		item := "update of " + u.ObservationID
		srcs := validSources(u.SourceFactIDs)
		if len(srcs) == 0 {
			drop(item, "no source_fact_ids from this batch")
			continue
		}
		recalled := false
		for _, f := range b.RecalledBy[u.ObservationID] {
			for _, s := range srcs {
				recalled = recalled || f == s
			}
		}
		if !recalled {
			drop(item, "none of its source facts recalled this observation")
			continue
		}
		if deleted[u.ObservationID] || updated[u.ObservationID] {
			drop(item, "the observation is already deleted or updated by this answer")
			continue
		}
		text := CleanText(u.Text)
		if text == "" || len(text) > MaxObservationText {
			drop(item, fmt.Sprintf("text is empty or longer than %d bytes", MaxObservationText))
			continue
		}
		updated[u.ObservationID] = true
		ops.Updates = append(ops.Updates, Update{ObservationID: u.ObservationID, Text: text, SourceFactIDs: srcs})
	}

	newNorm := map[string]bool{}
	for i, c := range a.Creates {
		item := fmt.Sprintf("create %d", i+1)
		srcs := validSources(c.SourceFactIDs)
		if len(srcs) == 0 {
			drop(item, "no source_fact_ids from this batch")
			continue
		}
		text := CleanText(c.Text)
		if text == "" || len(text) > MaxObservationText {
			drop(item, fmt.Sprintf("text is empty or longer than %d bytes", MaxObservationText))
			continue
		}
		norm := Normalize(text)
		if poolNorm[norm] || newNorm[norm] {
			drop(item, "repeats an existing or another new observation")
			continue
		}
		if exists != nil {
			dup, err := exists(norm)
			if err != nil {
				return Ops{}, nil, err
			}
			if dup {
				drop(item, "repeats an existing observation")
				continue
			}
		}
		if b.Remaining >= 0 && len(ops.Creates) >= b.Remaining {
			drop(item, "the bank is at its observation capacity")
			continue
		}
		newNorm[norm] = true
		ops.Creates = append(ops.Creates, Create{Text: text, SourceFactIDs: srcs})
	}
	return ops, dropped, nil
}
