package promptfit_test

import (
	"context"
	"testing"

	"github.com/promptops/promptops/internal/promptfit"
	"github.com/promptops/promptops/internal/tokens"
)

// The cacheable prefix is the fixed text before the first runtime or
// memory section, whichever comes first; none when one comes first, all
// of the fixed text when there is neither.
func TestSealCacheableTokens(t *testing.T) {
	e := tokens.MustGet(tokens.O200K)
	role := promptfit.Section{Name: "role", Kind: promptfit.Static, Text: "You are a careful support assistant for a bookshop."}
	task := promptfit.Section{Name: "task", Kind: promptfit.Intent, Text: "Answer the question in two sentences."}
	runtime := promptfit.Section{Name: "question", Kind: promptfit.Runtime, Heading: "## Question", HeadingTokens: e.Count("## Question"), ReserveTokens: 40}
	memory := promptfit.Section{Name: "memory", Kind: promptfit.Memory, Heading: "## Memory", HeadingTokens: e.Count("## Memory"), ReserveTokens: 60}
	for _, tc := range []struct {
		name     string
		sections []promptfit.Section
		want     func(s *promptfit.Sealed) int
	}{
		{"runtime after the role", []promptfit.Section{role, runtime, task}, func(*promptfit.Sealed) int { return e.Count(role.Text) }},
		{"memory after the role", []promptfit.Section{role, memory, task}, func(*promptfit.Sealed) int { return e.Count(role.Text) }},
		{"runtime first", []promptfit.Section{runtime, role, task}, func(*promptfit.Sealed) int { return 0 }},
		{"memory first", []promptfit.Section{memory, role, runtime, task}, func(*promptfit.Sealed) int { return 0 }},
		{"neither", []promptfit.Section{role, task}, func(s *promptfit.Sealed) int { return s.FixedTokens }},
	} {
		s, err := promptfit.Seal(context.Background(), e, tc.sections, 1000, false)
		if err != nil {
			t.Fatal(err)
		}
		if want := tc.want(s); s.CacheableTokens != want {
			t.Errorf("%s: CacheableTokens %d, want %d (fixed %d)", tc.name, s.CacheableTokens, want, s.FixedTokens)
		}
	}
}
