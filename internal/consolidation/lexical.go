package consolidation

import (
	"cmp"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Lexical recall, all of it: a text's normalised form, its trigrams, the
// similarity of two texts and the score that ranks an observation for a
// fact (Rank), and LexIndex, which finds the best-scored observations of a
// bank without a query per fact. The engine's recall and a served bank's
// (Recaller) both rank by it.

// Normalize is the form used to find repeated observations: lower case,
// letters and digits only, single spaces.
func Normalize(s string) string {
	var b strings.Builder
	space := false
	for _, r := range strings.ToLower(s) {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			if space && b.Len() > 0 {
				b.WriteByte(' ')
			}
			space = false
			b.WriteRune(r)
		} else {
			space = true
		}
	}
	return b.String()
}

// Trigrams returns the set of rune trigrams of a text's normalised form,
// padded so short words count. It works for Chinese (characters) as for
// English (letters).
func Trigrams(s string) map[string]struct{} {
	out := map[string]struct{}{}
	eachGram(s, func(g []byte) { out[string(g)] = struct{}{} })
	return out
}

// eachGram calls fn with every gram of Trigrams, repeats included; g is
// valid only during the call.
func eachGram(s string, fn func(g []byte)) {
	var buf []byte
	eachGramRunes(s, func(rs []rune) {
		buf = buf[:0]
		for _, c := range rs {
			buf = utf8.AppendRune(buf, c)
		}
		fn(buf)
	})
}

// eachGramRunes calls fn with the runes of every gram of Trigrams,
// repeats included; rs is valid only during the call.
func eachGramRunes(s string, fn func(rs []rune)) {
	var r []rune
	for _, w := range strings.Fields(Normalize(s)) {
		r = append(r[:0], ' ')
		for _, c := range w {
			r = append(r, c)
		}
		r = append(r, ' ')
		if isHan(r[1]) {
			r = r[1 : len(r)-1]
		}
		if len(r) < 3 {
			fn(r)
			continue
		}
		for i := 0; i+3 <= len(r); i++ {
			fn(r[i : i+3])
		}
		if isHan(r[0]) {
			for i := 0; i+2 <= len(r); i++ {
				fn(r[i : i+2]) // bigrams help short CJK words
			}
		}
	}
}

// gramPad fills a gram key's places past a gram's last rune: above
// every rune, so no rune can stand for it.
const gramPad = 0x1fffff

// eachGramKey calls fn with every gram of eachGram (repeats included) as
// a key: its up to three runes in 21 bits each, padded with gramPad. Two
// grams have the same key exactly when they have the same runes.
func eachGramKey(s string, fn func(k uint64)) {
	eachGramRunes(s, func(rs []rune) {
		k := uint64(0)
		for i := 0; i < 3; i++ {
			c := uint64(gramPad)
			if i < len(rs) {
				c = uint64(rs[i])
			}
			k = k<<21 | c
		}
		fn(k)
	})
}

func isHan(r rune) bool { return unicode.Is(unicode.Han, r) }

// Similarity is the Jaccard similarity of two texts' trigram sets.
func Similarity(a, b map[string]struct{}) float64 {
	if len(a) == 0 || len(b) == 0 {
		return 0
	}
	inter := 0
	for k := range a {
		if _, ok := b[k]; ok {
			inter++
		}
	}
	return float64(inter) / float64(len(a)+len(b)-inter)
}

// sharedEntities counts entities two lists share, ignoring case.
func sharedEntities(a, b []string) int {
	set := map[string]bool{}
	for _, e := range a {
		set[strings.ToLower(strings.TrimSpace(e))] = true
	}
	n := 0
	for _, e := range b {
		if set[strings.ToLower(strings.TrimSpace(e))] {
			n++
		}
	}
	return n
}

// RelatedScore ranks an observation for a fact: trigram similarity plus a
// bonus per shared entity.
func RelatedScore(fact Fact, factGrams map[string]struct{}, obs Observation) float64 {
	return Similarity(factGrams, Trigrams(obs.Text)) + 0.25*float64(sharedEntities(fact.Entities, obs.Entities))
}

// Rank orders candidates for a fact, best first, and keeps those that are
// related at all, at most limit.
func Rank(fact Fact, cands []Candidate, limit int) []Candidate {
	grams := Trigrams(fact.Text)
	type scored struct {
		c Candidate
		s float64
	}
	var ss []scored
	for _, c := range cands {
		if s := RelatedScore(fact, grams, c.Observation); s > 0.05 {
			ss = append(ss, scored{c, s})
		}
	}
	sort.SliceStable(ss, func(i, j int) bool {
		if ss[i].s != ss[j].s {
			return ss[i].s > ss[j].s
		}
		return ss[i].c.ID < ss[j].c.ID
	})
	out := make([]Candidate, 0, min(limit, len(ss)))
	for i := 0; i < len(ss) && i < limit; i++ {
		out = append(out, ss[i].c)
	}
	return out
}

// LexIndex is an in-memory lexical index of a bank's observations: their
// trigrams (as Trigrams makes them) and normalised entities. It finds, for
// a fact, the observations Rank would score best, without a database query
// per fact. Not safe for concurrent use.
type LexIndex struct {
	docs   []lexDoc
	byID   map[string]int32
	gramID map[uint64]int32 // gram (eachGramKey) -> index in posts
	posts  [][]int32
	// The postings once frozen (Freeze), in place of gramID and posts:
	// the grams sorted, gram keys[i]'s postings flat[off[i]:off[i+1]].
	keys []uint64
	off  []int32
	flat []int32
	// pending are the (gram, observation) pairs of observations Added
	// and not yet in the postings, each observation's grams distinct and
	// the observations in order.
	pending  []gramDoc
	entities map[string][]int32
	dead     int
	// scratch, reused by Search
	counts  []int32
	touched []int32
}

type gramDoc struct {
	g uint64
	n int32
}

type lexDoc struct {
	id       string
	ngrams   int32
	entities []string
	alive    bool
}

// NewLexIndex returns an empty index.
func NewLexIndex() *LexIndex {
	return &LexIndex{byID: map[string]int32{}, gramID: map[uint64]int32{}, entities: map[string][]int32{}}
}

// Len is the number of observations indexed.
func (x *LexIndex) Len() int { return len(x.byID) }

// Freeze packs the postings into three flat slices, about a sixth of
// the memory of the map and slice per gram a growing index needs: for an
// index that is read, not written (a bank loaded for recall). Put and
// Delete still work on a frozen index, which they unpack first.
func (x *LexIndex) Freeze() {
	if x.gramID == nil {
		return
	}
	if len(x.gramID) == 0 {
		// Only Added, or empty: the pairs sorted by gram, each gram's
		// observations in order.
		slices.SortStableFunc(x.pending, func(a, b gramDoc) int { return cmp.Compare(a.g, b.g) })
		x.keys, x.off, x.flat = []uint64{}, []int32{0}, make([]int32, len(x.pending))
		for i, p := range x.pending {
			if len(x.keys) == 0 || x.keys[len(x.keys)-1] != p.g {
				if len(x.keys) > 0 {
					x.off = append(x.off, int32(i))
				}
				x.keys = append(x.keys, p.g)
			}
			x.flat[i] = p.n
		}
		if len(x.keys) > 0 {
			x.off = append(x.off, int32(len(x.flat)))
		}
		x.pending, x.gramID, x.posts = nil, nil, nil
		return
	}
	x.compact()
	keys := make([]uint64, 0, len(x.gramID))
	for k := range x.gramID {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	n := 0
	for _, post := range x.posts {
		n += len(post)
	}
	x.keys, x.off, x.flat = keys, make([]int32, len(keys)+1), make([]int32, 0, n)
	for i, k := range keys {
		x.flat = append(x.flat, x.posts[x.gramID[k]]...)
		x.off[i+1] = int32(len(x.flat))
	}
	x.gramID, x.posts = nil, nil
}

// thaw unpacks a frozen index's postings, and the pairs Added, into the
// map and slices a growing index writes.
func (x *LexIndex) thaw() {
	if x.gramID == nil {
		x.gramID, x.posts = make(map[uint64]int32, len(x.keys)), make([][]int32, len(x.keys))
		for i, k := range x.keys {
			x.gramID[k] = int32(i)
			x.posts[i] = slices.Clone(x.flat[x.off[i]:x.off[i+1]])
		}
		x.keys, x.off, x.flat = nil, nil, nil
	}
	for _, p := range x.pending {
		i, ok := x.gramID[p.g]
		if !ok {
			i = int32(len(x.posts))
			x.gramID[p.g] = i
			x.posts = append(x.posts, nil)
		}
		x.posts[i] = append(x.posts[i], p.n)
	}
	x.pending = nil
}

// Add indexes an observation as Put does, for an index built in bulk and
// then frozen (a bank loaded for recall): its grams are kept as pairs, not
// in a growing index's map and slice per gram, until Freeze sorts them
// once. An index written with Put takes Add as Put.
func (x *LexIndex) Add(id, text string, entities []string) {
	if len(x.gramID) > 0 || x.gramID == nil {
		x.Put(id, text, entities)
		return
	}
	x.Delete(id)
	n := int32(len(x.docs))
	start := len(x.pending)
	eachGramKey(text, func(g uint64) { x.pending = append(x.pending, gramDoc{g, n}) })
	seg := x.pending[start:]
	slices.SortFunc(seg, func(a, b gramDoc) int { return cmp.Compare(a.g, b.g) })
	seg = slices.CompactFunc(seg, func(a, b gramDoc) bool { return a.g == b.g })
	x.pending = x.pending[:start+len(seg)]
	x.addDoc(id, n, int32(len(seg)), entities)
}

// postings are the observations holding gram k.
func (x *LexIndex) postings(k uint64) []int32 {
	if x.gramID != nil {
		if p, ok := x.gramID[k]; ok {
			return x.posts[p]
		}
		return nil
	}
	if i, ok := slices.BinarySearch(x.keys, k); ok {
		return x.flat[x.off[i]:x.off[i+1]]
	}
	return nil
}

// bytes estimates the memory the index holds.
func (x *LexIndex) bytes() int64 {
	n := int64(len(x.keys))*8 + int64(len(x.off)+len(x.flat))*4 + int64(cap(x.pending))*16 + int64(len(x.gramID))*48 + int64(len(x.docs))*(48+16) + int64(len(x.byID))*48
	for _, post := range x.posts {
		n += 24 + int64(cap(post))*4
	}
	for e, post := range x.entities {
		n += 48 + int64(len(e)) + int64(cap(post))*4
	}
	for _, d := range x.docs {
		for _, e := range d.entities {
			n += 16 + int64(len(e))
		}
	}
	return n
}

// Put indexes an observation, replacing what the index had for its id.
func (x *LexIndex) Put(id, text string, entities []string) {
	x.thaw()
	x.Delete(id)
	n := int32(len(x.docs))
	var ngrams int32
	eachGramKey(text, func(g uint64) {
		p, ok := x.gramID[g]
		if !ok {
			p = int32(len(x.posts))
			x.gramID[g] = p
			x.posts = append(x.posts, nil)
		}
		post := x.posts[p]
		if len(post) > 0 && post[len(post)-1] == n {
			return // repeated in this text
		}
		x.posts[p] = append(post, n)
		ngrams++
	})
	x.addDoc(id, n, ngrams, entities)
}

// addDoc records observation n (id, its count of distinct grams and its
// entities) once its grams are indexed.
func (x *LexIndex) addDoc(id string, n, ngrams int32, entities []string) {
	var ents []string
	for _, e := range entities {
		if e = strings.ToLower(strings.TrimSpace(e)); e != "" && !slices.Contains(ents, e) {
			ents = append(ents, e)
			x.entities[e] = append(x.entities[e], n)
		}
	}
	x.docs = append(x.docs, lexDoc{id: id, ngrams: ngrams, entities: ents, alive: true})
	x.byID[id] = n
}

// Delete removes an observation; an unknown id is ignored.
func (x *LexIndex) Delete(id string) {
	n, ok := x.byID[id]
	if !ok {
		return
	}
	x.docs[n].alive = false
	delete(x.byID, id)
	x.dead++
	if x.dead > 1024 && x.dead > len(x.docs)/2 {
		x.compact()
	}
}

// compact drops deleted observations from the postings.
func (x *LexIndex) compact() {
	if x.dead == 0 {
		return
	}
	x.thaw()
	remap := make([]int32, len(x.docs))
	docs := make([]lexDoc, 0, len(x.byID))
	for i, d := range x.docs {
		remap[i] = -1
		if d.alive {
			remap[i] = int32(len(docs))
			docs = append(docs, d)
		}
	}
	keep := func(post []int32) []int32 {
		out := post[:0]
		for _, n := range post {
			if r := remap[n]; r >= 0 {
				out = append(out, r)
			}
		}
		return out
	}
	for p, post := range x.posts {
		x.posts[p] = keep(post)
	}
	for k, post := range x.entities {
		if post = keep(post); len(post) == 0 {
			delete(x.entities, k)
		} else {
			x.entities[k] = post
		}
	}
	for id, n := range x.byID {
		x.byID[id] = remap[n]
	}
	x.docs, x.dead = docs, 0
}

// Search returns the ids of the observations related to the fact: up to
// limit that share trigrams with its text, best RelatedScore first and
// above Rank's floor, and up to limit more that share one of its entities,
// best first. Ties go to the smaller id.
func (x *LexIndex) Search(fact Fact, limit int) []string {
	hits := x.search(fact, limit)
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.id
	}
	return out
}

// SearchRanked is Search's hits ranked as Rank ranks them as candidates:
// by RelatedScore, best first, ties to the smaller id (every hit is above
// Rank's floor), so that a caller need not score their texts again.
func (x *LexIndex) SearchRanked(fact Fact, limit int) []string {
	hits := x.search(fact, limit)
	slices.SortFunc(hits, lexHit.compare)
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.id
	}
	return out
}

// search is Search with each hit's RelatedScore (its trigram similarity
// plus 0.25 per shared entity), as Search ranked it.
func (x *LexIndex) search(fact Fact, limit int) []lexHit {
	if limit <= 0 || len(x.byID) == 0 {
		return nil
	}
	if len(x.pending) > 0 {
		x.Freeze()
	}
	if cap(x.counts) < len(x.docs) {
		x.counts = make([]int32, len(x.docs))
	}
	counts := x.counts[:len(x.docs)]
	x.touched = x.touched[:0]
	var g []uint64 // the text's distinct grams
	eachGramKey(fact.Text, func(k uint64) { g = append(g, k) })
	slices.Sort(g)
	g = slices.Compact(g)
	for _, k := range g {
		for _, n := range x.postings(k) {
			if counts[n] == 0 {
				x.touched = append(x.touched, n)
			}
			counts[n]++
		}
	}
	factEnts := map[string]bool{}
	for _, e := range fact.Entities {
		if e = strings.ToLower(strings.TrimSpace(e)); e != "" {
			factEnts[e] = true
		}
	}
	sim := func(n int32) float64 {
		inter := counts[n]
		if inter == 0 {
			return 0
		}
		return float64(inter) / float64(int32(len(g))+x.docs[n].ngrams-inter)
	}
	score := func(n int32, sim float64) float64 {
		shared := 0
		for _, e := range x.docs[n].entities {
			if factEnts[e] {
				shared++
			}
		}
		return sim + 0.25*float64(shared)
	}
	// The best limit hits, kept sorted as they come (most are worse than
	// the last kept and cost one comparison).
	better := func(a, b lexHit) bool { return a.compare(b) < 0 }
	keep := func(top []lexHit, h lexHit) []lexHit {
		if len(top) == limit && !better(h, top[len(top)-1]) {
			return top
		}
		i := sort.Search(len(top), func(i int) bool { return better(h, top[i]) })
		if len(top) < limit {
			top = append(top, lexHit{})
		}
		copy(top[i+1:], top[i:len(top)-1])
		top[i] = h
		return top
	}
	var text []lexHit
	for _, n := range x.touched {
		if !x.docs[n].alive {
			continue
		}
		if s := sim(n); s > 0.05 {
			text = keep(text, lexHit{x.docs[n].id, score(n, s)})
		}
	}
	var ent []lexHit
	var seen map[int32]bool
	if len(factEnts) > 1 {
		seen = map[int32]bool{}
	}
	for e := range factEnts {
		for _, n := range x.entities[e] {
			if !x.docs[n].alive || seen[n] {
				continue
			}
			if seen != nil {
				seen[n] = true
			}
			ent = keep(ent, lexHit{x.docs[n].id, score(n, sim(n))})
		}
	}
	for _, n := range x.touched {
		counts[n] = 0
	}
	out := append(make([]lexHit, 0, len(text)+len(ent)), text...)
	for _, h := range ent {
		if !slices.ContainsFunc(out[:len(text)], func(t lexHit) bool { return t.id == h.id }) {
			out = append(out, h)
		}
	}
	return out
}

type lexHit struct {
	id string
	s  float64
}

// compare orders hits as Rank orders candidates: the higher score first,
// ties to the smaller id.
func (h lexHit) compare(o lexHit) int {
	return cmp.Or(cmp.Compare(o.s, h.s), strings.Compare(h.id, o.id))
}
