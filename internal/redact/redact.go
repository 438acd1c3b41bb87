// Package redact finds secrets and, when asked, personal data in text and
// replaces them with [REDACTED:<kind>] before the text is stored or sent.
// It is pure: no logging, no I/O, and a Redactor is safe for concurrent use.
//
// Secrets come from gitleaks' default rule set (rules.go), plus what such
// rule sets miss in chat (chat.go): a connection string with a password and
// a credential said in a sentence. Personal data (personal.go) is looked for
// only for the kinds a Config names. Every detector is a regular expression
// of Go's linear-time engine, run only when a cheap prefilter (a keyword, an
// "@", a digit) says it can match; gitleaks' rules run only in windows
// around their keywords, within a budget of a fixed multiple of the text's
// length (past it a window is redacted unread, kind "unscanned"), so the
// work is linear in the input even for a text made of rule keywords.
package redact

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// SecretPolicy says what happens to a text holding a secret.
type SecretPolicy string

const (
	// Redact replaces each secret with [REDACTED:<kind>] (the default).
	Redact SecretPolicy = "Redact"
	// Reject refuses a text holding a secret; Redactor.Check reports it.
	Reject SecretPolicy = "Reject"
	// Keep leaves secrets as they are.
	Keep SecretPolicy = "Keep"
)

// PersonalKind names a kind of personal data a bank may ask to redact.
type PersonalKind string

const (
	Email       PersonalKind = "Email"
	Phone       PersonalKind = "Phone"
	PaymentCard PersonalKind = "PaymentCard"
	IBAN        PersonalKind = "IBAN"
	NationalID  PersonalKind = "NationalID"
)

// PersonalKinds lists every PersonalKind, in the order flags and docs give them.
var PersonalKinds = []PersonalKind{Email, Phone, PaymentCard, IBAN, NationalID}

// Config says what a Redactor looks for.
type Config struct {
	// Secrets is the policy for secrets; empty means Redact.
	Secrets SecretPolicy
	// PersonalData lists the kinds of personal data to redact; none by default.
	PersonalData []PersonalKind
}

// Finding is one detected span of a text: its kind and byte range, never its text.
type Finding struct {
	// Kind is the stable lowercase name written in [REDACTED:<kind>].
	Kind string
	// Start and End are the byte offsets of the span, End exclusive.
	Start, End int
	// Secret is true for a secret, false for personal data.
	Secret bool
	// rank orders findings of one start and class: gitleaks' rules before
	// chat's, so that a token said in a sentence keeps its rule's kind.
	rank int8
}

// Counts is the number of redactions by kind.
type Counts map[string]int

// Redactor finds and replaces secrets and personal data. The zero value is
// not usable; build one with New.
type Redactor struct {
	policy   SecretPolicy
	personal []personalDetector
}

// New returns a Redactor for cfg, or an error naming the bad value.
func New(cfg Config) (*Redactor, error) {
	r := &Redactor{policy: cfg.Secrets}
	switch cfg.Secrets {
	case "":
		r.policy = Redact
	case Redact, Reject, Keep:
	default:
		return nil, fmt.Errorf("secrets policy %q is not one of Redact, Reject, Keep", cfg.Secrets)
	}
	if r.policy != Keep {
		if _, err := loadRules(); err != nil {
			return nil, err
		}
	}
	seen := map[PersonalKind]bool{}
	for _, k := range cfg.PersonalData {
		d, ok := personalDetectors[k]
		if !ok {
			return nil, fmt.Errorf("personal data kind %q is not one of %s", k, joinKinds())
		}
		if !seen[k] {
			seen[k] = true
			r.personal = append(r.personal, d)
		}
	}
	return r, nil
}

// ParsePersonalKinds parses a comma-separated list such as "Email,Phone", as
// a flag gives it. Spaces around items are ignored; an empty string is none.
func ParsePersonalKinds(s string) ([]PersonalKind, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var kinds []PersonalKind
	for item := range strings.SplitSeq(s, ",") {
		k := PersonalKind(strings.TrimSpace(item))
		if !slices.Contains(PersonalKinds, k) {
			return nil, fmt.Errorf("personal data kind %q is not one of %s", item, joinKinds())
		}
		if !slices.Contains(kinds, k) {
			kinds = append(kinds, k)
		}
	}
	return kinds, nil
}

func joinKinds() string {
	s := make([]string, len(PersonalKinds))
	for i, k := range PersonalKinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// Policy returns the secrets policy the Redactor was built with.
func (r *Redactor) Policy() SecretPolicy { return r.policy }

// Find returns what the Redactor detects in text, ordered by start, with
// overlapping spans merged (a secret wins over personal data at the same
// start, then the longer span). Secrets are included under Redact and
// Reject, not under Keep.
func (r *Redactor) Find(text string) []Finding {
	var fs []Finding
	if r.policy != Keep {
		fs = findSecrets(text, fs)
	}
	for _, d := range r.personal {
		fs = d.find(text, fs)
	}
	return merge(dropPlaceholders(text, fs))
}

// dropPlaceholders leaves out the findings that are a [REDACTED:<kind>]
// of an earlier redaction (a credential said in a sentence finds its own
// placeholder), so that redacting a redacted text changes and counts
// nothing: facts are redacted when they enter and again when a run sends
// them.
func dropPlaceholders(text string, fs []Finding) []Finding {
	if !strings.Contains(text, placeholderPrefix) {
		return fs
	}
	out := fs[:0]
	for _, f := range fs {
		if !isPlaceholder(strings.Trim(text[f.Start:f.End], "\"'` ")) {
			out = append(out, f)
		}
	}
	return out
}

const placeholderPrefix = "[REDACTED:"

// isPlaceholder reports whether s is one [REDACTED:<kind>].
func isPlaceholder(s string) bool {
	kind, ok := strings.CutPrefix(s, placeholderPrefix)
	if !ok {
		return false
	}
	kind, ok = strings.CutSuffix(kind, "]")
	if !ok || kind == "" {
		return false
	}
	for _, c := range kind {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// Redact returns text with every finding replaced by [REDACTED:<kind>], and
// the number of replacements by kind (nil when there were none). Under
// Reject secrets are replaced too: refusing the text is the caller's call,
// made with Check.
func (r *Redactor) Redact(text string) (string, Counts) {
	fs := r.Find(text)
	if len(fs) == 0 {
		return text, nil
	}
	counts := make(Counts, 2)
	var b strings.Builder
	b.Grow(len(text) + 16*len(fs))
	last := 0
	for _, f := range fs {
		b.WriteString(text[last:f.Start])
		b.WriteString("[REDACTED:")
		b.WriteString(f.Kind)
		b.WriteByte(']')
		last = f.End
		counts[f.Kind]++
	}
	b.WriteString(text[last:])
	return b.String(), counts
}

// SecretError says a text holds secrets, by kind; it never holds the text.
type SecretError struct {
	// Kinds are the kinds of the secrets found, sorted, each once.
	Kinds []string
}

func (e *SecretError) Error() string {
	return "holds a secret (" + strings.Join(e.Kinds, ", ") + ")"
}

// ErrSecret matches every *SecretError with errors.Is.
var ErrSecret = errors.New("holds a secret")

// Is reports whether target is ErrSecret.
func (e *SecretError) Is(target error) bool { return target == ErrSecret }

// Check returns a *SecretError when the policy is Reject and text holds a
// secret, and nil otherwise.
func (r *Redactor) Check(text string) error {
	if r.policy != Reject {
		return nil
	}
	var kinds []string
	for _, f := range dropPlaceholders(text, findSecrets(text, nil)) {
		if !slices.Contains(kinds, f.Kind) {
			kinds = append(kinds, f.Kind)
		}
	}
	if len(kinds) == 0 {
		return nil
	}
	slices.Sort(kinds)
	return &SecretError{Kinds: kinds}
}

// merge sorts findings by start and folds overlapping ones into the first.
func merge(fs []Finding) []Finding {
	if len(fs) < 2 {
		return fs
	}
	slices.SortFunc(fs, func(a, b Finding) int {
		if a.Start != b.Start {
			return a.Start - b.Start
		}
		if a.Secret != b.Secret {
			if a.Secret {
				return -1
			}
			return 1
		}
		if a.rank != b.rank {
			return int(a.rank) - int(b.rank)
		}
		return b.End - a.End
	})
	out := fs[:1]
	for _, f := range fs[1:] {
		cur := &out[len(out)-1]
		if f.Start < cur.End {
			cur.End = max(cur.End, f.End)
			continue
		}
		out = append(out, f)
	}
	return out
}
