package llm

import (
	"bytes"
	"strconv"
)

// answerItem is one vector of an embeddings answer and the index the
// server gave it (-1 when it gave none).
type answerItem struct {
	index int
	vec   []float32
}

// fastAnswer reads the common embeddings answer, {"data": [{"embedding":
// [numbers], "index": i, ...}], "usage": {...}, ...}, in one pass that
// validates it as json.Unmarshal would. A served recall decodes one per
// query: json.Unmarshal scans the whole body twice (to validate it, then to
// skip the numbers into a json.RawMessage) before parseNumbers reads them.
// ok is false for anything it does not read exactly as that general path
// would (a base64 vector, a key in other case or repeated, a null, a
// non-integer index or count, nesting deeper than 64, invalid JSON); the
// general path then decides, with its errors.
func fastAnswer(body []byte) (items []answerItem, prompt, total int64, ok bool) {
	p := &jsonScan{b: body}
	p.ws()
	// A repeated key the answer is read from goes to the general path
	// (encoding/json keeps the last); other keys are skipped, as there.
	var dataSeen, usageSeen bool
	ok = p.object(func(key []byte) bool {
		k := string(key)
		switch {
		case k == "data" && !dataSeen:
			dataSeen = true
			return p.array(func() bool {
				it := answerItem{index: -1}
				var hasVec, indexSeen bool
				if !p.object(func(key []byte) bool {
					k := string(key)
					switch {
					case k == "embedding" && !hasVec:
						it.vec, hasVec = p.numbers()
						return hasVec
					case k == "index" && !indexSeen:
						indexSeen = true
						n, ok := p.integer()
						it.index = int(n)
						return ok && n >= 0 && n <= 1<<31
					case k == "embedding", k == "index", foldEq(key, "embedding"), foldEq(key, "index"):
						return false
					}
					return p.skip(1)
				}) || !hasVec {
					return false
				}
				items = append(items, it)
				return true
			})
		case k == "usage" && !usageSeen:
			usageSeen = true
			var pSeen, tSeen bool
			return p.object(func(key []byte) bool {
				k := string(key)
				var ok bool
				switch {
				case k == "prompt_tokens" && !pSeen:
					pSeen = true
					prompt, ok = p.integer()
					return ok
				case k == "total_tokens" && !tSeen:
					tSeen = true
					total, ok = p.integer()
					return ok
				case k == "prompt_tokens", k == "total_tokens", foldEq(key, "prompt_tokens"), foldEq(key, "total_tokens"):
					return false
				}
				return p.skip(1)
			})
		case k == "data", k == "usage", foldEq(key, "data"), foldEq(key, "usage"):
			return false
		}
		return p.skip(1)
	})
	if !ok {
		return nil, 0, 0, false
	}
	p.ws()
	return items, prompt, total, p.i == len(p.b)
}

// foldEq tells whether key is name in another case, which json.Unmarshal
// would also match.
func foldEq(key []byte, name string) bool {
	return string(key) != name && bytes.EqualFold(key, []byte(name))
}

// jsonScan validates and reads JSON at b[i:].
type jsonScan struct {
	b []byte
	i int
}

const maxScanDepth = 64

// maxPresize bounds the numbers a vector is sized for before they are read:
// above any embedding model's dimensions.
const maxPresize = 1 << 14

func (p *jsonScan) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonScan) peek() byte {
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

// object reads an object, calling member for each key with the position
// at its value; member reads the value.
func (p *jsonScan) object(member func(key []byte) bool) bool {
	return p.list('{', '}', func() bool {
		key, escaped, ok := p.str()
		if !ok || escaped {
			return false
		}
		p.ws()
		if p.peek() != ':' {
			return false
		}
		p.i++
		p.ws()
		return member(key)
	})
}

// array reads an array, calling elem at each element.
func (p *jsonScan) array(elem func() bool) bool {
	return p.list('[', ']', elem)
}

// list reads open, elements separated by commas, and close; elem reads an
// element.
func (p *jsonScan) list(open, close byte, elem func() bool) bool {
	if p.peek() != open {
		return false
	}
	p.i++
	p.ws()
	if p.peek() == close {
		p.i++
		return true
	}
	for {
		p.ws()
		if !elem() {
			return false
		}
		p.ws()
		switch p.peek() {
		case ',':
			p.i++
		case close:
			p.i++
			return true
		default:
			return false
		}
	}
}

// str reads a string and returns its raw bytes (escapes not decoded) and
// whether it had any.
func (p *jsonScan) str() (raw []byte, escaped, ok bool) {
	if p.peek() != '"' {
		return nil, false, false
	}
	start := p.i + 1
	for i := start; i < len(p.b); i++ {
		switch c := p.b[i]; {
		case c == '"':
			p.i = i + 1
			return p.b[start:i], escaped, true
		case c < 0x20:
			return nil, false, false
		case c == '\\':
			escaped = true
			i++
			if i >= len(p.b) {
				return nil, false, false
			}
			switch p.b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(p.b) {
					return nil, false, false
				}
				for _, h := range p.b[i+1 : i+5] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return nil, false, false
					}
				}
				i += 4
			default:
				return nil, false, false
			}
		}
	}
	return nil, false, false
}

// number reads a number as JSON's grammar has it and returns its text.
func (p *jsonScan) number() ([]byte, bool) {
	b, i := p.b, p.i
	start := i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return nil, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return nil, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return nil, false
		}
	}
	p.i = i
	return b[start:i], true
}

// integer reads a number that json.Unmarshal reads into an int64.
func (p *jsonScan) integer() (int64, bool) {
	text, ok := p.number()
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(string(text), 10, 64)
	return n, err == nil
}

// numbers reads a non-empty array of numbers as float32s, as json.Unmarshal
// reads them into []float32.
func (p *jsonScan) numbers() ([]float32, bool) {
	if p.peek() != '[' {
		return nil, false
	}
	// About one comma per number: one allocation for a vector, but no
	// more than maxPresize numbers on the commas' word (a body of commas
	// must not allocate before it fails); a longer vector grows as read.
	end := bytes.IndexByte(p.b[p.i:], ']')
	if end < 0 {
		return nil, false
	}
	fs := make([]float32, 0, min(bytes.Count(p.b[p.i:p.i+end], []byte{','})+1, maxPresize))
	ok := p.array(func() bool {
		text, ok := p.number()
		if !ok {
			return false
		}
		f, err := strconv.ParseFloat(string(text), 32)
		if err != nil {
			return false
		}
		fs = append(fs, float32(f))
		return true
	})
	return fs, ok && len(fs) > 0
}

// skip reads and validates any value.
func (p *jsonScan) skip(depth int) bool {
	if depth > maxScanDepth {
		return false
	}
	switch c := p.peek(); {
	case c == '{':
		return p.object(func([]byte) bool { return p.skip(depth + 1) })
	case c == '[':
		return p.array(func() bool { return p.skip(depth + 1) })
	case c == '"':
		_, _, ok := p.str()
		return ok
	case c == '-' || c >= '0' && c <= '9':
		_, ok := p.number()
		return ok
	}
	for _, lit := range []string{"true", "false", "null"} {
		if bytes.HasPrefix(p.b[p.i:], []byte(lit)) {
			p.i += len(lit)
			return true
		}
	}
	return false
}
