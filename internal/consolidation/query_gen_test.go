package consolidation

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// genStore is a bank whose generation reads are counted, the first held
// until hold is closed.
type genStore struct {
	benchStore
	gen   atomic.Int64
	reads atomic.Int64
	hold  chan struct{}
}

func (s *genStore) BankGeneration(context.Context, ScopeKey) (Generation, error) {
	g := s.gen.Load()
	if s.reads.Add(1) == 1 {
		<-s.hold
	}
	return Generation{Applied: g}, nil
}

// Concurrent recalls share reads of the generation, and each sees a
// generation read after it began: those that came while the first read
// was in flight share one later read, which sees the generation moved.
func TestRecallSharesGenerationReads(t *testing.T) {
	st := &genStore{hold: make(chan struct{})}
	st.gen.Store(1)
	r := &Recaller{Store: st, Scope: "b"}
	first := r.startGeneration()
	for st.reads.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	st.gen.Store(2)
	var later []*genCall
	for i := 0; i < 5; i++ {
		later = append(later, r.startGeneration())
	}
	close(st.hold)
	ctx := context.Background()
	if g, err := waitGeneration(ctx, first); g.Applied != 1 || err != nil {
		t.Errorf("first read %v %v, want 1", g, err)
	}
	for i, c := range later {
		if g, err := waitGeneration(ctx, c); g.Applied != 2 || err != nil {
			t.Errorf("later read %d: %v %v, want 2", i, g, err)
		}
	}
	if n := st.reads.Load(); n != 2 {
		t.Errorf("%d generation reads for 6 callers, want 2", n)
	}
	// A caller after all that reads again, and one that gives up does
	// not wait.
	st.gen.Store(3)
	if g, _ := waitGeneration(ctx, r.startGeneration()); g.Applied != 3 || st.reads.Load() != 3 {
		t.Errorf("read %v after the move to 3, %d reads", g, st.reads.Load())
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := waitGeneration(cctx, r.startGeneration()); err == nil {
		t.Error("a canceled caller got no error")
	}
}
