package plan

import (
	"fmt"
	"strings"
	"time"

	"github.com/promptops/promptops/internal/tokens"
)

// MemoryItem is one recalled memory of a bank, as the bank's recall API
// (POST /v1/banks/{namespace}/{name}/recall) returns it, best first.
type MemoryItem struct {
	// ID of the observation or fact.
	ID string `json:"id"`
	// Kind is MemoryObservation, or MemoryFact for a fact not yet
	// consolidated.
	Kind MemoryKind `json:"kind"`
	// Text of the memory.
	Text string `json:"text"`
	// Score of the match, 0 to 1; higher is nearer the query.
	Score float64 `json:"score"`
	// ProofCount is how many facts support an observation (1 for a fact).
	ProofCount int `json:"proofCount"`
	// OccurredStart is when what it says started to happen, if known.
	OccurredStart *time.Time `json:"occurredStart,omitempty"`
	// OccurredEnd is when what it says stopped happening, if known.
	OccurredEnd *time.Time `json:"occurredEnd,omitempty"`
	// SourceFactIDs are the facts an observation was made from.
	SourceFactIDs []string `json:"sourceFactIds,omitempty"`
	// Trusted tells whether the item is trusted: a fact of a source the
	// bank trusts, an observation whose every source fact is (true for
	// every item of a bank that names no trusted sources).
	Trusted bool `json:"trusted"`
}

// MemoryKind is what a recalled memory is.
type MemoryKind string

// The values of MemoryItem.Kind.
const (
	// MemoryObservation is a consolidated observation of the bank.
	MemoryObservation MemoryKind = "observation"
	// MemoryFact is a fact retained and not yet consolidated.
	MemoryFact MemoryKind = "fact"
)

// MemoryLine is an item as it goes into a prompt: its text on one line
// (whitespace runs collapsed to one space), then its dates in parentheses
// when it has any: "(2026-03-01)", "(2026-03-01 to 2026-03-05)",
// "(until 2026-03-05)". Dates are UTC days.
func MemoryLine(it MemoryItem) string {
	text := strings.Join(strings.Fields(it.Text), " ")
	day := func(t *time.Time) string { return t.UTC().Format("2006-01-02") }
	s, e := it.OccurredStart, it.OccurredEnd
	if s != nil && e != nil && day(s) != day(e) {
		return text + " (" + day(s) + " to " + day(e) + ")"
	}
	if s != nil {
		return text + " (" + day(s) + ")"
	}
	if e != nil {
		return text + " (until " + day(e) + ")"
	}
	return text
}

// MemoryFit is recalled items cut to a token budget.
type MemoryFit struct {
	// Text is the kept items' lines joined by "\n".
	Text string
	// Tokens is the exact count of Text in the encoding.
	Tokens int
	// Items kept: the longest prefix of the items, in rank order, whose
	// text fits.
	Items []MemoryItem
	// Omitted counts the items left out.
	Omitted int
}

// FitMemory keeps whole items, in rank order, while their lines fit in
// maxTokens of the encoding; the first item that does not fit and every
// item after it are left out, so a kept item never ranks below an omitted
// one. Items whose line is empty are left out too. It is linear in the
// items' text: a line's tokens do not depend on the lines around it, as
// every encoding's pre-tokenizer splits at the newline that joins them,
// which the final exact count checks.
func FitMemory(encoding string, items []MemoryItem, maxTokens int) (MemoryFit, error) {
	enc, err := tokens.Get(encoding)
	if err != nil {
		return MemoryFit{}, err
	}
	if maxTokens < 0 {
		return MemoryFit{}, fmt.Errorf("maxTokens must not be negative, got %d", maxTokens)
	}
	return fitMemory(enc, items, maxTokens), nil
}

// lineCounter is what FitMemory asks of an encoder (*tokens.Encoder); tests
// give it one whose counts do not add up line by line.
type lineCounter interface {
	Count(text string) int
	CountUpTo(text string, limit int) (int, bool)
}

func fitMemory(enc lineCounter, items []MemoryItem, maxTokens int) MemoryFit {
	var b strings.Builder
	fit := MemoryFit{}
	prev := ""
	for i, it := range items {
		line := MemoryLine(it)
		if line == "" {
			fit.Omitted++
			continue
		}
		// The newline before a line is counted with the line before it.
		nl := 0
		if len(fit.Items) > 0 {
			nl = lineBreakTokens(enc, prev)
		}
		// Read no further than the budget left: n is exact unless over.
		n, over := enc.CountUpTo(line, maxTokens-fit.Tokens-nl)
		if over {
			fit.Omitted += len(items) - i
			break
		}
		if len(fit.Items) > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(line)
		prev = line
		fit.Tokens += nl + n
		fit.Items = append(fit.Items, it)
	}
	fit.Text = b.String()
	// The additive count above is exact for every encoding promptops has;
	// this is the check, and the answer when it ever is not: the last items
	// go until the text fits.
	for fit.Tokens = enc.Count(fit.Text); fit.Tokens > maxTokens; fit.Tokens = enc.Count(fit.Text) {
		fit.Items = fit.Items[:len(fit.Items)-1]
		fit.Omitted++
		fit.Text = fit.Text[:max(strings.LastIndexByte(fit.Text, '\n'), 0)]
	}
	return fit
}

// lineBreakTokens is what appending "\n" to a line adds to its count: the
// newline may join the line's trailing run of punctuation in the
// pre-tokenizer, so only the line's last word matters (a space always
// starts a pre-token).
func lineBreakTokens(enc lineCounter, line string) int {
	tail := line[max(strings.LastIndexByte(line, ' '), 0):]
	return enc.Count(tail+"\n") - enc.Count(tail)
}
