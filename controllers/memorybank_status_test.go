package controllers

import (
	"fmt"
	"strings"
	"testing"
)

func TestSummaryFieldsAreBoundedForStatus(t *testing.T) {
	m := map[string]int64{}
	for i := 0; i < 40; i++ {
		m[fmt.Sprintf("k%02d", i)] = int64(i)
	}
	if got := boundedCounts(m, 32); len(got) != 32 || got["k00"] != 0 || got["k31"] != 31 {
		t.Fatalf("%v", got)
	}
	if got := clipText(strings.Repeat("界", 2000), 1024); len(got) > 1024 || !strings.HasSuffix(got, "...") {
		t.Fatalf("%d %q", len(got), got[len(got)-8:])
	}
}
