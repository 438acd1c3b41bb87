package consolidation

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/promptops/promptops/internal/strictjson"
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
// code fence), the three known keys only, no key twice in one object, ids
// as strings. An error means the answer cannot be used at all.
func ParseAnswer(content string) (*Answer, error) {
	s := strings.TrimSpace(content)
	if m := fenceRE.FindStringSubmatch(s); m != nil {
		s = strings.TrimSpace(m[1])
	}
	if s == "" {
		return nil, errors.New("empty answer")
	}
	a := &Answer{}
	if err := strictjson.Unmarshal([]byte(s), a); err != nil {
		p := strictjson.Describe(err)
		switch {
		case p.Repeated:
			return nil, fmt.Errorf("answer gives the key %q twice in one object", clipID(strictjson.Name(err)))
		case p.Trailing:
			return nil, errors.New("answer has data after the JSON object")
		}
		return nil, fmt.Errorf("answer is not the expected JSON object: %s", p)
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
	// Trust is the bank's trusted sources; the zero Trust trusts every
	// source.
	Trust Trust
}

// Dropped is an item of an answer that validation left out, and why.
type Dropped struct {
	Item string
	// Code is one of the Drop* reasons.
	Code   string
	Reason string
	// Facts are the batch's facts the item named as its sources.
	Facts []string
}

// Lossy tells whether dropping the item can lose what its facts said. A
// create that repeats an existing observation loses nothing, and creates
// beyond capacity are what the user asked for; every other drop leaves its
// facts unconsolidated unless another item carries them.
func (d Dropped) Lossy() bool {
	return d.Code != DropRepeated && d.Code != DropOverCapacity && d.Code != DropDuplicate && d.Code != RefusedByTrust
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

// Validate turns an answer into operations that are safe to apply and the
// items it dropped, each with a reason: an invalid item never costs the
// rest of the answer. exists tells whether a normalised text is already an
// observation of the bank; its error is the only error returned.
func Validate(a *Answer, b Batch, exists func(norm string) (bool, error)) (Ops, []Dropped, error) {
	factIDs := map[string]bool{}
	untrusted := map[string]bool{}
	for _, f := range b.Facts {
		factIDs[f.ID] = true
		if !b.Trust.Fact(f) {
			untrusted[f.ID] = true
		}
	}
	// allTrusted tells whether every fact of ids is trusted.
	allTrusted := func(ids []string) bool {
		for _, id := range ids {
			if untrusted[id] {
				return false
			}
		}
		return true
	}
	pool := map[string]*Candidate{}
	poolNorm := map[string]bool{}
	for i := range b.Pool {
		pool[b.Pool[i].ID] = &b.Pool[i]
		poolNorm[Normalize(b.Pool[i].Text)] = true
	}
	var ops Ops
	var dropped []Dropped
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
	drop := func(item, code, reason string, srcs []string) {
		dropped = append(dropped, Dropped{Item: item, Code: code, Reason: reason, Facts: srcs})
	}
	notShown := func(id string) string {
		return fmt.Sprintf("names observation %q, which is not among the existing observations shown", clipID(id))
	}

	// Deletes: only pooled observations, at most one per fact of the batch
	// and never most of the pool, so a runaway answer cannot wipe a bank;
	// past that cap every delete of the answer is dropped.
	deleted := map[string]bool{}
	var deletes []Delete
	for i, d := range a.Deletes {
		item := fmt.Sprintf("delete %d", i+1)
		switch {
		case pool[d.ObservationID] == nil:
			drop(item, DropUnknownObservation, notShown(d.ObservationID), nil)
		case deleted[d.ObservationID]:
			// A repeated delete is harmless: once is enough.
		case b.Trust.Observation(pool[d.ObservationID].Observation) && !allTrusted(b.RecalledBy[d.ObservationID]):
			// A delete names no sources: the facts that recalled the
			// observation are the ones that can have asked for it.
			drop("delete of "+d.ObservationID, RefusedByTrust, "the observation is trusted and untrusted facts recalled it; it is kept", nil)
		default:
			deleted[d.ObservationID] = true
			deletes = append(deletes, Delete{ObservationID: d.ObservationID})
		}
	}
	if n := len(deletes); n > 0 && (n > len(b.Facts) || (len(b.Pool) > 1 && n*2 > len(b.Pool))) {
		reason := fmt.Sprintf("the answer deletes %d of %d existing observations for %d new facts; deletes are only for observations directly superseded", n, len(b.Pool), len(b.Facts))
		for i := range deletes {
			drop(fmt.Sprintf("delete of %s", deletes[i].ObservationID), DropExcessDeletes, reason, nil)
		}
		deletes, deleted = nil, map[string]bool{}
	}
	ops.Deletes = deletes

	// An update whose sources' trust differs from its observation's is
	// kept as a new observation: an untrusted fact never changes a trusted
	// observation (nothing it said is lost), and a trusted fact never goes
	// into an untrusted one (trusted recall keeps it).
	type create struct {
		item, text string
		srcs       []string
		refused    string // the observation an untrusted update would have changed
	}
	var creates []create
	updated := map[string]bool{}
	for i, u := range a.Updates {
		item := fmt.Sprintf("update %d", i+1)
		srcs := validSources(u.SourceFactIDs)
		if pool[u.ObservationID] == nil {
			drop(item, DropUnknownObservation, notShown(u.ObservationID), srcs)
			continue
		}
		item = "update of " + u.ObservationID
		if len(srcs) == 0 {
			drop(item, DropNoSource, "no source_fact_ids from this batch", nil)
			continue
		}
		recalled := false
		for _, f := range b.RecalledBy[u.ObservationID] {
			for _, s := range srcs {
				recalled = recalled || f == s
			}
		}
		if !recalled {
			drop(item, DropNotRecalled, "none of its source facts recalled this observation", srcs)
			continue
		}
		if deleted[u.ObservationID] || updated[u.ObservationID] {
			drop(item, DropConflict, "the observation is already deleted or updated by this answer", srcs)
			continue
		}
		text := CleanText(u.Text)
		if text == "" || len(text) > MaxObservationText {
			drop(item, DropBadText, fmt.Sprintf("text is empty or longer than %d bytes", MaxObservationText), srcs)
			continue
		}
		if target, by := b.Trust.Observation(pool[u.ObservationID].Observation), allTrusted(srcs); target != by {
			c := create{item: item + " (kept as a new observation)", text: text, srcs: srcs}
			if target {
				c.refused = u.ObservationID
			}
			creates = append(creates, c)
			continue
		}
		updated[u.ObservationID] = true
		ops.Updates = append(ops.Updates, Update{ObservationID: u.ObservationID, Text: text, SourceFactIDs: srcs})
	}

	for i, c := range a.Creates {
		item := fmt.Sprintf("create %d", i+1)
		srcs := validSources(c.SourceFactIDs)
		if len(srcs) == 0 {
			drop(item, DropNoSource, "no source_fact_ids from this batch", nil)
			continue
		}
		text := CleanText(c.Text)
		if text == "" || len(text) > MaxObservationText {
			drop(item, DropBadText, fmt.Sprintf("text is empty or longer than %d bytes", MaxObservationText), srcs)
			continue
		}
		creates = append(creates, create{item: item, text: text, srcs: srcs})
	}
	newNorm := map[string]bool{}
	for _, c := range creates {
		item, text, srcs := c.item, c.text, c.srcs
		if c.refused != "" {
			drop("update of "+c.refused, RefusedByTrust, "the observation is trusted and untrusted facts asked to change it; the update is kept as a new observation instead", srcs)
		}
		norm := Normalize(text)
		if poolNorm[norm] || newNorm[norm] {
			drop(item, DropRepeated, "repeats an existing or another new observation", srcs)
			continue
		}
		if exists != nil {
			dup, err := exists(norm)
			if err != nil {
				return Ops{}, nil, err
			}
			if dup {
				drop(item, DropRepeated, "repeats an existing observation", srcs)
				continue
			}
		}
		if b.Remaining >= 0 && len(ops.Creates) >= b.Remaining {
			drop(item, DropOverCapacity, "the bank is at its observation capacity", srcs)
			continue
		}
		newNorm[norm] = true
		ops.Creates = append(ops.Creates, Create{Text: text, SourceFactIDs: srcs})
	}
	return ops, dropped, nil
}

// clipID keeps an invented id short in messages.
func clipID(id string) string {
	if len(id) > 80 {
		return strings.ToValidUTF8(id[:80], "") + "..."
	}
	return id
}
