package controllers

import (
	"fmt"
	"testing"
)

func TestTableSummaryCountsAreBoundedForStatus(t *testing.T) {
	m := map[string]int64{}
	for i := 0; i < 40; i++ {
		m[fmt.Sprintf("k%02d", i)] = int64(i)
	}
	if got := boundedCounts(m, 32); len(got) != 32 || got["k00"] != 0 || got["k31"] != 31 {
		t.Fatalf("%v", got)
	}
}
