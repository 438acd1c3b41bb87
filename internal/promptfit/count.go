package promptfit

import (
	"context"
	"encoding/binary"
	"strings"

	"github.com/promptops/promptops/internal/tokens"
)

// counts counts a runtime assembly's parts, joins and blocks, each text at
// most once: a body is split at its first and last split points (a line
// feed before a letter or a number, tokens.StartsPiece), where the count of
// the prompt, of the body alone and of its block all split exactly. The
// middle of a body is counted once; its edges, with the headings and
// separators around them (the glue), are counted when they change, and
// remembered by which bodies they hold. A body with no split point is all
// edge: it is counted in its glue and, when its own count is needed (to cut
// it, or as the block of a section with no heading), alone.
type counts struct {
	ctx   context.Context
	e     Counter
	parts []part
	memo  map[string]int // glue count by the bodies (index, ver, role) in it
	glue  []string
	key   []byte
}

func (c *counts) splits(p *part) {
	if p.split {
		return
	}
	p.split, p.mid = true, -1
	b := p.body
	p.f = 0
	if !tokens.StartsPiece(b) {
		p.f = nextSplit(b)
	}
	if p.f < 0 {
		return // l is not read
	}
	p.l = len(b)
	if !tokens.EndsPiece(b) {
		p.l = lastSplit(b, p.f)
	}
}

// midOf is the count of the body between its split points; f >= 0.
func (c *counts) midOf(p *part) (int, error) {
	if p.mid != -1 {
		return p.mid, nil
	}
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	switch {
	case p.tokens != -1:
		// A cut body: its count is known, its edges are short.
		p.mid = p.tokens - c.e.CountUncached(p.body[:p.f]) - c.e.CountUncached(p.body[p.l:])
	case p.f == 0 && p.l == len(p.body):
		p.tokens = c.e.Count(p.body)
		p.mid = p.tokens
	default:
		p.mid = c.e.Count(p.body[p.f:p.l])
	}
	return p.mid, nil
}

// tokensOf is the count of the body alone.
func (c *counts) tokensOf(p *part) (int, error) {
	if p.tokens != -1 {
		return p.tokens, nil
	}
	c.splits(p)
	if p.f < 0 {
		if err := c.ctx.Err(); err != nil {
			return 0, err
		}
		p.tokens = c.e.Count(p.body)
		return p.tokens, nil
	}
	mid, err := c.midOf(p)
	if err != nil {
		return 0, err
	}
	if p.tokens == -1 {
		p.tokens = c.e.CountUncached(p.body[:p.f]) + mid + c.e.CountUncached(p.body[p.l:])
	}
	return p.tokens, nil
}

// truncate cuts p's body to its first target tokens. Truncate reads no
// further than the budget can use.
func (c *counts) truncate(p *part, target int) error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	if !p.cutNow {
		p.cutNow, p.original = true, p.tokens
	}
	if p.shrink != nil {
		// A memory section: whole items, the lowest-ranked first.
		body, n, err := p.shrink(target)
		if err != nil {
			return err
		}
		p.body, p.tokens = body, n
	} else {
		p.body, p.tokens = c.e.Truncate(p.body, target)
	}
	p.ver++
	p.split = false
	return nil
}

// addGlue adds text to the glue, from body number i (version ver) in role
// ('h' head, 't' tail, 'a' all) or, with i < 0, a heading or separator
// (named by the bodies around it).
func (c *counts) addGlue(i, ver int, role byte, texts ...string) {
	c.glue = append(c.glue, texts...)
	if i >= 0 {
		c.key = binary.AppendUvarint(c.key, uint64(i))
		c.key = binary.AppendUvarint(c.key, uint64(ver))
		c.key = append(c.key, role)
	}
}

// flush counts the glue, once for each content.
func (c *counts) flush() int {
	k := string(c.key)
	n, ok := c.memo[k]
	if !ok {
		n = c.e.Count(strings.Join(c.glue, ""))
		c.memo[k] = n
	}
	c.glue, c.key = c.glue[:0], c.key[:0]
	return n
}

// total is the exact count of the parts' blocks joined by Separator: the
// middles of the bodies plus the glue between them. Headings and
// separators need no key of their own: which ones a glue holds follows from
// the bodies in it (a glue that starts the prompt has no tail before it).
func (c *counts) total() (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	if c.memo == nil {
		c.memo = map[string]int{}
	}
	n := 0
	first := true
	for i := range c.parts {
		p := &c.parts[i]
		if p.body == "" {
			continue
		}
		if !first {
			c.glue = append(c.glue, Separator)
		}
		first = false
		if p.heading != "" {
			c.glue = append(c.glue, p.heading, "\n")
		}
		c.splits(p)
		if p.f < 0 {
			c.addGlue(i, p.ver, 'a', p.body)
			continue
		}
		c.addGlue(i, p.ver, 'h', p.body[:p.f])
		if err := c.ctx.Err(); err != nil {
			return 0, err
		}
		n += c.flush()
		mid, err := c.midOf(p)
		if err != nil {
			return 0, err
		}
		n += mid
		c.addGlue(i, p.ver, 't', p.body[p.l:])
	}
	// The last tail; with no body at all the glue is empty and counts 0.
	n += c.flush()
	return n, nil
}

// blockTokens is the exact count of one part's block, its heading and body.
func (c *counts) blockTokens(p *part) (int, error) {
	switch {
	case p.body == "":
		return 0, nil
	case p.heading == "":
		return c.tokensOf(p)
	}
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	c.splits(p)
	if p.f < 0 {
		return c.e.CountUncached(Block(p.heading, p.body)), nil
	}
	mid, err := c.midOf(p)
	if err != nil {
		return 0, err
	}
	return c.e.CountUncached(p.heading+"\n"+p.body[:p.f]) + mid + c.e.CountUncached(p.body[p.l:]), nil
}

// nextSplit is the first offset i > 0 where s[i-1] is a line feed and
// s[i:] starts a piece, or -1.
func nextSplit(s string) int {
	for i := 0; ; {
		j := strings.IndexByte(s[i:], '\n')
		if j < 0 {
			return -1
		}
		i += j + 1
		if tokens.StartsPiece(s[i:]) {
			return i
		}
	}
}

// lastSplit is the last split offset of s after from (a split point, or 0),
// or from when there is none.
func lastSplit(s string, from int) int {
	for end := len(s); ; {
		j := from + strings.LastIndexByte(s[from:end], '\n')
		if j < from {
			return from
		}
		if tokens.StartsPiece(s[j+1:]) {
			return j + 1
		}
		end = j
	}
}
