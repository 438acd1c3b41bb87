package serve

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
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
// the new, never a mix (a template's stable and canary plans and weight
// included).
type Snapshot struct {
	plans map[Key]*plan.Revisions
	keys  []Key // sorted
}

// Plan returns the stable plan of a template, or nil.
func (s *Snapshot) Plan(k Key) *plan.Plan {
	if r := s.plans[k]; r != nil {
		return r.Stable
	}
	return nil
}

// Revisions returns the plans of a template (its stable plan, and its
// canary's during a rollout), or nil.
func (s *Snapshot) Revisions(k Key) *plan.Revisions { return s.plans[k] }

// Len is the number of plans.
func (s *Snapshot) Len() int { return len(s.keys) }

// PlanSet holds the current snapshot of the plans served; nil until the
// first load.
type PlanSet struct{ cur atomic.Pointer[Snapshot] }

// Load returns the current snapshot, nil before the first load.
func (s *PlanSet) Load() *Snapshot { return s.cur.Load() }

// source is where one plan.json comes from, and which template that place
// names: the identity comes from the cluster (the ConfigMap's namespace and
// its owner PromptTemplate) or the directory layout, never from the plan's
// content, which must only agree with it.
type source struct {
	// data is plan.json, the stable revision.
	data []byte
	// canary and rollout are canary.plan.json and rollout.json, read from
	// the same place at the same time as data; nil when absent (outside a
	// rollout).
	canary, rollout []byte
	// fetch, when set, reads data (and canary and rollout) when it is
	// needed and not given (a rendered ConfigMap whose held plan.json was
	// released; see heldPlans).
	fetch func() (planFiles, error)
	// version, when set, changes whenever data, canary or rollout does (a
	// ConfigMap's resourceVersion): an unchanged version skips reading
	// them again.
	version string
	// want is the template the source's place names; zero when the plan
	// names itself (a single mounted ConfigMap, Server.Apply).
	want Key
	// refused, when set, says why the source cannot name a template (a
	// ConfigMap the operator did not render, a file outside the layouts);
	// it is never served.
	refused string
	// unreadable, when set, is why the file could not be read (not a
	// regular file, too large); it counts as a plan that does not load.
	unreadable string
}

// planFiles are the files of one template's place: plan.json, and during a
// rollout canary.plan.json and rollout.json (nil when absent).
type planFiles struct{ plan, canary, rollout []byte }

// loader turns the raw plan.json of each source (a file path or a
// ConfigMap) into a snapshot. A source whose new bytes do not load keeps
// its previous plan and is reported; one that never loaded is left out. A
// source that is refused (see source) or whose plan claims another template
// than its place names is dropped, logged and counted.
type loader struct {
	store   *PlanSet
	metrics *metrics
	log     logr.Logger

	mu   sync.Mutex
	last map[string]seen            // what was last seen per source
	good map[string]*plan.Revisions // last plans that loaded per source
	bad  map[string]string          // sources whose last bytes failed, and why
}

func newLoader(store *PlanSet, m *metrics, log logr.Logger) *loader {
	return &loader{store: store, metrics: m, log: log, last: map[string]seen{}, good: map[string]*plan.Revisions{}, bad: map[string]string{}}
}

// seen is what the loader remembers of a source: its place and a digest
// of its bytes, not the bytes (the parsed plan is kept; the bytes would
// hold the plan a second time).
type seen struct {
	digest              [sha256.Size]byte
	version             string
	want                Key
	refused, unreadable string
}

// seenOf is what the loader remembers of src; prev, when the source's
// version has not moved, lends its digest instead of hashing data again.
func seenOf(src *source, prev seen, hadPrev bool) seen {
	now := seen{version: src.version, want: src.want, refused: src.refused, unreadable: src.unreadable}
	if hadPrev && src.version != "" && prev.version == src.version {
		now.digest = prev.digest
	} else {
		src.read()
		now.digest = src.digest()
	}
	return now
}

// digest is the SHA-256 of the source's files, each after its length
// (-1 for a canary or rollout file that is absent), so that a change to
// any of them is a change.
func (src *source) digest() [sha256.Size]byte {
	h := sha256.New()
	for i, f := range [][]byte{src.data, src.canary, src.rollout} {
		n := int64(len(f))
		if i > 0 && f == nil {
			n = -1
		}
		binary.Write(h, binary.BigEndian, n)
		h.Write(f)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// read fetches data when it is not given and can be (once); a failure
// makes the source unreadable.
func (src *source) read() {
	if src.data != nil || src.fetch == nil || src.unreadable != "" {
		return
	}
	files, err := src.fetch()
	src.fetch = nil
	if err != nil {
		src.unreadable = err.Error()
		return
	}
	src.data, src.canary, src.rollout = files.plan, files.canary, files.rollout
}

// parsed says whether the loader has read the source id at version (it
// loaded, or did not, but was not refused): its bytes need not be kept.
func (l *loader) parsed(id, version string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.last[id]
	return ok && s.version == version && s.refused == ""
}

// apply takes the complete current set of sources, each plan naming its
// own template, and publishes the snapshot they make.
func (l *loader) apply(sources map[string][]byte) {
	m := make(map[string]source, len(sources))
	for id, data := range sources {
		m[id] = source{data: data}
	}
	l.load(m)
}

// load takes the complete current set of sources and publishes the
// snapshot they make.
func (l *loader) load(sources map[string]source) {
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
	for id, src := range sources {
		prev, ok := l.last[id]
		now := seenOf(&src, prev, ok)
		if ok && prev == now {
			continue
		}
		changed = true
		l.last[id] = now
		if src.refused != "" {
			l.refuse(id, src.refused, "", Key{})
			continue
		}
		var p *plan.Plan
		var err error
		if src.read(); src.unreadable != "" {
			err = errors.New(src.unreadable)
		} else {
			p, err = plan.Load(src.data)
		}
		if err == nil && src.want != (Key{}) && (Key{p.Namespace, p.Name}) != src.want {
			// Never served, not even the previous version: the place no
			// longer holds the template it names.
			l.refuse(id, "its plan claims another template than its place names", src.want.String(), Key{p.Namespace, p.Name})
			continue
		}
		if old := l.good[id]; old != nil && src.want != (Key{}) && (Key{old.Stable.Namespace, old.Stable.Name}) != src.want {
			delete(l.good, id) // the place names another template now
		}
		if err != nil {
			l.bad[id] = err.Error()
			l.metrics.loadErrors.Inc()
			if old := l.good[id]; old != nil {
				l.log.Error(err, "Plan does not load; keeping the previous version", "source", id, "template", Key{old.Stable.Namespace, old.Stable.Name}, "revision", old.Stable.Revision)
			} else {
				l.log.Error(err, "Plan does not load", "source", id)
			}
			continue
		}
		delete(l.bad, id)
		revs := &plan.Revisions{Stable: p}
		if err := withRollout(revs, &src); err != nil {
			// Logged once: the loader sees the same files again only
			// when they change.
			l.log.Error(err, "Rollout not served; serving the stable revision only", "source", id, "template", Key{p.Namespace, p.Name}, "revision", p.Revision)
		}
		if old := l.good[id]; old == nil || old.Stable.Revision != p.Revision || canaryRevision(old) != canaryRevision(revs) || old.Weight != revs.Weight {
			kv := []any{"source", id, "template", Key{p.Namespace, p.Name}, "revision", p.Revision}
			if revs.Canary != nil {
				kv = append(kv, "canaryRevision", revs.Canary.Revision, "weight", revs.Weight)
			}
			l.log.Info("Plan loaded", kv...)
		}
		l.good[id] = revs
	}
	if !changed {
		return
	}
	l.publish()
}

// withRollout adds to revs the canary plan and weight of src's
// canary.plan.json and rollout.json, when both are there and agree with
// each other and with the stable plan: rollout.json names the two plans'
// revisions, and the canary is of the same template. Otherwise revs stays
// stable only, and the error says why (without content); neither file
// there is no error.
func withRollout(revs *plan.Revisions, src *source) error {
	switch {
	case src.canary == nil && src.rollout == nil:
		return nil
	case src.canary == nil:
		return fmt.Errorf("%s without %s", plan.RolloutFile, plan.CanaryPlanFile)
	case src.rollout == nil:
		return fmt.Errorf("%s without %s", plan.CanaryPlanFile, plan.RolloutFile)
	}
	r, err := plan.ParseRollout(src.rollout)
	if err != nil {
		return fmt.Errorf("%s: %w", plan.RolloutFile, err)
	}
	canary, err := plan.Load(src.canary)
	if err != nil {
		return fmt.Errorf("%s: %w", plan.CanaryPlanFile, err)
	}
	stable := revs.Stable
	switch {
	case canary.Namespace != stable.Namespace || canary.Name != stable.Name:
		return fmt.Errorf("%s is of another template than %s", plan.CanaryPlanFile, PlanFile)
	case r.StableRevision != stable.Revision:
		return fmt.Errorf("%s names stable revision %s, %s is %s", plan.RolloutFile, r.StableRevision, PlanFile, stable.Revision)
	case r.CanaryRevision != canary.Revision:
		return fmt.Errorf("%s names canary revision %s, %s is %s", plan.RolloutFile, r.CanaryRevision, plan.CanaryPlanFile, canary.Revision)
	}
	revs.Canary, revs.Weight = canary, r.Weight
	return nil
}

// canaryRevision is the revision of revs' canary, "" outside a rollout.
func canaryRevision(revs *plan.Revisions) string {
	if revs.Canary == nil {
		return ""
	}
	return revs.Canary.Revision
}

// refuse drops a source and reports it: the source, why, and the template
// names involved; never the plan's content.
func (l *loader) refuse(id, reason, want string, claimed Key) {
	delete(l.good, id)
	l.bad[id] = reason
	l.metrics.refused.Inc()
	kv := []any{"source", id, "reason", reason}
	if want != "" {
		kv = append(kv, "template", want, "claimed", claimed)
	}
	l.log.Error(nil, "Plan source refused", kv...)
}

// publish makes and stores the snapshot of the good plans; l.mu is held.
func (l *loader) publish() {
	ids := make([]string, 0, len(l.good))
	for id := range l.good {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	snap := &Snapshot{plans: make(map[Key]*plan.Revisions, len(ids))}
	for _, id := range ids {
		revs := l.good[id]
		k := Key{revs.Stable.Namespace, revs.Stable.Name} // equal to the source's place, when it names one
		if _, dup := snap.plans[k]; dup {
			l.log.Error(nil, "Two sources hold the same template; serving the first", "template", k, "ignored", id)
			continue
		}
		snap.plans[k] = revs
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
