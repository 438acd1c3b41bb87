package serve

import (
	"bufio"
	"container/list"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/memscope"
)

// Scopes of a served bank: recall within a scope, and erasure and export
// (DELETE .../scopes/{scope}, DELETE .../facts/{id}, GET
// .../scopes/{scope}/export).

// ScopeStore is what erasure and export need of a bank's store.
type ScopeStore interface {
	// EraseScope removes every row of a scope other than the shared one.
	EraseScope(ctx context.Context, key consolidation.ScopeKey) (consolidation.Erasure, error)
	// DeleteFacts removes facts by id in whichever scope of the bank
	// holds them, DeleteScopeFacts in one scope only.
	DeleteFacts(ctx context.Context, bank consolidation.BankID, ids []string) (consolidation.Erasure, error)
	DeleteScopeFacts(ctx context.Context, key consolidation.ScopeKey, ids []string) (consolidation.Erasure, error)
	// ExportScope streams a scope's facts and observations.
	ExportScope(ctx context.Context, key consolidation.ScopeKey, fn func(consolidation.Exported) error) error
}

// DefaultIndexCacheBytes bounds, when Bank.IndexCacheBytes is 0, the
// indexes of a served bank's scopes held in memory (beside its shared
// scope's): about 3,000 scopes of ten observations with 1,536-dimension
// vectors. The least recently used scope's go first and are loaded from
// the store again when asked.
const DefaultIndexCacheBytes = 64 << 20

// scopeRecallers are a bank's recallers per scope, the shared scope's
// first, the others made from it and kept while recently used, within a
// bound of bytes.
type scopeRecallers struct {
	mu     sync.Mutex
	shared *consolidation.Recaller
	max    int64
	byName map[string]*list.Element // of *scopeRecaller, most recent first
	lru    list.List
	bytes  int64 // the sum of the entries' bytes as last seen
}

type scopeRecaller struct {
	name  string
	r     *consolidation.Recaller
	bytes int64
}

// get returns the recaller of scope ("" the shared one).
func (s *scopeRecallers) get(bank consolidation.BankID, scope string) *consolidation.Recaller {
	if scope == "" {
		return s.shared
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byName == nil {
		s.byName = map[string]*list.Element{}
	}
	if e := s.byName[scope]; e != nil {
		s.lru.MoveToFront(e)
		return e.Value.(*scopeRecaller).r
	}
	sr := &scopeRecaller{name: scope, r: s.shared.ForScope(bank.Scope(scope))}
	s.byName[scope] = s.lru.PushFront(sr)
	return sr.r
}

// loaded counts what a scope's recaller holds after a recall (which may
// have loaded or reloaded its copy) and drops the least recently used
// scopes over the bound.
func (s *scopeRecallers) loaded(scope string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.byName[scope]; e != nil {
		sr := e.Value.(*scopeRecaller)
		b := sr.r.Bytes()
		s.bytes += b - sr.bytes
		sr.bytes = b
	}
	s.evict()
}

// evict drops the least recently used scopes while the bytes are over the
// bound, never the most recent one.
func (s *scopeRecallers) evict() {
	for s.bytes > s.max && s.lru.Len() > 1 {
		s.remove(s.lru.Back())
	}
}

func (s *scopeRecallers) remove(e *list.Element) {
	sr := e.Value.(*scopeRecaller)
	s.lru.Remove(e)
	delete(s.byName, sr.name)
	s.bytes -= sr.bytes
}

// drop forgets a scope's recaller (after its erasure).
func (s *scopeRecallers) drop(scope string) {
	s.mu.Lock()
	if e := s.byName[scope]; e != nil {
		s.remove(e)
	}
	s.mu.Unlock()
}

// recallScoped recalls q from the request's scope, and also from the
// shared scope when includeShared is set (the two merged by score).
func recallScoped(ctx context.Context, bk *Bank, scope string, includeShared bool, q consolidation.Query) ([]consolidation.Recalled, error) {
	items, _, err := bk.scopes().get(bk.id(), scope).Recall(ctx, q)
	if scope != "" {
		bk.scopes().loaded(scope)
	}
	if err != nil || scope == "" || !includeShared {
		return items, err
	}
	shared, _, err := bk.scopes().shared.Recall(ctx, q)
	if err != nil {
		return nil, err
	}
	items = append(items, shared...)
	sort.SliceStable(items, func(i, j int) bool { return items[i].Score > items[j].Score })
	if len(items) > q.Limit {
		items = items[:q.Limit]
	}
	return items, nil
}

func (b *Bank) scopes() *scopeRecallers {
	b.once.Do(func() {
		b.scoped = &scopeRecallers{shared: b.Recaller, max: b.IndexCacheBytes}
		if b.scoped.max <= 0 {
			b.scoped.max = DefaultIndexCacheBytes
		}
	})
	return b.scoped
}

// eraseScope answers DELETE /v1/banks/{namespace}/{name}/scopes/{scope}.
func (bk *servedBank) eraseScope(w http.ResponseWriter, r *http.Request) error {
	scope := r.PathValue("scope")
	if msg := memscope.Problem(scope); msg != "" || scope == "" {
		return problem(http.StatusBadRequest, CodeInvalidScope, "scope: "+msg)
	}
	st := bk.scopeStore
	if st == nil {
		return problem(http.StatusNotImplemented, CodeNotImplemented, "this bank's store does not erase")
	}
	erased, err := st.EraseScope(r.Context(), bk.id().Scope(scope))
	if err != nil {
		return storeFailed(err, bk.Bank, "Erasing a scope failed", storeUnreachable)
	}
	bk.scopes().drop(scope)
	bk.s.bank.erasures.WithLabelValues(bk.Namespace, bk.Name, "scope").Inc()
	writeJSON(w, http.StatusOK, &erased)
	return nil
}

// storeUnreachable is the answer to a failed erasure or export.
const storeUnreachable = "the bank's store could not be reached"

// deleteFact answers DELETE /v1/banks/{namespace}/{name}/facts/{id}: in
// the scope of ?scope= ("" for the shared scope) when given, else in
// every scope that holds a fact of this id.
func (bk *servedBank) deleteFact(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if id == "" || len(id) > MaxFactIDBytes {
		return problem(http.StatusBadRequest, CodeInvalidFact, fmt.Sprintf("id: %d bytes, want 1..%d", len(id), MaxFactIDBytes))
	}
	var scope *string
	if q := r.URL.Query(); q.Has("scope") {
		sc := q.Get("scope")
		if msg := memscope.Problem(sc); msg != "" {
			return problem(http.StatusBadRequest, CodeInvalidScope, "scope: "+msg)
		}
		scope = &sc
	}
	st := bk.scopeStore
	if st == nil {
		return problem(http.StatusNotImplemented, CodeNotImplemented, "this bank's store does not erase")
	}
	var erased consolidation.Erasure
	var err error
	if scope != nil {
		erased, err = st.DeleteScopeFacts(r.Context(), bk.id().Scope(*scope), []string{id})
	} else {
		erased, err = st.DeleteFacts(r.Context(), bk.id(), []string{id})
	}
	if err != nil {
		return storeFailed(err, bk.Bank, "Deleting a fact failed", storeUnreachable)
	}
	if erased.Facts == 0 {
		return problem(http.StatusNotFound, CodeFactNotFound, "the bank holds no fact with this id")
	}
	bk.s.bank.erasures.WithLabelValues(bk.Namespace, bk.Name, "fact").Inc()
	writeJSON(w, http.StatusOK, &erased)
	return nil
}

// exportScope answers GET /v1/banks/{namespace}/{name}/scopes/{scope}/export
// with the scope's facts and observations as JSON lines.
func (bk *servedBank) exportScope(w http.ResponseWriter, r *http.Request) error {
	scope := r.PathValue("scope")
	if msg := memscope.Problem(scope); msg != "" || scope == "" {
		return problem(http.StatusBadRequest, CodeInvalidScope, "scope: "+msg)
	}
	st := bk.scopeStore
	if st == nil {
		return problem(http.StatusNotImplemented, CodeNotImplemented, "this bank's store does not export")
	}
	bw := bufio.NewWriterSize(w, 32<<10)
	enc := json.NewEncoder(bw)
	started := false
	err := st.ExportScope(r.Context(), bk.id().Scope(scope), func(e consolidation.Exported) error {
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		return enc.Encode(&e)
	})
	if err == nil {
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
		}
		_ = bw.Flush()
		return nil
	}
	if started {
		// The status is sent: the client sees the stream cut short.
		bk.s.log.Error(err, "Exporting a scope failed", "bank", Key{bk.Namespace, bk.Name})
		panic(http.ErrAbortHandler)
	}
	return storeFailed(err, bk.Bank, "Exporting a scope failed", storeUnreachable)
}
