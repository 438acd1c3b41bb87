package serve

import (
	"unicode/utf16"
	"unicode/utf8"
)

// decodeFast parses the common request in one pass over the body: one JSON
// object whose keys are among namespace, name, intent, runtime, query and
// scope, each
// at most once, with string values, and runtime an object of strings or
// nulls with keys free of escapes. Values are copied once; a run of
// ordinary characters is scanned a byte at a time and checked as UTF-8 in
// one call, so a 4 MiB value costs a few milliseconds, where
// encoding/json's three passes (validate, scan, unquote) cost several
// times that.
//
// ok is false for anything else (another spelling of a key, a repeated
// key, a null where a string goes, invalid UTF-8, a lone surrogate,
// trailing data, invalid JSON): decodeRequest then decodes with
// encoding/json, which decides and words the error. When ok, req is what
// json.Unmarshal gives (FuzzDecodeFast checks it).
func decodeFast(body []byte) (req AssembleRequest, ok bool) {
	d := fastDecoder{b: body}
	if !d.byte('{') {
		return req, false
	}
	var seen [6]bool
	if d.peek('}') {
		return req, d.end()
	}
	for {
		key, ok := d.key()
		if !ok || !d.byte(':') {
			return req, false
		}
		var field int
		switch key {
		case "namespace":
			field = 0
		case "name":
			field = 1
		case "intent":
			field = 2
		case "runtime":
			field = 3
		case "query":
			field = 4
		case "scope":
			field = 5
		default:
			return req, false
		}
		if seen[field] {
			return req, false
		}
		seen[field] = true
		if field == 3 {
			if req.Runtime, ok = d.runtime(); !ok {
				return req, false
			}
		} else {
			s, ok := d.str()
			if !ok {
				return req, false
			}
			switch field {
			case 0:
				req.Namespace = s
			case 1:
				req.Name = s
			case 2:
				req.Intent = s
			case 4:
				req.Query = s
			case 5:
				req.Scope = s
			}
		}
		if d.byte(',') {
			continue
		}
		if d.byte('}') {
			return req, d.end()
		}
		return req, false
	}
}

type fastDecoder struct {
	b []byte
	i int
}

func (d *fastDecoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// byte consumes c after white space.
func (d *fastDecoder) byte(c byte) bool {
	d.space()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// peek consumes c after white space, like byte.
func (d *fastDecoder) peek(c byte) bool { return d.byte(c) }

// end reports whether only white space is left.
func (d *fastDecoder) end() bool {
	d.space()
	return d.i == len(d.b)
}

// key is an object key without escapes.
func (d *fastDecoder) key() (string, bool) {
	if !d.byte('"') {
		return "", false
	}
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			k := d.b[start:d.i]
			d.i++
			if !utf8.Valid(k) {
				return "", false
			}
			return string(k), true
		case c == '\\' || c < 0x20:
			return "", false
		}
		d.i++
	}
	return "", false
}

// runtime is an object of strings (a null is "", as encoding/json stores
// it in a map of strings).
func (d *fastDecoder) runtime() (map[string]string, bool) {
	if !d.byte('{') {
		return nil, false
	}
	m := map[string]string{}
	if d.peek('}') {
		return m, true
	}
	for {
		k, ok := d.key()
		if !ok || !d.byte(':') {
			return nil, false
		}
		d.space()
		if d.i+4 <= len(d.b) && string(d.b[d.i:d.i+4]) == "null" {
			d.i += 4
			m[k] = ""
		} else {
			v, ok := d.str()
			if !ok {
				return nil, false
			}
			m[k] = v
		}
		if d.byte(',') {
			continue
		}
		return m, d.byte('}')
	}
}

// str is a JSON string, unescaped.
func (d *fastDecoder) str() (string, bool) {
	if !d.byte('"') {
		return "", false
	}
	// The first run often is the whole string: no copy but the result's.
	start := d.i
	d.run()
	if d.i < len(d.b) && d.b[d.i] == '"' {
		s := d.b[start:d.i]
		d.i++
		if !utf8.Valid(s) {
			return "", false
		}
		return string(s), true
	}
	out := make([]byte, 0, d.i-start+64)
	out = append(out, d.b[start:d.i]...)
	for d.i < len(d.b) {
		switch c := d.b[d.i]; c {
		case '"':
			d.i++
			if !utf8.Valid(out) {
				return "", false
			}
			return string(out), true
		case '\\':
			if d.i+1 >= len(d.b) {
				return "", false
			}
			e := d.b[d.i+1]
			d.i += 2
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := d.hex4()
				if !ok {
					return "", false
				}
				if utf16.IsSurrogate(r) {
					// Only a high surrogate followed by a low one is a
					// character; the rest is encoding/json's to replace.
					if r >= 0xdc00 || d.i+2 > len(d.b) || d.b[d.i] != '\\' || d.b[d.i+1] != 'u' {
						return "", false
					}
					d.i += 2
					lo, ok := d.hex4()
					if !ok {
						return "", false
					}
					if r = utf16.DecodeRune(r, lo); r == utf8.RuneError {
						return "", false
					}
				}
				out = utf8.AppendRune(out, r)
			default:
				return "", false
			}
		default:
			if c < 0x20 {
				return "", false
			}
			from := d.i
			d.run()
			out = append(out, d.b[from:d.i]...)
		}
	}
	return "", false
}

// run moves past bytes that need no unescaping: not '"', '\\' or a control
// character.
func (d *fastDecoder) run() {
	b := d.b
	i := d.i
	for i < len(b) {
		c := b[i]
		if c == '"' || c == '\\' || c < 0x20 {
			break
		}
		i++
	}
	d.i = i
}

// hex4 reads the four hex digits of a \u escape.
func (d *fastDecoder) hex4() (rune, bool) {
	if d.i+4 > len(d.b) {
		return 0, false
	}
	var r rune
	for _, c := range d.b[d.i : d.i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	d.i += 4
	return r, true
}
