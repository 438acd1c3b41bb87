package consolidation

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func randVec(rng *rand.Rand, d int) []float32 {
	v := make([]float32, d)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// TestMemIndex: the quantized cosines stay within 0.01 of the exact ones,
// the nearest comes first, and Remove and Put keep the index consistent.
func TestMemIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const d = 256
	idx := NewMemIndex(d)
	vecs := map[string][]float32{}
	for i := 0; i < 500; i++ {
		id := fmt.Sprintf("o%03d", i)
		vecs[id] = randVec(rng, d)
		idx.Put(id, vecs[id])
	}
	q := append([]float32(nil), vecs["o042"]...)
	for i := range q {
		q[i] += 0.1 * float32(rng.NormFloat64())
	}
	hits := idx.Nearest([][]float32{q, nil}, 5, -1)
	if len(hits[0]) != 5 || hits[0][0].ID != "o042" || len(hits[1]) != 0 {
		t.Fatalf("%+v", hits)
	}
	for _, h := range hits[0] {
		if exact := Cosine(q, vecs[h.ID]); math.Abs(exact-h.Similarity) > 0.01 {
			t.Fatalf("%s: quantized %.4f exact %.4f", h.ID, h.Similarity, exact)
		}
	}
	idx.Remove("o042")
	idx.Remove("o499")
	idx.Remove("nope")
	if idx.Len() != 498 {
		t.Fatal(idx.Len())
	}
	if hits := idx.Nearest([][]float32{q}, 1, 0.9); len(hits[0]) != 0 {
		t.Fatalf("a removed vector was found: %+v", hits)
	}
	idx.Put("o042", vecs["o042"])
	if hits := idx.Nearest([][]float32{vecs["o042"]}, 1, 0.99); len(hits[0]) != 1 || hits[0][0].ID != "o042" {
		t.Fatalf("%+v", hits)
	}
	idx.Put("wrong", make([]float32, 3)) // another dimension is ignored
	if idx.Len() != 499 {
		t.Fatal(idx.Len())
	}
}

// TestFuseKeepsNearestTwin: the semantic arm's best comes first, whatever
// the lexical arm ranks.
func TestFuseKeepsNearestTwin(t *testing.T) {
	c := func(id string) Candidate { return Candidate{Observation: Observation{ID: id}} }
	got := fuse([]Candidate{c("twin"), c("b")}, []Candidate{c("x"), c("y"), c("b"), c("z")})
	want := []string{"twin", "x", "b", "y", "z"}
	if len(got) != len(want) {
		t.Fatalf("%+v", got)
	}
	for i := range want {
		if got[i].ID != want[i] {
			t.Fatalf("%d: %s want %s", i, got[i].ID, want[i])
		}
	}
}

// TestMemIndexFindsTwinsAmongMany: past the exact-scan size the search goes
// through the signs first; a row at a cosine of 0.6 or more to the query
// still comes first among 20,000.
func TestMemIndexFindsTwinsAmongMany(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const d, n = 384, 20000
	idx := NewMemIndex(d)
	idx.Grow(n)
	rows := make([][]float32, n)
	for i := range rows {
		rows[i] = randVec(rng, d)
		idx.Put(fmt.Sprint(i), rows[i])
	}
	var queries [][]float32
	var want []string
	for q := 0; q < 40; q++ {
		i := rng.IntN(n)
		v := append([]float32(nil), rows[i]...)
		for x := range v {
			v[x] += 1.3 * float32(rng.NormFloat64()) // cosine about 0.6
		}
		queries = append(queries, v)
		want = append(want, fmt.Sprint(i))
	}
	hits := idx.Nearest(queries, 3, 0.3)
	for q := range queries {
		if len(hits[q]) == 0 || hits[q][0].ID != want[q] {
			t.Fatalf("query %d: want %s first, got %+v (exact cosine %.2f)", q, want[q], hits[q], Cosine(queries[q], rows[atoi(want[q])]))
		}
	}
}

func atoi(s string) int {
	n := 0
	fmt.Sscan(s, &n)
	return n
}

// TestSignsAreThePositiveDimensions: bit i of signs is q[i] > 0, over every
// int8 value and a length that is not a multiple of 64.
func TestSignsAreThePositiveDimensions(t *testing.T) {
	q := make([]int8, 300)
	for i := range q {
		q[i] = int8(i*37 - 128)
	}
	q[5], q[64], q[299] = 0, -128, 127
	b := make([]uint64, (len(q)+63)/64)
	signs(q, b)
	for i, x := range q {
		if got := b[i/64]>>(i%64)&1 == 1; got != (x > 0) {
			t.Fatalf("dimension %d (%d): bit %v", i, x, got)
		}
	}
	if b[len(b)-1]>>(len(q)%64) != 0 {
		t.Fatal("bits past the last dimension are set")
	}
	// Every length up to three words (whole and partial groups of eight),
	// random values with zeros and both extremes, against the definition.
	r := rand.New(rand.NewPCG(7, 7))
	for n := 1; n <= 192; n++ {
		q := make([]int8, n)
		for i := range q {
			switch r.IntN(6) {
			case 0:
				q[i] = 0
			case 1:
				q[i] = -128
			case 2:
				q[i] = 127
			default:
				q[i] = int8(r.IntN(256) - 128)
			}
		}
		b := make([]uint64, (n+63)/64)
		for i := range b {
			b[i] = ^uint64(0) // every word is written whole
		}
		signs(q, b)
		for i := range b {
			var want uint64
			for k := i * 64; k < min(i*64+64, n); k++ {
				if q[k] > 0 {
					want |= 1 << uint(k-i*64)
				}
			}
			if b[i] != want {
				t.Fatalf("length %d, word %d: %064b, want %064b", n, i, b[i], want)
			}
		}
	}
}

// TestNearestGroupedEqualsOneByOne: a search of many queries (counted eight
// to a pass over the rows, with a query without a vector among them) finds
// exactly what each query finds alone (counted one at a time), at a recall
// floor and at the guard's, where most rows stop early.
func TestNearestGroupedEqualsOneByOne(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const d, n = 256, 5000
	idx := NewMemIndex(d)
	rows := make([][]float32, n)
	for i := range rows {
		rows[i] = randVec(rng, d)
		idx.Put(fmt.Sprint(i), rows[i])
	}
	var queries [][]float32
	for q := 0; q < 11; q++ {
		if q == 3 {
			queries = append(queries, nil)
			continue
		}
		v := append([]float32(nil), rows[rng.IntN(n)]...)
		noise := []float32{0.05, 0.4, 1.3}[q%3]
		for x := range v {
			v[x] += noise * float32(rng.NormFloat64())
		}
		queries = append(queries, v)
	}
	for _, c := range []struct {
		k     int
		floor float64
	}{{20, 0.3}, {4, 0.97}, {5, -1}} {
		all := idx.Nearest(queries, c.k, c.floor)
		for q := range queries {
			alone := idx.Nearest(queries[q:q+1], c.k, c.floor)[0]
			if fmt.Sprint(all[q]) != fmt.Sprint(alone) {
				t.Fatalf("k %d floor %v query %d: grouped %v, alone %v", c.k, c.floor, q, all[q], alone)
			}
		}
	}
}

// TestMemIndexHoldsWhatItNeeds: a scope of ten vectors does not take a
// block of 1,024; grown row by row a block doubles up to blockRows, and
// every vector stays where it was put across the growth.
func TestMemIndexHoldsWhatItNeeds(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const d = 64
	small := NewMemIndex(d)
	for i := range 10 {
		small.Put(fmt.Sprint(i), randVec(rng, d))
	}
	if got := small.rows(); got > 16 {
		t.Errorf("10 vectors hold room for %d", got)
	}
	sized := NewMemIndex(d)
	sized.Grow(10)
	for i := range 10 {
		sized.Put(fmt.Sprint(i), randVec(rng, d))
	}
	if got := sized.rows(); got != 10 {
		t.Errorf("Grow(10) then 10 vectors: room for %d", got)
	}
	big := NewMemIndex(d)
	vecs := make([][]float32, 2100)
	for i := range vecs {
		vecs[i] = randVec(rng, d)
		big.Put(fmt.Sprint(i), vecs[i])
	}
	if len(big.data) != 3 || len(big.data[0]) != blockRows*d || len(big.data[1]) != blockRows*d || big.rows() > 2*blockRows+128 {
		t.Errorf("2,100 vectors: %d blocks, room for %d", len(big.data), big.rows())
	}
	for _, i := range []int{0, 1, 511, 1023, 1024, 2099} {
		if hits := big.Nearest([][]float32{vecs[i]}, 1, 0.99); len(hits[0]) != 1 || hits[0][0].ID != fmt.Sprint(i) {
			t.Errorf("vector %d after growth: %+v", i, hits)
		}
	}
}
