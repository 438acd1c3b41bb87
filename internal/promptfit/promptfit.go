// Package promptfit counts a prompt's sections exactly and cuts them to fit
// a token budget: at render time for the operator (Seal) and at request time
// for package plan (Fit), with one cut order and one count of the joins.
//
// It knows sections, not plans: package plan and internal/assembler turn a
// plan's sections into Sections and its results back into their types.
package promptfit

import "strings"

// Separator joins the non-empty sections of a prompt (plan.Separator).
const Separator = "\n\n"

// Kind is what fills a section.
type Kind uint8

// Section kinds, as in a plan.
const (
	// Static text, fixed at render time.
	Static Kind = iota
	// Intent: the chosen intent's instruction.
	Intent
	// Runtime: the application's content, given per request.
	Runtime
	// Memory: items recalled from a bank per request.
	Memory
)

// Section is one section of a prompt, in prompt order.
type Section struct {
	// Name of the section, as cuts are reported.
	Name string
	// Heading, when set, is put on its own line before the text.
	Heading string
	// Kind of the section.
	Kind Kind
	// Text of a static or intent section; at request time (Fit) a runtime
	// section's content or a memory section's fitted items. An empty text
	// leaves the section out, heading included.
	Text string
	// Cuttable is whether this assembly may cut the section (policy
	// Priority; at request time runtime and memory sections only).
	Cuttable bool
	// Priority: higher is cut first; on a tie the later section is.
	Priority int
	// MinTokens a cut section keeps at least.
	MinTokens int
	// HeadingTokens and ReserveTokens of a runtime or memory section: at
	// render time (Seal) it stands as its heading plus its reserve.
	HeadingTokens, ReserveTokens int
	// Shrink, when set, cuts the section at request time instead of the
	// encoder's Truncate: it returns the section's text cut to at most
	// target tokens and that text's count (a memory section loses whole
	// items, lowest-ranked first).
	Shrink func(target int) (text string, tokens int, err error)
	// Tokens is the count of Text of a section with Shrink (its items'
	// fit); other texts are counted here.
	Tokens int
}

// Result is one section's share of an assembly.
type Result struct {
	// Tokens of the section as it is in the prompt, heading included; 0
	// when it was left out. At render time a runtime or memory section's
	// is its heading's plus its reserve.
	Tokens int
	// TruncatedTokens is how many tokens of its text the cut removed.
	TruncatedTokens int
}

// Counter is what fitting asks of an encoder (*tokens.Encoder); tests give
// it one that counts runes or records the work.
type Counter interface {
	Count(text string) int
	CountUncached(text string) int
	Truncate(text string, maxTokens int) (string, int)
}

// Placeholder is the line that stands for a runtime section in a static
// assembly (<intent>.txt).
func Placeholder(section string) string { return "{{runtime." + section + "}}" }

// MemoryPlaceholder is the line that stands for a memory section in a
// static assembly.
func MemoryPlaceholder(section string) string { return "{{memory." + section + "}}" }

// Block is a section as rendered: heading line, then text. An empty text
// leaves the section out.
func Block(heading, text string) string {
	if text == "" {
		return ""
	}
	if heading == "" {
		return text
	}
	return heading + "\n" + text
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
