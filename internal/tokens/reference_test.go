package tokens

import (
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"
	"unicode/utf8"
)

// referenceRow is one line of testdata/reference.jsonl.gz, written by
// hack/tokenfixtures/reference.mjs: per encoding, the reference tiktoken's
// count and idsHash of its ids.
type referenceRow struct {
	Text   string    `json:"text"`
	CL100K [2]any    `json:"cl100k_base"`
	O200K  [2]any    `json:"o200k_base"`
	want   [2]string // hashes, by encoding index
	count  [2]int
}

// gzipLines returns a scanner over the lines of a gzipped testdata file.
func gzipLines(t testing.TB, path string) *bufio.Scanner {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 1<<24)
	return sc
}

func loadReference(t testing.TB) []referenceRow {
	t.Helper()
	sc := gzipLines(t, "testdata/reference.jsonl.gz")
	var header struct {
		Strings int `json:"strings"`
	}
	var rows []referenceRow
	for first := true; sc.Scan(); first = false {
		if first {
			if err := json.Unmarshal(sc.Bytes(), &header); err != nil {
				t.Fatal(err)
			}
			continue
		}
		var r referenceRow
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		for k, v := range [2][2]any{r.CL100K, r.O200K} {
			r.count[k] = int(v[0].(float64))
			r.want[k] = v[1].(string)
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) != header.Strings || len(rows) < 40000 {
		t.Fatalf("read %d reference strings, header says %d", len(rows), header.Strings)
	}
	return rows
}

// idsHash must match idsHash in hack/tokenfixtures/reference.mjs.
func idsHash(ids []int) string {
	buf := make([]byte, 4*len(ids))
	for i, id := range ids {
		binary.LittleEndian.PutUint32(buf[4*i:], uint32(id))
	}
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:8])
}

// TestReference compares token ids, not only counts, with the reference
// tiktoken on the adversarial corpus: every assigned code point of Unicode
// 16 in context, white-space and digit runs, contractions with every
// apostrophe and case, emoji sequences, long runs, prose in many scripts,
// code, and random strings of tricky characters.
func TestReference(t *testing.T) {
	rows := loadReference(t)
	for k, name := range []string{CL100K, O200K} {
		e := MustGet(name)
		mismatches := 0
		for _, r := range rows {
			ids := e.Encode(r.Text)
			if len(ids) == r.count[k] && idsHash(ids) == r.want[k] {
				continue
			}
			mismatches++
			if mismatches <= 10 {
				t.Errorf("%s %q: %d tokens %v, reference has %d tokens", name, abbrev(r.Text), len(ids), abbrevIDs(ids), r.count[k])
			}
		}
		if mismatches > 0 {
			t.Errorf("%s: %d of %d strings differ from the reference", name, mismatches, len(rows))
		}
	}
}

// TestReferenceDerived checks the other entry points against the same
// corpus: Count, CountUpTo, Decode and Truncate agree with Encode.
func TestReferenceDerived(t *testing.T) {
	rows := loadReference(t)
	for k, name := range []string{CL100K, O200K} {
		e := MustGet(name)
		for i, r := range rows {
			if i%7 != 0 { // a sample keeps -race runs short
				continue
			}
			want := r.count[k]
			if n := e.CountUncached(r.Text); n != want {
				t.Fatalf("%s %q: CountUncached %d, want %d", name, abbrev(r.Text), n, want)
			}
			if n, over := e.CountUpTo(r.Text, want); n != want || over {
				t.Fatalf("%s %q: CountUpTo(%d) = %d, %v", name, abbrev(r.Text), want, n, over)
			}
			if want > 0 {
				if n, over := e.CountUpTo(r.Text, want-1); !over || n < want {
					t.Fatalf("%s %q: CountUpTo(%d) = %d, %v; want over", name, abbrev(r.Text), want-1, n, over)
				}
			}
			if got := e.Decode(e.Encode(r.Text)); got != r.Text {
				t.Fatalf("%s %q: decodes to %q", name, abbrev(r.Text), abbrev(got))
			}
			if want > 1 {
				max := 1 + i%want
				got, n := e.Truncate(r.Text, max)
				if n > max || n != e.CountUncached(got) || !utf8.ValidString(got) || len(got) > len(r.Text) || r.Text[:len(got)] != got {
					t.Fatalf("%s %q: Truncate(%d) = %q, %d (count %d)", name, abbrev(r.Text), max, abbrev(got), n, e.CountUncached(got))
				}
			}
		}
	}
}

func abbrevIDs(ids []int) []int {
	if len(ids) > 12 {
		return ids[:12]
	}
	return ids
}
