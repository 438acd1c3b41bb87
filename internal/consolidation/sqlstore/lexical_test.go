package sqlstore

import (
	"slices"
	"testing"
)

func TestEntityList(t *testing.T) {
	for _, ents := range [][]string{nil, {"alice"}, {"alice", "bob"}, {`a"b`, `c\d`}, {"张伟", "a, b", `","`}} {
		got := entityList(toJSON(ents))
		if len(ents) == 0 && len(got) == 0 {
			continue
		}
		if !slices.Equal(got, ents) {
			t.Errorf("entityList(%s) = %q, want %q", toJSON(ents), got, ents)
		}
	}
	if got := entityList(`[ "x" , "y" ]`); !slices.Equal(got, []string{"x", "y"}) {
		t.Errorf("spaced array: %q", got)
	}
}
