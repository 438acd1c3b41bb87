package consolidation

import (
	"fmt"
	"slices"
	"strings"
)

// Provenance and trust. A fact may name its source (who said it: "user",
// "assistant", "crm", "tool.web-search"); a bank names the sources it
// trusts. A fact is trusted when its source is; an observation is trusted
// when every fact it cites is, so its provenance (the distinct sources of
// those facts) decides it, as of the bank's trusted sources now. A run
// enforces the rule when it applies an answer (Validate, mergeRule): an
// item whose sources include an untrusted fact never updates, deletes or
// joins a trusted observation. The model is never asked.

// SourceUnspecified is the source of a fact written without one.
const SourceUnspecified = "unspecified"

// MaxSourceBytes bounds a source's name.
const MaxSourceBytes = 63

// SourceProblem says what is wrong with a source's name, or "" when it is
// valid: 1 to MaxSourceBytes bytes of lowercase ASCII letters and digits,
// starting with a letter, in words joined by one of "." "_" "-" (the CRD's
// pattern ^[a-z][a-z0-9]*([._-][a-z0-9]+)*$).
func SourceProblem(s string) string {
	switch {
	case s == "":
		return "empty"
	case len(s) > MaxSourceBytes:
		return fmt.Sprintf("%d bytes, at most %d", len(s), MaxSourceBytes)
	case s[0] < 'a' || s[0] > 'z':
		return "must start with a lowercase letter"
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z' || c >= '0' && c <= '9':
		case c == '.' || c == '_' || c == '-':
			if i == len(s)-1 || !isSourceWordByte(s[i+1]) {
				return fmt.Sprintf("byte %d: a separator must be followed by a letter or digit", i+1)
			}
		default:
			return fmt.Sprintf("byte %d is not a lowercase letter, digit or one of . _ -", i+1)
		}
	}
	return ""
}

func isSourceWordByte(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

// SourceOf is a fact's source as stored: SourceUnspecified for "".
func SourceOf(f Fact) string {
	if f.Source == "" {
		return SourceUnspecified
	}
	return f.Source
}

// MaxTrustedSources bounds a bank's trusted sources.
const MaxTrustedSources = 64

// Trust is a bank's trusted sources. The zero Trust trusts every source,
// as a bank that names none does.
type Trust struct {
	names []string // sorted; nil trusts every source
}

// NewTrust is the trust of a bank that names sources (none: every source
// is trusted). An error names the source at fault by its position.
func NewTrust(sources []string) (Trust, error) {
	if len(sources) == 0 {
		return Trust{}, nil
	}
	if len(sources) > MaxTrustedSources {
		return Trust{}, fmt.Errorf("%d trusted sources, at most %d", len(sources), MaxTrustedSources)
	}
	names := make([]string, 0, len(sources))
	for i, s := range sources {
		if p := SourceProblem(s); p != "" {
			return Trust{}, fmt.Errorf("trusted source %d (%q): %s", i+1, s, p)
		}
		names = append(names, s)
	}
	slices.Sort(names)
	return Trust{names: slices.Compact(names)}, nil
}

// ParseTrust reads a comma-separated list of trusted sources, as the flag
// --trusted-sources takes them; "" trusts every source.
func ParseTrust(list string) (Trust, error) {
	if strings.TrimSpace(list) == "" {
		return Trust{}, nil
	}
	parts := strings.Split(list, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return NewTrust(parts)
}

// Everyone tells whether every source is trusted (no source is named).
func (t Trust) Everyone() bool { return t.names == nil }

// Sources are the trusted sources, sorted; nil when every source is.
func (t Trust) Sources() []string { return slices.Clone(t.names) }

// Source tells whether a source is trusted; "" is SourceUnspecified.
func (t Trust) Source(s string) bool {
	if t.names == nil {
		return true
	}
	if s == "" {
		s = SourceUnspecified
	}
	_, ok := slices.BinarySearch(t.names, s)
	return ok
}

// Fact tells whether a fact is trusted: its source is.
func (t Trust) Fact(f Fact) bool { return t.Source(f.Source) }

// Observation tells whether an observation is trusted: every source of
// the facts it cites (its Provenance) is. An observation without a
// recorded provenance is of unspecified sources.
func (t Trust) Observation(o Observation) bool {
	if t.names == nil {
		return true
	}
	if len(o.Provenance) == 0 {
		return t.Source(SourceUnspecified)
	}
	for _, s := range o.Provenance {
		if !t.Source(s) {
			return false
		}
	}
	return true
}

// JoinProvenance is the provenance of an observation that had old and now
// also cites facts of the sources added: the distinct names, sorted.
func JoinProvenance(old []string, added ...string) []string {
	out := make([]string, 0, len(old)+len(added))
	for _, s := range old {
		out = append(out, cmpSource(s))
	}
	for _, s := range added {
		out = append(out, cmpSource(s))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func cmpSource(s string) string {
	if s == "" {
		return SourceUnspecified
	}
	return s
}
