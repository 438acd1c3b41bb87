package sqlstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
)

// TestHistoryTrimmedPerObservation updates two observations in the same
// batches past HistoryLimit: each keeps its own newest HistoryLimit
// previous texts, newest first.
func TestHistoryTrimmedPerObservation(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		if err := s.EnsureBank(ctx, bank); err != nil {
			t.Fatal(err)
		}
		ids, err := s.Apply(ctx, bank, "run", consolidation.Ops{Creates: []consolidation.Create{{Text: "a 0"}, {Text: "b 0"}}}, nil, time.Now())
		if err != nil || len(ids) != 2 {
			t.Fatal(ids, err)
		}
		for i := 1; i <= HistoryLimit+3; i++ {
			ops := consolidation.Ops{Updates: []consolidation.Update{
				{ObservationID: ids[0], Text: fmt.Sprintf("a %d", i)},
				{ObservationID: ids[1], Text: fmt.Sprintf("b %d", i)},
			}}
			if _, err := s.Apply(ctx, bank, "run", ops, nil, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		for k, name := range []string{"a", "b"} {
			h, err := s.History(ctx, bank, ids[k])
			if err != nil {
				t.Fatal(err)
			}
			if len(h) != HistoryLimit || h[0] != fmt.Sprintf("%s %d", name, HistoryLimit+2) || h[len(h)-1] != fmt.Sprintf("%s 3", name) {
				t.Fatalf("%s: %d rows, %q .. %q", name, len(h), h[0], h[len(h)-1])
			}
		}
	})
}
