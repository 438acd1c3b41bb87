package plan

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/tokens"
)

func TestMemoryLine(t *testing.T) {
	d1 := time.Date(2026, 3, 1, 23, 0, 0, 0, time.FixedZone("x", -2*3600)) // 2026-03-02 UTC
	d2 := time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		it   MemoryItem
		want string
	}{
		{MemoryItem{Text: "  Alice  is\nallergic to peanuts. "}, "Alice is allergic to peanuts."},
		{MemoryItem{Text: "a", OccurredStart: &d1}, "a (2026-03-02)"},
		{MemoryItem{Text: "a", OccurredStart: &d1, OccurredEnd: &d2}, "a (2026-03-02 to 2026-03-05)"},
		{MemoryItem{Text: "a", OccurredStart: &d2, OccurredEnd: &d2}, "a (2026-03-05)"},
		{MemoryItem{Text: "a", OccurredEnd: &d2}, "a (until 2026-03-05)"},
	} {
		if got := MemoryLine(tc.it); got != tc.want {
			t.Errorf("MemoryLine(%+v) = %q, want %q", tc.it, got, tc.want)
		}
	}
}

// TestFitMemoryExact checks, on random items made to stress the
// pre-tokenizer at line ends (punctuation, digits, CJK, apostrophes), that
// the count is exact, never over the budget, and the kept items are a
// prefix of the ranking.
func TestFitMemoryExact(t *testing.T) {
	pieces := []string{"Alice", "is", "allergic", "to", "peanuts.", "!!", "...", "42", "2026", "'s", "咖啡", "很好。", "?", "\"quoted\"", "a/b", "(x)", "—", "🙂", "'", ":", "e.g.", "http://x.y/z"}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, enc := range []string{"cl100k_base", "o200k_base"} {
		e := tokens.MustGet(enc)
		for round := 0; round < 300; round++ {
			items := make([]MemoryItem, rng.IntN(12))
			for i := range items {
				var w []string
				for k := 0; k < 1+rng.IntN(8); k++ {
					w = append(w, pieces[rng.IntN(len(pieces))])
				}
				sep := " "
				if rng.IntN(4) == 0 {
					sep = ""
				}
				items[i] = MemoryItem{ID: fmt.Sprint(i), Text: strings.Join(w, sep)}
			}
			max := rng.IntN(80)
			fit, err := FitMemory(enc, items, max)
			if err != nil {
				t.Fatal(err)
			}
			if got := e.Count(fit.Text); got != fit.Tokens || got > max {
				t.Fatalf("%s round %d: Tokens %d, count of text %d, max %d\n%q", enc, round, fit.Tokens, got, max, fit.Text)
			}
			if len(fit.Items)+fit.Omitted != len(items) {
				t.Fatalf("kept %d + omitted %d != %d items", len(fit.Items), fit.Omitted, len(items))
			}
			var lines []string
			for i, it := range fit.Items {
				if it.ID != items[i].ID {
					t.Fatalf("kept items are not a prefix of the ranking: %d is %s", i, it.ID)
				}
				lines = append(lines, MemoryLine(it))
			}
			if strings.Join(lines, "\n") != fit.Text {
				t.Fatalf("text is not the kept lines")
			}
			if fit.Omitted > 0 && len(fit.Items) < len(items) {
				next := strings.Join(append(lines, MemoryLine(items[len(fit.Items)])), "\n")
				if e.Count(next) <= max && MemoryLine(items[len(fit.Items)]) != "" {
					t.Fatalf("%s round %d: item %d fits (%d <= %d) but was omitted", enc, round, len(fit.Items), e.Count(next), max)
				}
			}
		}
	}
}

func TestFitMemoryHuge(t *testing.T) {
	huge := strings.Repeat("a", 4<<20)
	fit, err := FitMemory("cl100k_base", []MemoryItem{{ID: "1", Text: "short."}, {ID: "2", Text: huge}, {ID: "3", Text: "x"}}, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(fit.Items) != 1 || fit.Omitted != 2 || fit.Text != "short." {
		t.Fatalf("got %d items, %d omitted, %q", len(fit.Items), fit.Omitted, fit.Text)
	}
	if _, err := FitMemory("cl100k_base", nil, -1); err == nil {
		t.Fatal("negative maxTokens accepted")
	}
	if _, err := FitMemory("nope", nil, 1); err == nil {
		t.Fatal("unknown encoding accepted")
	}
}
