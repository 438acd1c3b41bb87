package tokens

import (
	"iter"
	"slices"
	"strings"
)

// specials finds the special-token strings of an encoding in text, as the
// reference tokenizer splits them out before pre-tokenizing: leftmost, and
// the longest at that place. A trie walked from each byte that starts one;
// a walk stops at the first byte no special continues with, so a text
// costs at most its length times the longest special, and a text of '<'
// one step a byte.
type specials struct {
	nodes []specialNode
	// starts marks the bytes a special begins with; start is the only one
	// when there is one (all of Llama 3's begin with '<'), -1 otherwise.
	starts [256]bool
	start  int
	// text is each special's string, by id less base.
	text []string
	base uint32
}

type specialNode struct {
	// edges are (byte, node) pairs sorted by byte.
	edges []specialEdge
	// id is the special ending here, plus one; 0 when none does.
	id uint32
}

type specialEdge struct {
	b  byte
	to uint32
}

// newSpecials builds the matcher of strings to ids; ids are dense from the
// lowest (added tokens follow the vocabulary).
func newSpecials(ids map[string]uint32) *specials {
	if len(ids) == 0 {
		return nil
	}
	s := &specials{nodes: make([]specialNode, 1)}
	s.base = ^uint32(0)
	for _, id := range ids {
		s.base = min(s.base, id)
	}
	keys := make([]string, 0, len(ids))
	for k := range ids {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		id := ids[k]
		if int(id-s.base) >= len(s.text) {
			s.text = append(s.text, make([]string, int(id-s.base)+1-len(s.text))...)
		}
		s.text[id-s.base] = k
		s.starts[k[0]] = true
		at := uint32(0)
		for i := 0; i < len(k); i++ {
			next, ok := s.step(at, k[i])
			if !ok {
				next = uint32(len(s.nodes))
				s.nodes = append(s.nodes, specialNode{})
				// Keys are added in sorted order, so a new edge is the
				// node's greatest byte so far.
				s.nodes[at].edges = append(s.nodes[at].edges, specialEdge{k[i], next})
			}
			at = next
		}
		s.nodes[at].id = id + 1
	}
	starts := 0
	for b, ok := range s.starts {
		if ok {
			starts, s.start = starts+1, b
		}
	}
	if starts > 1 {
		s.start = -1
	}
	return s
}

func (s *specials) step(at uint32, b byte) (uint32, bool) {
	for _, e := range s.nodes[at].edges {
		if e.b == b {
			return e.to, true
		}
		if e.b > b {
			break
		}
	}
	return 0, false
}

// next finds the first special in text at or after from: its start, end and
// id; ok is false when there is none.
func (s *specials) next(text string, from int) (start, end int, id uint32, ok bool) {
	for i := from; i < len(text); i++ {
		if s.start >= 0 {
			k := strings.IndexByte(text[i:], byte(s.start))
			if k < 0 {
				break
			}
			i += k
		} else if !s.starts[text[i]] {
			continue
		}
		at := uint32(0)
		for j := i; j < len(text); j++ {
			n, ok := s.step(at, text[j])
			if !ok {
				break
			}
			at = n
			if s.nodes[at].id != 0 {
				end, id = j+1, s.nodes[at].id-1
			}
		}
		if end > 0 {
			return i, end, id, true
		}
	}
	return 0, 0, 0, false
}

// segment is a span of a text: plain text between specials (special -1)
// or one special (its id).
type segment struct {
	start, end int
	special    int
}

// segments yields the text's plain spans and specials in order; a plain
// span is never empty, and a text with no special is one plain span.
func (s *specials) segments(text string) iter.Seq[segment] {
	return func(yield func(segment) bool) {
		for from := 0; ; {
			start, end, id, ok := s.next(text, from)
			if !ok {
				if from < len(text) {
					yield(segment{from, len(text), -1})
				}
				return
			}
			if start > from && !yield(segment{from, start, -1}) {
				return
			}
			if !yield(segment{start, end, int(id)}) {
				return
			}
			from = end
		}
	}
}

// hasNewline reports whether a special holds a line feed, so that a text
// cannot be cut after one (CountParallel).
func (s *specials) hasNewline() bool {
	if s == nil {
		return false
	}
	for _, t := range s.text {
		if strings.IndexByte(t, '\n') >= 0 {
			return true
		}
	}
	return false
}

// get returns the string of special id.
func (s *specials) get(id int) (string, bool) {
	if s == nil || id < int(s.base) || id-int(s.base) >= len(s.text) || s.text[id-int(s.base)] == "" {
		return "", false
	}
	return s.text[id-int(s.base)], true
}
