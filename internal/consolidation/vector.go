package consolidation

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"sort"
	"sync"
	"unsafe"
)

// Space is the embedding model and dimension a vector came from. Vectors
// of different spaces are never compared.
type Space struct {
	Model string
	Dims  int
}

func (s Space) String() string { return fmt.Sprintf("%s/%d", s.Model, s.Dims) }

// Embeddings is the answer to one embeddings call.
type Embeddings struct {
	// Vectors has one vector per input, nil for an input that failed.
	Vectors [][]float32
	// Errs has one entry per input: why it failed (the server refused it,
	// e.g. too long), nil when it did not.
	Errs []error
	// Tokens the server reported; 0 when it reported none.
	Tokens int64
}

// Embedder embeds texts with one model. An error means the server could
// not be reached or kept failing; an input the server refused is reported
// in Embeddings.Errs and costs only that input.
type Embedder interface {
	Model() string
	Embed(ctx context.Context, texts []string) (Embeddings, error)
}

// Quantize returns v normalised and quantized to int8, with its scale, as
// MemIndex keeps it.
func Quantize(v []float32) ([]int8, float32) {
	q := make([]int8, len(v))
	return q, quantize(v, q)
}

// Scored is an observation found by a vector search.
type Scored struct {
	ID         string
	Similarity float64
}

// MemIndex finds a bank's observations nearest to query vectors by
// cosine, in memory: the engine's, kept in step with what a run applies,
// and a served bank's (Recaller).  Each unit vector is kept twice:
// quantized to int8 with a scale (cosines within about 0.01 of the exact
// ones) and as its signs, one bit a dimension. A search ranks the whole
// index by the Hamming distance of the signs (the angle's estimate), then
// rescores the best few hundred per query with the int8 vectors. A bank of
// n observations at d dimensions holds about n*(9d/8+100) bytes: 100,000 at
// 1,536 dimensions about 180 MB. The vectors sit in blocks of blockRows, so
// that the index grows (a run's new observations) without copying it and
// without holding it twice on the way.
type MemIndex struct {
	dims  int
	words int // uint64 words of signs per vector
	ids   []string
	data  [][]int8   // blocks of blockRows vectors (the last may hold fewer)
	bits  [][]uint64 // their signs, block by block
	scale []float32
	pos   map[string]int
	want  int // rows Grow made room for
}

// blockRows is how many vectors a block of MemIndex holds at most: 1.5 MB
// at 1,536 dimensions. The last block starts at the size Grow asked for (or
// one row) and doubles, so a small index (one user's scope) holds what it
// needs, not a whole block.
const blockRows = 1024

// vec is row i's int8 vector.
func (m *MemIndex) vec(i int) []int8 {
	o := (i % blockRows) * m.dims
	return m.data[i/blockRows][o : o+m.dims : o+m.dims]
}

// sig is row i's sign bits.
func (m *MemIndex) sig(i int) []uint64 {
	o := (i % blockRows) * m.words
	return m.bits[i/blockRows][o : o+m.words : o+m.words]
}

// NewMemIndex returns an empty index of vectors of dims dimensions.
func NewMemIndex(dims int) *MemIndex {
	return &MemIndex{dims: dims, words: (dims + 63) / 64, pos: map[string]int{}}
}

// Grow makes room for n more vectors at once, so that loading a bank does
// not double its slices (and the peak memory) on the way.
func (m *MemIndex) Grow(n int) {
	if n <= 0 {
		return
	}
	m.ids = slices.Grow(m.ids, n)
	m.scale = slices.Grow(m.scale, n)
	m.want = max(m.want, len(m.ids)+n)
	if len(m.pos) == 0 {
		m.pos = make(map[string]int, n)
	}
}

// signs writes q's sign bits into b: bit i is set when q[i] > 0. A bank's
// load runs it on every dimension of every vector, so it takes eight
// dimensions at a time in one uint64 (no branch on a sign, which is a coin
// toss): a byte's high bit after (x&0x7f)+0x7f | x says it is not zero, and
// without its sign bit that it is positive; one multiplication gathers the
// eight high bits into the low byte, dimension k at bit k.
func signs(q []int8, b []uint64) {
	const lo7, hi = 0x7f7f7f7f7f7f7f7f, 0x8080808080808080
	bs := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(q))), len(q))
	for w := range b {
		chunk := bs[w*64 : min(w*64+64, len(bs))]
		var word uint64
		i := 0
		if len(chunk) == 64 {
			c := (*[64]byte)(chunk)
			for ; i < 64; i += 8 {
				x := binary.LittleEndian.Uint64(c[i : i+8 : i+8])
				pos := ((x & lo7) + lo7 | x) &^ x & hi
				word |= ((pos >> 7) * 0x0102040810204080 >> 56) << uint(i)
			}
		}
		for ; i+8 <= len(chunk); i += 8 {
			x := binary.LittleEndian.Uint64(chunk[i:])
			pos := ((x & lo7) + lo7 | x) &^ x & hi
			word |= ((pos >> 7) * 0x0102040810204080 >> 56) << uint(i)
		}
		for ; i < len(chunk); i++ {
			word |= uint64(uint32(-int32(int8(chunk[i])))>>31) << uint(i)
		}
		b[w] = word
	}
}

// quantize writes v, normalised, into q and returns its scale. It runs
// once per vector a run loads, so it multiplies by one inverse and rounds
// (half away from zero) without math.Round.
func quantize(v []float32, q []int8) float32 {
	var norm, maxAbs float64
	for _, x := range v {
		f := float64(x)
		norm += f * f
		if f < 0 {
			f = -f
		}
		if f > maxAbs {
			maxAbs = f
		}
	}
	norm = math.Sqrt(norm)
	if norm == 0 {
		clear(q)
		return 0
	}
	step := maxAbs / norm / 127
	inv := 1 / (norm * step)
	for i, x := range v {
		f := float64(x) * inv
		if f >= 0 {
			q[i] = int8(f + 0.5)
		} else {
			q[i] = int8(f - 0.5)
		}
	}
	return float32(step)
}

// slot is id's row, added (zeroed) when id has none.
func (m *MemIndex) slot(id string) int {
	i, ok := m.pos[id]
	if !ok {
		i = len(m.ids)
		m.pos[id] = i
		m.ids = append(m.ids, id)
		m.room(i)
		m.scale = append(m.scale, 0)
	}
	return i
}

// room makes row i's block hold row i: a new block, or the last one grown
// to twice its rows (or to what Grow asked for), at most blockRows.
func (m *MemIndex) room(i int) {
	b, r := i/blockRows, i%blockRows
	if b == len(m.data) {
		m.data, m.bits = append(m.data, nil), append(m.bits, nil)
	}
	have := 0
	if m.words > 0 {
		have = len(m.bits[b]) / m.words
	}
	if r < have {
		return
	}
	rows := min(blockRows, max(r+1, 2*have, m.want-b*blockRows))
	data := make([]int8, rows*m.dims)
	copy(data, m.data[b])
	bits := make([]uint64, rows*m.words)
	copy(bits, m.bits[b])
	m.data[b], m.bits[b] = data, bits
}

// Put adds or replaces id's vector; a vector of another dimension is ignored.
func (m *MemIndex) Put(id string, vec []float32) {
	if len(vec) != m.dims {
		return
	}
	i := m.slot(id)
	q := m.vec(i)
	m.scale[i] = quantize(vec, q)
	signs(q, m.sig(i))
}

// PutQuantized adds or replaces id's vector as Quantize made it; one of
// another dimension is ignored.
func (m *MemIndex) PutQuantized(id string, q []int8, scale float32) {
	if len(q) != m.dims {
		return
	}
	i := m.slot(id)
	dst := m.vec(i)
	copy(dst, q)
	m.scale[i] = scale
	signs(dst, m.sig(i))
}

// Remove forgets id, moving the last vector into its place.
func (m *MemIndex) Remove(id string) {
	i, ok := m.pos[id]
	if !ok {
		return
	}
	last := len(m.ids) - 1
	if i != last {
		m.ids[i] = m.ids[last]
		m.pos[m.ids[i]] = i
		copy(m.vec(i), m.vec(last))
		copy(m.sig(i), m.sig(last))
		m.scale[i] = m.scale[last]
	}
	delete(m.pos, id)
	m.ids = m.ids[:last]
	if last%blockRows == 0 {
		// The last block is empty now.
		m.data[len(m.data)-1], m.bits[len(m.bits)-1] = nil, nil
		m.data, m.bits = m.data[:len(m.data)-1], m.bits[:len(m.bits)-1]
	}
	m.scale = m.scale[:last]
}

// rows is how many vectors m's blocks have room for.
func (m *MemIndex) rows() int {
	n := 0
	for _, b := range m.bits {
		if m.words > 0 {
			n += len(b) / m.words
		}
	}
	return n
}

// Len is the number of vectors held.
func (m *MemIndex) Len() int { return len(m.ids) }

// rescore is how many vectors per query, at least, are scored exactly
// after the ranking by signs.
const rescore = 64

// Nearest ranks the index by signs for all queries in one pass, then scores
// exactly each query's best rescore (or 4k) rows among those whose signs
// leave them a chance to reach the floor. Below that many rows it scores
// every row exactly.
func (m *MemIndex) Nearest(queries [][]float32, k int, floor float64) [][]Scored {
	d, w, n := m.dims, m.words, len(m.ids)
	qs := make([]int8, len(queries)*d)
	qb := make([]uint64, len(queries)*w)
	qscale := make([]float32, len(queries))
	for j, q := range queries {
		if len(q) == d {
			qscale[j] = quantize(q, qs[j*d:(j+1)*d])
			signs(qs[j*d:(j+1)*d], qb[j*w:(j+1)*w])
		}
	}
	out := make([][]Scored, len(queries))
	score := func(i, j int) {
		sim := float64(dot8(m.vec(i), qs[j*d:(j+1)*d])) * float64(m.scale[i]) * float64(qscale[j])
		if sim >= floor {
			out[j] = insertTop(out[j], Scored{ID: m.ids[i], Similarity: sim}, k)
		}
	}
	want := max(rescore, 4*k)
	if n <= want {
		for i := 0; i < n; i++ {
			for j := range queries {
				if qscale[j] != 0 {
					score(i, j)
				}
			}
		}
		return out
	}
	// The share of differing signs estimates the angle over pi, with a
	// standard deviation of at most pi/(2*sqrt(d)) radians: rows more than
	// four of those past the floor's angle cannot reach the floor.
	maxH := w * 64
	if floor > -1 {
		angle := math.Acos(min(floor, 1)) + 2*math.Pi/math.Sqrt(float64(d))
		maxH = min(maxH, int(angle/math.Pi*float64(d)))
	}
	// Hamming distances, row-major per query, and a histogram per query
	// to find the distance that admits want rows.
	// Both passes split across the cores: rows for the distances (each
	// part its own histograms, added up), queries for the scoring; the
	// results do not depend on the split.
	dist := make([]uint16, len(queries)*n)
	// The queries' signs in groups of eight, word-interleaved (word x of
	// query 8g+k at qt[g][8x+k]), so that one pass over a row's words
	// serves eight queries. A slot without a query (past the last, or one
	// without a vector) repeats one of the group's queries, so that it
	// never holds the early stop back; its counts are not used. A group
	// without any query is skipped.
	groups := (len(queries) + 7) / 8
	qt := make([]uint64, groups*w*8)
	live := make([]bool, groups)
	for g := range groups {
		first := -1
		for j := g * 8; j < min(g*8+8, len(queries)); j++ {
			if qscale[j] != 0 {
				first = j
				break
			}
		}
		if first < 0 {
			continue
		}
		live[g] = true
		for k := 0; k < 8; k++ {
			j := g*8 + k
			if j >= len(queries) || qscale[j] == 0 {
				j = first
			}
			for x := 0; x < w; x++ {
				qt[g*w*8+x*8+k] = qb[j*w+x]
			}
		}
	}
	parts := nearestParts(n * len(queries))
	hists := make([][]int, parts)
	parallel(parts, func(p int) {
		hist := make([]int, len(queries)*(w*64+1))
		for i := p * n / parts; i < (p+1)*n/parts; i++ {
			row := m.sig(i)
			if len(queries) < 4 {
				// Too few queries to share a pass: one at a time.
				for j := range queries {
					if qscale[j] == 0 {
						continue
					}
					h := min(hammingOver(row, qb[j*w:(j+1)*w], maxH), maxH+1)
					dist[j*n+i] = uint16(h)
					hist[j*(w*64+1)+h]++
				}
				continue
			}
			for g := 0; g < groups; g++ {
				if !live[g] {
					continue
				}
				// A row past maxH for all eight is never scored: the
				// count can stop there (most rows, at the guard's floor).
				h := hamming8(row, qt[g*w*8:(g+1)*w*8], maxH)
				for k := 0; k < 8; k++ {
					j := g*8 + k
					if j >= len(queries) || qscale[j] == 0 {
						continue
					}
					hk := min(h[k], maxH+1)
					dist[j*n+i] = uint16(hk)
					hist[j*(w*64+1)+hk]++
				}
			}
		}
		hists[p] = hist
	})
	hist := hists[0]
	for _, h := range hists[1:] {
		for i, c := range h {
			hist[i] += c
		}
	}
	parallel(min(parts, len(queries)), func(p int) {
		for j := p; j < len(queries); j += parts {
			if qscale[j] == 0 {
				continue
			}
			hj := hist[j*(w*64+1) : (j+1)*(w*64+1)]
			cut, seen := 0, 0
			for cut = range hj {
				if seen += hj[cut]; seen >= want || cut >= maxH {
					break
				}
			}
			dj := dist[j*n : (j+1)*n]
			for i, h := range dj {
				if int(h) <= cut {
					score(i, j)
				}
			}
		}
	})
	return out
}

// nearestParts is how many goroutines Nearest uses for work rows×queries:
// one for small searches, else up to GOMAXPROCS (at most 4).
func nearestParts(work int) int {
	if work < 1<<15 {
		return 1
	}
	return max(1, min(4, runtime.GOMAXPROCS(0)))
}

// parallel runs fn(0..parts-1), the last in the calling goroutine, and
// waits for all.
func parallel(parts int, fn func(p int)) {
	if parts <= 1 {
		fn(0)
		return
	}
	var wg sync.WaitGroup
	for p := 0; p < parts-1; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(p)
		}()
	}
	fn(parts - 1)
	wg.Wait()
}

// insertTop keeps the k best, nearest first (ties by id, for stable runs).
func insertTop(top []Scored, s Scored, k int) []Scored {
	better := func(a, b Scored) bool {
		if a.Similarity != b.Similarity {
			return a.Similarity > b.Similarity
		}
		return a.ID < b.ID
	}
	if len(top) == k && !better(s, top[k-1]) {
		return top
	}
	i := sort.Search(len(top), func(i int) bool { return better(s, top[i]) })
	if len(top) < k {
		top = append(top, Scored{})
	}
	copy(top[i+1:], top[i:len(top)-1])
	top[i] = s
	return top
}

// hamming8 counts, for each of eight queries, the bits that differ
// between row and the query, the queries' words interleaved in qt (word x
// of query k at qt[8x+k]). It stops early once every count is above limit;
// the counts are then some values above limit.
func hamming8(row, qt []uint64, limit int) [8]int {
	qt = qt[:len(row)*8]
	var h0, h1, h2, h3, h4, h5, h6, h7 int
	for x, a := range row {
		q := qt[x*8 : x*8+8 : x*8+8]
		h0 += bits.OnesCount64(a ^ q[0])
		h1 += bits.OnesCount64(a ^ q[1])
		h2 += bits.OnesCount64(a ^ q[2])
		h3 += bits.OnesCount64(a ^ q[3])
		h4 += bits.OnesCount64(a ^ q[4])
		h5 += bits.OnesCount64(a ^ q[5])
		h6 += bits.OnesCount64(a ^ q[6])
		h7 += bits.OnesCount64(a ^ q[7])
		if x&3 == 3 && min(h0, h1, h2, h3, h4, h5, h6, h7) > limit {
			break
		}
	}
	return [8]int{h0, h1, h2, h3, h4, h5, h6, h7}
}

// hammingOver counts the bits that differ between a and b (b at least as
// long), stopping early once more than limit differ: it then returns some
// count above limit.
func hammingOver(a, b []uint64, limit int) int {
	b = b[:len(a)]
	h := 0
	x := 0
	for ; x+4 <= len(a); x += 4 {
		h += bits.OnesCount64(a[x]^b[x]) + bits.OnesCount64(a[x+1]^b[x+1]) +
			bits.OnesCount64(a[x+2]^b[x+2]) + bits.OnesCount64(a[x+3]^b[x+3])
		if h > limit {
			return h
		}
	}
	for ; x < len(a); x++ {
		h += bits.OnesCount64(a[x] ^ b[x])
	}
	return h
}

func dot8(a, b []int8) int32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 int32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += int32(a[i]) * int32(b[i])
		s1 += int32(a[i+1]) * int32(b[i+1])
		s2 += int32(a[i+2]) * int32(b[i+2])
		s3 += int32(a[i+3]) * int32(b[i+3])
	}
	for ; i < len(a); i++ {
		s0 += int32(a[i]) * int32(b[i])
	}
	return s0 + s1 + s2 + s3
}

// Cosine is the exact cosine of two vectors of one space.
func Cosine(a, b []float32) float64 {
	if len(a) != len(b) || len(a) == 0 {
		return 0
	}
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	if aa == 0 || bb == 0 {
		return 0
	}
	return ab / math.Sqrt(aa*bb)
}
