// Package serve is the HTTP server of `promptops serve`: it holds the
// rendered plans of a directory or of the cluster's ConfigMaps as one
// immutable snapshot, and assembles prompts from them per request.
package serve

import (
	"bytes"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"

	"github.com/promptops/promptops/plan"
)

// Key names a template.
type Key struct{ Namespace, Name string }

func (k Key) String() string { return k.Namespace + "/" + k.Name }

// Snapshot is the set of plans a request sees. It is never changed once
// published: a reload publishes a new one, so a request sees the old set or
// the new, never a mix.
type Snapshot struct {
	plans map[Key]*plan.Plan
	keys  []Key // sorted
}

// Plan returns the plan of a template, or nil.
func (s *Snapshot) Plan(k Key) *plan.Plan { return s.plans[k] }

// Len is the number of plans.
func (s *Snapshot) Len() int { return len(s.keys) }

// Store holds the current snapshot; nil until the first load.
type Store struct{ cur atomic.Pointer[Snapshot] }

// Load returns the current snapshot, nil before the first load.
func (s *Store) Load() *Snapshot { return s.cur.Load() }

// loader turns the raw plan.json of each source (a file path or a
// ConfigMap) into a snapshot. A source whose new bytes do not load keeps
// its previous plan and is reported; one that never loaded is left out.
type loader struct {
	store   *Store
	metrics *metrics
	log     logr.Logger

	mu   sync.Mutex
	last map[string][]byte     // bytes last seen per source
	good map[string]*plan.Plan // last plan that loaded per source
	bad  map[string]string     // sources whose last bytes failed, and why
}

func newLoader(store *Store, m *metrics, log logr.Logger) *loader {
	return &loader{store: store, metrics: m, log: log, last: map[string][]byte{}, good: map[string]*plan.Plan{}, bad: map[string]string{}}
}

// apply takes the complete current set of sources and publishes the
// snapshot they make.
func (l *loader) apply(sources map[string][]byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	changed := l.store.Load() == nil
	for id := range l.last {
		if _, ok := sources[id]; !ok {
			delete(l.last, id)
			delete(l.good, id)
			delete(l.bad, id)
			changed = true
		}
	}
	for id, data := range sources {
		if prev, ok := l.last[id]; ok && bytes.Equal(prev, data) {
			continue
		}
		changed = true
		l.last[id] = bytes.Clone(data)
		p, err := plan.Load(data)
		if err != nil {
			l.bad[id] = err.Error()
			l.metrics.loadErrors.Inc()
			if old := l.good[id]; old != nil {
				l.log.Error(err, "Plan does not load; keeping the previous version", "source", id, "template", Key{old.Namespace, old.Name}, "revision", old.Revision)
			} else {
				l.log.Error(err, "Plan does not load", "source", id)
			}
			continue
		}
		delete(l.bad, id)
		if old := l.good[id]; old == nil || old.Revision != p.Revision {
			l.log.Info("Plan loaded", "source", id, "template", Key{p.Namespace, p.Name}, "revision", p.Revision)
		}
		l.good[id] = p
	}
	if !changed {
		return
	}
	ids := make([]string, 0, len(l.good))
	for id := range l.good {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	snap := &Snapshot{plans: make(map[Key]*plan.Plan, len(ids))}
	for _, id := range ids {
		p := l.good[id]
		k := Key{p.Namespace, p.Name}
		if _, dup := snap.plans[k]; dup {
			l.log.Error(nil, "Two sources hold the same template; serving the first", "template", k, "ignored", id)
			continue
		}
		snap.plans[k] = p
		snap.keys = append(snap.keys, k)
	}
	sort.Slice(snap.keys, func(i, j int) bool {
		a, b := snap.keys[i], snap.keys[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	l.store.cur.Store(snap)
	l.metrics.published(snap, len(l.bad))
}
