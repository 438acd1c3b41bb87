package plan

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/promptops/promptops/internal/tokens"
)

// Assembly is one assembled prompt.
type Assembly struct {
	// Intent assembled.
	Intent string
	// Text is the prompt. In a static assembly (Seal) runtime sections
	// appear as their heading and a Placeholder line.
	Text string
	// Tokens is the exact count of Text in a runtime assembly; FixedTokens +
	// ReservedTokens in a static one.
	Tokens int
	// FixedTokens is Tokens less the runtime sections' share.
	FixedTokens int
	// ReservedTokens is the runtime and memory sections' share: their
	// tokens in a runtime assembly, their reserves in a static one.
	ReservedTokens int
	// CacheableTokens counts the prompt's prefix that is the same in every
	// request (Intent.CacheableTokens).
	CacheableTokens int
	// MaxTokens is the plan's budget.
	MaxTokens int
	// WithinBudget is Tokens <= MaxTokens.
	WithinBudget bool
	// Sections holds every section of the plan, in order.
	Sections []SectionResult
	// Cut names the sections that were cut, in the order they were cut.
	Cut []string
	// Memory has one entry per memory section of the plan, in order; nil
	// when the plan has none or the assembly is static (Seal).
	Memory []MemoryResult
}

// SectionResult is one section's share of an assembly.
type SectionResult struct {
	// Name and Kind of the section.
	Name string
	Kind SectionKind
	// Tokens of the section as it is in the prompt, heading included; 0 when
	// it was left out.
	Tokens int
	// TruncatedTokens is how many tokens of its text the cut removed.
	TruncatedTokens int
}

// Message describes the verdict for a user: "intent analyze needs 4312
// tokens (3812 fixed + 500 reserved), budget 4000".
func (a *Assembly) Message() string {
	if a.WithinBudget {
		return fmt.Sprintf("intent %s takes %d tokens (%d fixed + %d reserved) of budget %d", a.Intent, a.Tokens, a.FixedTokens, a.ReservedTokens, a.MaxTokens)
	}
	return fmt.Sprintf("intent %s needs %d tokens (%d fixed + %d reserved), budget %d", a.Intent, a.Tokens, a.FixedTokens, a.ReservedTokens, a.MaxTokens)
}

// block is a section as rendered: heading line, then text. An empty text
// leaves the section out.
func block(heading, text string) string {
	if text == "" {
		return ""
	}
	if heading == "" {
		return text
	}
	return heading + "\n" + text
}

// part is one section while an assembly is being cut.
type part struct {
	name, heading, body string
	kind                SectionKind
	cuttable            bool
	priority, minTokens int
	// tokens is the count of body and original that of the body before
	// any cut; -1 while not yet counted (Assemble counts lazily).
	tokens, original int
	// ver is bumped whenever body changes: the counts remembered for the
	// joins (see counts.total) name the bodies by index and ver.
	ver int
	// Once split is set, f and l are the first and last split points of
	// body (see nextSplit), f = -1 when it has none; mid is the count of
	// body[f:l], -1 until counted.
	split  bool
	f, l   int
	mid    int
	cutNow bool // cut at least once
	// items of a memory section, in rank order; the first kept are in
	// body. A memory section is cut by whole items (FitMemory).
	items []MemoryItem
	kept  int
}

func join(parts []part, render func(p *part) string) string {
	var b strings.Builder
	first := true
	for i := range parts {
		s := render(&parts[i])
		if s == "" {
			continue
		}
		if !first {
			b.WriteString(Separator)
		}
		first = false
		b.WriteString(s)
	}
	return b.String()
}

// counter is what assembly asks of an encoder (*tokens.Encoder); tests wrap
// it to see how much text is counted.
type counter interface {
	Count(text string) int
	CountUncached(text string) int
	Truncate(text string, maxTokens int) (string, int)
}

// cutter is what cut needs: the parts' counts, the prompt's total, and a
// way to replace a body by its cut.
type cutter interface {
	tokensOf(p *part) (int, error)
	total() (int, error)
	truncate(p *part, target int) error
}

// cutOrder lists the parts keep takes in the order they are cut: highest
// priority first, later sections first on a tie.
func cutOrder(parts []part, keep func(p *part) bool) []int {
	order := make([]int, 0, len(parts))
	for i := range parts {
		if keep(&parts[i]) {
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(parts[b].priority, parts[a].priority), cmp.Compare(b, a))
	})
	return order
}

// cut shrinks cuttable parts, in cutOrder, each down to its minimum, until
// the total fits limit. It returns the names of the parts cut, in order, and
// the total after the cuts. t is the total before; a total within limit cuts
// nothing and orders nothing.
func cut(c cutter, parts []part, limit, t int) ([]string, int, error) {
	var cutNames []string
	var order []int
	for k := 0; t > limit; {
		if order == nil {
			order = cutOrder(parts, func(p *part) bool { return p.cuttable })
		}
		if k == len(order) {
			break
		}
		p := &parts[order[k]]
		n, err := c.tokensOf(p)
		if err != nil {
			return nil, 0, err
		}
		if n <= p.minTokens {
			k++ // at its minimum: the next part
			continue
		}
		// t > limit: the target is below n (the 1 only guards that).
		if err := c.truncate(p, max(p.minTokens, n-max(t-limit, 1))); err != nil {
			return nil, 0, err
		}
		if len(cutNames) == 0 || cutNames[len(cutNames)-1] != p.name {
			cutNames = append(cutNames, p.name)
		}
		if t, err = c.total(); err != nil {
			return nil, 0, err
		}
	}
	return cutNames, t, nil
}

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
	ctx      context.Context
	encoding string
	e        counter
	parts    []part
	memo     map[string]int // glue count by the bodies (index, ver, role) in it
	glue     []string
	key      []byte
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
	if p.kind == KindMemory {
		// Whole items: the lowest-ranked go first.
		fit, err := FitMemory(c.encoding, p.items[:p.kept], target)
		if err != nil {
			return err
		}
		p.body, p.tokens, p.kept = fit.Text, fit.Tokens, len(fit.Items)
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
		return c.e.CountUncached(block(p.heading, p.body)), nil
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

// parts turns the plan's sections into parts; body gives a section's text
// and whether this assembly may cut it (Never sections never are). With e
// each text is counted; without, counts are left to Assemble's counts.
func (p *Plan) parts(e *tokens.Encoder, body func(s *Section) (text string, cuttable bool)) []part {
	parts := make([]part, len(p.Sections))
	for i := range p.Sections {
		s := &p.Sections[i]
		text, cuttable := body(s)
		n := -1
		if e != nil {
			n = e.Count(text)
		}
		parts[i] = part{
			name: s.Name, kind: s.Kind, heading: s.Heading, body: text,
			cuttable: cuttable && s.Policy != PolicyNever,
			priority: s.Priority, minTokens: s.MinTokens, tokens: n, original: n,
		}
	}
	return parts
}

// SealOption configures Seal.
type SealOption func(*sealConfig)

type sealConfig struct{ truncate bool }

// WithStaticCuts makes Seal cut static text (by priority, down to each
// section's minTokens) where an intent is over budget: what the operator
// does for onExceed: Truncate. Without it an intent over budget keeps its
// text and its verdict says so.
func WithStaticCuts(on bool) SealOption { return func(c *sealConfig) { c.truncate = on } }

// Seal computes what the operator writes at render time: each intent's
// fixed and reserved tokens and budget verdict (runtime sections count as
// their heading plus their reserve), the static cuts WithStaticCuts asks
// for, and the revision. It returns one static assembly per intent. A plan
// from plan.json is already sealed; Seal is for a plan built in code. It
// stops, with an error wrapping ctx.Err(), when ctx is done: it checks
// between the counts of the cut.
func (p *Plan) Seal(ctx context.Context, opts ...SealOption) ([]*Assembly, error) {
	var cfg sealConfig
	for _, o := range opts {
		o(&cfg)
	}
	e, err := tokens.Get(p.Encoding)
	if err != nil {
		return nil, err
	}
	out := make([]*Assembly, 0, len(p.Intents))
	for i := range p.Intents {
		pi := &p.Intents[i]
		a, err := p.assembleStatic(ctx, e, pi, cfg.truncate)
		if err != nil {
			return nil, fmt.Errorf("plan %s: sealing intent %s: %w", p.Name, pi.Name, err)
		}
		pi.Tokens, pi.FixedTokens, pi.ReservedTokens, pi.WithinBudget = a.Tokens, a.FixedTokens, a.ReservedTokens, a.WithinBudget
		pi.CacheableTokens = a.CacheableTokens
		out = append(out, a)
	}
	p.Revision = p.Digest()
	return out, nil
}

// staticCuts is the cutter of a static assembly: every count is known, the
// total is the fixed text's count plus the reserves.
type staticCuts struct {
	ctx   context.Context
	e     *tokens.Encoder
	parts []part
	fixed func(p *part) string
	plus  int
}

func (s *staticCuts) tokensOf(p *part) (int, error) { return p.tokens, nil }

func (s *staticCuts) total() (int, error) {
	if err := s.ctx.Err(); err != nil {
		return 0, err
	}
	return s.e.Count(join(s.parts, s.fixed)) + s.plus, nil
}

func (s *staticCuts) truncate(p *part, target int) error {
	if err := s.ctx.Err(); err != nil {
		return err
	}
	p.body, p.tokens = s.e.Truncate(p.body, target)
	return nil
}

// assembleStatic assembles one intent at reconcile time: runtime sections
// are their heading plus their reserve.
func (p *Plan) assembleStatic(ctx context.Context, e *tokens.Encoder, pi *Intent, truncate bool) (*Assembly, error) {
	reserved := 0
	parts := p.parts(e, func(s *Section) (string, bool) {
		switch s.Kind {
		case KindStatic:
			return s.Text, true
		case KindIntent:
			return pi.Instruction, true
		}
		reserved += s.ReserveTokens
		return "", false
	})
	// Fixed text: runtime and memory sections stand as their heading alone.
	fixed := func(p *part) string {
		if p.kind == KindRuntime || p.kind == KindMemory {
			return p.heading
		}
		return block(p.heading, p.body)
	}
	sc := &staticCuts{ctx: ctx, e: e, parts: parts, fixed: fixed, plus: reserved}
	a := &Assembly{Intent: pi.Name, MaxTokens: p.MaxTokens, ReservedTokens: reserved}
	t, err := sc.total()
	if err != nil {
		return nil, err
	}
	if truncate {
		// Within the budget this cuts nothing, and the static cuts are none.
		if a.Cut, t, err = cut(sc, parts, p.MaxTokens, t); err != nil {
			return nil, err
		}
		pi.StaticCuts = nil
		for _, pt := range parts {
			if pt.tokens < pt.original && (pt.kind == KindStatic || pt.kind == KindIntent) {
				pi.StaticCuts = append(pi.StaticCuts, StaticCut{Section: pt.name, Text: pt.body, TruncatedTokens: pt.original - pt.tokens})
			}
		}
	}
	a.Tokens = t
	a.FixedTokens = a.Tokens - reserved
	a.WithinBudget = a.Tokens <= p.MaxTokens
	a.CacheableTokens = a.FixedTokens
	if k := slices.IndexFunc(parts, func(p part) bool { return p.kind == KindRuntime || p.kind == KindMemory }); k >= 0 {
		a.CacheableTokens = e.Count(join(parts[:k], fixed))
	}
	a.Text = join(parts, func(p *part) string {
		switch p.kind {
		case KindRuntime:
			return block(p.heading, Placeholder(p.name))
		case KindMemory:
			return block(p.heading, MemoryPlaceholder(p.name))
		}
		return block(p.heading, p.body)
	})
	for i, pt := range parts {
		sr := SectionResult{Name: pt.name, Kind: pt.kind, TruncatedTokens: pt.original - pt.tokens}
		if pt.kind == KindRuntime || pt.kind == KindMemory {
			sr.Tokens = p.Sections[i].Tokens + p.Sections[i].ReserveTokens
		} else {
			sr.Tokens = e.Count(block(pt.heading, pt.body))
		}
		a.Sections = append(a.Sections, sr)
	}
	return a, nil
}

// Assemble finishes one intent at request time: runtime sections get their
// contents (a missing or empty one is left out), and while the prompt is
// over budget runtime sections are cut by priority down to their minimum.
// Never sections and static text are not cut here. Contents for unknown
// sections are an error (*UnknownSectionError), so a typo does not silently
// drop data; an unknown intent is an *UnknownIntentError; a runtime
// content holding a special-token string under specialTokens: Reject is a
// *SpecialTokenError.
//
// Memory sections are first filled by recall (WithRecall; all side by
// side, each bounded by WithMemoryTimeout). A section holds whole items,
// in rank order, at most MaxItems of them, none scored below MinScore,
// within its reserve (FitMemory); then the prompt is cut as runtime
// contents are, memory sections among runtime sections by priority, a
// memory section losing its lowest-ranked items first. If the prompt is
// still over budget, memory sections are emptied in the same order, so
// memory never keeps a prompt over budget. A recall that fails or times
// out leaves its section empty and says so in Assembly.Memory; it never
// fails the assembly. Without WithRecall memory sections are empty (code
// MemoryNoRecall).
//
// Assemble stops when ctx is done: it checks ctx between counts and cut
// steps and then returns an error wrapping ctx.Err()
// (errors.Is(err, context.DeadlineExceeded) for a deadline). One count of
// one content is not interrupted.
//
// The work grows with the contents only as far as the budget can use them:
// a content is counted once (its edges, where it meets its heading and the
// separators, again as part of the prompt), a cut encodes no more than the
// budget can keep, and after a cut only what changed is counted.
func (p *Plan) Assemble(ctx context.Context, intent string, runtime map[string]string, opts ...AssembleOption) (*Assembly, error) {
	var cfg assembleConfig
	for _, o := range opts {
		o(&cfg)
	}
	pi, e, err := p.prepare(intent, runtime)
	if err != nil {
		return nil, err
	}
	var mem map[string]*memoryFill
	if p.HasMemory() {
		if mem, err = p.recallAll(ctx, e, runtime, cfg); err != nil {
			return nil, fmt.Errorf("plan %s: assembling intent %s: %w", p.Name, intent, err)
		}
	}
	a, err := p.assemble(ctx, e, pi, runtime, mem)
	if err != nil {
		return nil, fmt.Errorf("plan %s: assembling intent %s: %w", p.Name, intent, err)
	}
	return a, nil
}

// prepare finds the intent and the encoder, and checks that runtime names
// only runtime sections.
func (p *Plan) prepare(intent string, runtime map[string]string) (*Intent, *tokens.Encoder, error) {
	pi := p.intent(intent)
	if pi == nil {
		return nil, nil, &UnknownIntentError{Plan: p.Name, Intent: intent, Intents: p.IntentNames()}
	}
	for name := range runtime {
		s := p.section(name)
		if s == nil || s.Kind != KindRuntime {
			return nil, nil, &UnknownSectionError{Plan: p.Name, Section: name}
		}
	}
	e, err := tokens.Get(p.Encoding)
	if err != nil {
		return nil, nil, err
	}
	if p.rejectsSpecials(e) {
		// In prompt order, so that the error names the same section
		// whatever the map's order.
		for _, s := range p.Sections {
			if tok, ok := e.Special(runtime[s.Name]); ok && s.Kind == KindRuntime {
				return nil, nil, &SpecialTokenError{Plan: p.Name, Section: s.Name, Token: tok}
			}
		}
	}
	return pi, e, nil
}

// assemble is Assemble with an encoder and the intent found; mem
// holds the recalled items of memory sections by name (none: left out).
func (p *Plan) assemble(ctx context.Context, e counter, pi *Intent, runtime map[string]string, mem map[string]*memoryFill) (*Assembly, error) {
	parts := p.parts(nil, func(s *Section) (string, bool) {
		switch s.Kind {
		case KindStatic, KindIntent:
			text := s.Text
			if s.Kind == KindIntent {
				text = pi.Instruction
			}
			for _, c := range pi.StaticCuts {
				if c.Section == s.Name {
					text = c.Text
				}
			}
			return text, false
		case KindMemory:
			if f := mem[s.Name]; f != nil {
				return f.fit.Text, true
			}
			return "", true
		}
		return runtime[s.Name], true
	})
	for i := range parts {
		if f := mem[parts[i].name]; f != nil && parts[i].kind == KindMemory {
			pt := &parts[i]
			pt.items, pt.kept = f.fit.Items, len(f.fit.Items)
			pt.tokens, pt.original = f.fit.Tokens, f.fit.Tokens
			// Memory is cut by priority like runtime content, and never
			// kept whole when that leaves the prompt over budget.
			pt.cuttable = true
		}
	}
	c := &counts{ctx: ctx, encoding: p.Encoding, e: e, parts: parts}
	a := &Assembly{Intent: pi.Name, MaxTokens: p.MaxTokens}
	t, err := c.total()
	if err != nil {
		return nil, err
	}
	// Within the budget neither cuts anything.
	if a.Cut, t, err = cut(c, parts, p.MaxTokens, t); err != nil {
		return nil, err
	}
	if mem != nil {
		if a.Cut, t, err = dropMemory(c, parts, p.MaxTokens, t, a.Cut); err != nil {
			return nil, err
		}
	}
	a.Text = join(parts, func(p *part) string { return block(p.heading, p.body) })
	a.Tokens = t
	a.WithinBudget = a.Tokens <= p.MaxTokens
	a.Sections = make([]SectionResult, 0, len(parts))
	for i := range parts {
		pt := &parts[i]
		n, err := c.blockTokens(pt)
		if err != nil {
			return nil, err
		}
		if pt.kind == KindRuntime || pt.kind == KindMemory {
			a.ReservedTokens += n
		}
		truncated := 0
		if pt.cutNow {
			truncated = pt.original - pt.tokens
		}
		a.Sections = append(a.Sections, SectionResult{Name: pt.name, Kind: pt.kind, Tokens: n, TruncatedTokens: truncated})
	}
	a.FixedTokens = a.Tokens - a.ReservedTokens
	a.CacheableTokens = pi.CacheableTokens
	if mem != nil {
		for i := range parts {
			pt := &parts[i]
			if pt.kind != KindMemory {
				continue
			}
			f := mem[pt.name]
			r := f.result
			// nil when the recall filled nothing (pt.items is f.fit.Items).
			r.Items = pt.items[:pt.kept:pt.kept]
			r.Omitted = r.Recalled - len(r.Items)
			a.Memory = append(a.Memory, r)
		}
	}
	return a, nil
}

// dropMemory empties memory sections, in the order of the cut, while the
// prompt is over budget after the cut: memory never keeps a prompt over
// budget, whatever its minTokens.
func dropMemory(c cutter, parts []part, limit, t int, cutNames []string) ([]string, int, error) {
	order := cutOrder(parts, func(p *part) bool { return p.kind == KindMemory && p.body != "" })
	for _, i := range order {
		if t <= limit {
			break
		}
		p := &parts[i]
		if err := c.truncate(p, 0); err != nil {
			return nil, 0, err
		}
		if !slices.Contains(cutNames, p.name) {
			cutNames = append(cutNames, p.name)
		}
		var err error
		if t, err = c.total(); err != nil {
			return nil, 0, err
		}
	}
	return cutNames, t, nil
}
