package serve

import (
	"fmt"
	"strings"
	"testing"

	"github.com/promptops/promptops/internal/consolidation"
)

// A fact at every bound passes; one past any of them is refused naming
// the field.
func TestFactBoundsAtTheirEdges(t *testing.T) {
	labels := func(n, size int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = strings.Repeat("l", size)
		}
		return out
	}
	at := func() consolidation.Fact {
		return consolidation.Fact{
			Text: strings.Repeat("t", MaxFactTextBytes), ID: strings.Repeat("i", MaxFactIDBytes),
			Entities: labels(MaxFactLabels, MaxLabelBytes), Tags: labels(MaxFactLabels, MaxLabelBytes),
		}
	}
	if msg := factBounds(at()); msg != "" {
		t.Fatalf("a fact at every bound: %s", msg)
	}
	for _, tc := range []struct {
		past func(f *consolidation.Fact)
		want string
	}{
		{func(f *consolidation.Fact) { f.Text += "t" }, "text: 65537 bytes, at most 65536"},
		{func(f *consolidation.Fact) { f.ID += "i" }, "id: 129 bytes, at most 128"},
		{func(f *consolidation.Fact) { f.Entities = append(f.Entities, "e") }, "entities: 65 items, at most 64"},
		{func(f *consolidation.Fact) { f.Tags = append(f.Tags, "t") }, "tags: 65 items, at most 64"},
		{func(f *consolidation.Fact) { f.Entities[3] += "e" }, "entities[3]: 257 bytes, at most 256"},
		{func(f *consolidation.Fact) { f.Tags[63] += "t" }, "tags[63]: 257 bytes, at most 256"},
	} {
		f := at()
		tc.past(&f)
		if msg := factBounds(f); msg != tc.want {
			t.Errorf("got %q, want %q", msg, tc.want)
		}
	}
}

// A recall's tag may be MaxLabelBytes long, not one byte more.
func TestRecallTagBound(t *testing.T) {
	maxTokens := 10
	req := RecallRequest{Query: "q", MaxTokens: &maxTokens, Tags: []string{strings.Repeat("t", MaxLabelBytes)}}
	if _, msg := recallQuery(&req); msg != "" {
		t.Fatalf("a tag of %d bytes: %s", MaxLabelBytes, msg)
	}
	req.Tags[0] += "t"
	if _, msg := recallQuery(&req); msg != "tags[0]: 257 bytes, want 1..256" {
		t.Fatalf("a tag of 257 bytes: %q", msg)
	}
}

// A recall may name MaxRecallTags tags, not one more.
func TestRecallTagCount(t *testing.T) {
	maxTokens := 10
	req := RecallRequest{Query: "q", MaxTokens: &maxTokens, Tags: make([]string, MaxRecallTags)}
	for i := range req.Tags {
		req.Tags[i] = "t"
	}
	if _, msg := recallQuery(&req); msg != "" {
		t.Fatalf("%d tags: %s", MaxRecallTags, msg)
	}
	req.Tags = append(req.Tags, "t")
	if _, msg := recallQuery(&req); msg != fmt.Sprintf("tags: %d items, at most %d", MaxRecallTags+1, MaxRecallTags) {
		t.Fatalf("%d tags: %q", MaxRecallTags+1, msg)
	}
}

// A recall at every bound of recallQuery passes; one past any of them is
// refused naming the field.
func TestRecallQueryBounds(t *testing.T) {
	ptr := func(n int) *int { return &n }
	score := func(f float64) *float64 { return &f }
	ok := func() RecallRequest { return RecallRequest{Query: "q", MaxTokens: ptr(10)} }
	for _, tc := range []struct {
		past func(*RecallRequest)
		want string
	}{
		{func(r *RecallRequest) { r.Query = strings.Repeat("q", MaxQueryBytes) }, ""},
		{func(r *RecallRequest) { r.Query = strings.Repeat("q", MaxQueryBytes+1) }, fmt.Sprintf("query: %d bytes, at most %d", MaxQueryBytes+1, MaxQueryBytes)},
		{func(r *RecallRequest) { r.MaxTokens = ptr(1) }, ""},
		{func(r *RecallRequest) { r.MaxTokens = ptr(0) }, fmt.Sprintf("maxTokens: 0, want 1..%d", MaxRecallTokens)},
		{func(r *RecallRequest) { r.MaxTokens = ptr(MaxRecallTokens) }, ""},
		{func(r *RecallRequest) { r.MaxTokens = ptr(MaxRecallTokens + 1) }, fmt.Sprintf("maxTokens: %d, want 1..%d", MaxRecallTokens+1, MaxRecallTokens)},
		{func(r *RecallRequest) { r.MaxItems = ptr(1) }, ""},
		{func(r *RecallRequest) { r.MaxItems = ptr(0) }, fmt.Sprintf("maxItems: 0, want 1..%d", MaxRecallItems)},
		{func(r *RecallRequest) { r.MaxItems = ptr(MaxRecallItems) }, ""},
		{func(r *RecallRequest) { r.MaxItems = ptr(MaxRecallItems + 1) }, fmt.Sprintf("maxItems: %d, want 1..%d", MaxRecallItems+1, MaxRecallItems)},
		{func(r *RecallRequest) { r.MinScorePerMille = score(0) }, ""},
		{func(r *RecallRequest) { r.MinScorePerMille = score(-1) }, "minScorePerMille: -1, want an integer 0..1000 (250 takes scores of 0.25 and above)"},
		{func(r *RecallRequest) { r.MinScorePerMille = score(1000) }, ""},
		{func(r *RecallRequest) { r.MinScorePerMille = score(1001) }, "minScorePerMille: 1001, want an integer 0..1000 (250 takes scores of 0.25 and above)"},
		{func(r *RecallRequest) { r.MinScorePerMille = score(250.5) }, "minScorePerMille: 250.5, want an integer 0..1000 (250 takes scores of 0.25 and above)"},
		// The minScore of before, a fraction of a score, is refused naming
		// the field that replaced it.
		{func(r *RecallRequest) { r.LegacyMinScore = score(0.25) }, "minScore: a field renamed minScorePerMille, in thousandths of a score (0..1000): for minScore 0.25 send minScorePerMille 250"},
		{func(r *RecallRequest) { r.LegacyMinScore = score(0) }, "minScore: a field renamed minScorePerMille, in thousandths of a score (0..1000): for minScore 0 send minScorePerMille 0"},
	} {
		req := ok()
		tc.past(&req)
		if _, msg := recallQuery(&req); msg != tc.want {
			t.Errorf("got %q, want %q", msg, tc.want)
		}
	}
}
