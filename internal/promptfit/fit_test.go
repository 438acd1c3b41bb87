package promptfit

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// runes counts a rune as a token, so a test can say exactly where a cut
// ends; targets records what Truncate was asked to cut to.
type runes struct{ targets []int }

func (c *runes) Count(s string) int         { return utf8.RuneCountInString(s) }
func (c *runes) CountUncached(s string) int { return utf8.RuneCountInString(s) }
func (c *runes) Truncate(s string, n int) (string, int) {
	c.targets = append(c.targets, n)
	k := min(n, utf8.RuneCountInString(s))
	return string([]rune(s)[:k]), k
}

// slots are runtime sections without headings, each of ten runes: a
// prompt of n of them counts 10n plus 2 per separator.
func slots(prio ...int) []Section {
	out := make([]Section, len(prio))
	for i, p := range prio {
		out[i] = Section{Name: string(rune('a' + i)), Kind: Runtime, Text: strings.Repeat("w", 10), Cuttable: true, Priority: p}
	}
	return out
}

func fit(t *testing.T, sections []Section, maxTokens int, drop bool) (*Fitted, *runes) {
	t.Helper()
	c := &runes{}
	f, err := Fit(context.Background(), c, sections, maxTokens, drop)
	if err != nil {
		t.Fatal(err)
	}
	if n := utf8.RuneCountInString(f.Text); n != f.Tokens {
		t.Fatalf("tokens %d, text of %d runes", f.Tokens, n)
	}
	return f, c
}

// Higher priority is cut first, the later section on a tie, each no
// further than the budget needs and no lower than its minimum; a prompt
// at the budget exactly is not cut.
func TestFitCutOrder(t *testing.T) {
	for _, c := range []struct {
		name   string
		prio   []int
		min    int
		budget int
		cut    []string
		tokens []int
	}{
		{"at the budget", []int{1, 1}, 0, 22, nil, []int{10, 10}},
		{"priority", []int{2, 1}, 0, 17, []string{"a"}, []int{5, 10}},
		{"tie: the later", []int{1, 1}, 0, 17, []string{"b"}, []int{10, 5}},
		{"minimum, then the next", []int{2, 1}, 4, 13, []string{"a", "b"}, []int{4, 7}},
		{"all at their minimum", []int{2, 1}, 4, 3, []string{"a", "b"}, []int{4, 4}},
	} {
		s := slots(c.prio...)
		for i := range s {
			s[i].MinTokens = c.min
		}
		f, _ := fit(t, s, c.budget, false)
		got := []int{f.Sections[0].Tokens, f.Sections[1].Tokens}
		if !reflect.DeepEqual(f.Cut, c.cut) || !reflect.DeepEqual(got, c.tokens) {
			t.Errorf("%s: cut %v tokens %v, want %v %v", c.name, f.Cut, got, c.cut, c.tokens)
		}
		for i, r := range f.Sections {
			if r.TruncatedTokens != 10-r.Tokens {
				t.Errorf("%s: section %d truncated %d, tokens %d", c.name, i, r.TruncatedTokens, r.Tokens)
			}
		}
	}
}

// A cut asks for exactly the tokens that bring the prompt to its budget.
func TestFitCutTargetIsExact(t *testing.T) {
	f, c := fit(t, slots(1, 0), 20, false)
	if !reflect.DeepEqual(c.targets, []int{8}) || f.Tokens != 20 {
		t.Errorf("targets %v tokens %d, want [8] and 20", c.targets, f.Tokens)
	}
}

// A section that is not cuttable is never cut, whatever the budget.
func TestFitKeepsWhatIsNotCuttable(t *testing.T) {
	s := slots(5, 1)
	s[0].Cuttable = false
	f, _ := fit(t, s, 0, false)
	if !reflect.DeepEqual(f.Cut, []string{"b"}) || f.Sections[0].Tokens != 10 || f.Sections[1].Tokens != 0 || f.Text != strings.Repeat("w", 10) {
		t.Errorf("cut %v sections %+v text %q", f.Cut, f.Sections, f.Text)
	}
}

// A section with Shrink is cut by it; memory still over the budget after
// the cut is emptied in cut order, only while the prompt is over it, and
// only with dropMemory.
func TestFitShrinkAndDropMemory(t *testing.T) {
	var asked []int
	mem := func(name string, prio int) Section {
		return Section{Name: name, Kind: Memory, Text: "xxxx\nyyyy", Tokens: 9, Cuttable: true, Priority: prio, MinTokens: 9,
			Shrink: func(target int) (string, int, error) {
				asked = append(asked, target)
				if target >= 4 {
					return "xxxx", 4, nil
				}
				return "", 0, nil
			}}
	}
	s := []Section{mem("m1", 1), mem("m2", 2)}
	// 9 + 2 + 9 = 20: at 11 one is dropped (m2, the higher priority).
	f, _ := fit(t, s, 11, true)
	if !reflect.DeepEqual(f.Cut, []string{"m2"}) || f.Text != "xxxx\nyyyy" || !reflect.DeepEqual(asked, []int{0}) {
		t.Errorf("cut %v text %q asked %v", f.Cut, f.Text, asked)
	}
	if f.Sections[1].TruncatedTokens != 9 {
		t.Errorf("dropped section: %+v", f.Sections[1])
	}
	// Without dropMemory the minimum holds.
	asked = nil
	f, _ = fit(t, []Section{mem("m1", 1), mem("m2", 2)}, 11, false)
	if f.Cut != nil || f.Tokens != 20 || asked != nil {
		t.Errorf("cut %v tokens %d asked %v", f.Cut, f.Tokens, asked)
	}
	// Over by one with no minimum: Shrink is asked for the exact target.
	asked = nil
	s = []Section{mem("m1", 1), mem("m2", 1)}
	s[1].MinTokens = 0
	f, _ = fit(t, s, 19, true)
	if !reflect.DeepEqual(asked, []int{8}) || !reflect.DeepEqual(f.Cut, []string{"m2"}) || f.Tokens != 15 {
		t.Errorf("asked %v cut %v tokens %d", asked, f.Cut, f.Tokens)
	}
	// A Shrink that fails fails the fit.
	s = []Section{mem("m1", 1)}
	s[0].MinTokens = 0
	s[0].Shrink = func(int) (string, int, error) { return "", 0, errors.New("no") }
	if _, err := Fit(context.Background(), &runes{}, s, 1, true); err == nil || err.Error() != "no" {
		t.Errorf("failing shrink: %v", err)
	}
}

// A done context stops the fit with its error.
func TestFitStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Fit(ctx, &runes{}, slots(1, 1), 5, false); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v", err)
	}
	if _, err := Seal(ctx, &runes{}, slots(1, 1), 5, true); !errors.Is(err, context.Canceled) {
		t.Errorf("seal: got %v", err)
	}
}
