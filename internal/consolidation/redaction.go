package consolidation

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/promptops/promptops/internal/redact"
)

// Redaction at the write path and before text leaves the process: a fact
// is redacted where it enters (the bank API's retain, facts import) with
// RedactFact, and a run redacts again what it sends to the LLM and the
// embeddings API (Engine.Redactor, outbound.go), in case facts were
// written straight into the store.

// FactSecretError is a fact refused because it holds a secret and the
// policy is Reject. It names the field and the kinds, never the text.
type FactSecretError struct {
	// Field is the JSON name of the field holding the secret: text,
	// entities[i] or tags[i].
	Field string
	// Kinds are the secrets' kinds, sorted.
	Kinds []string
}

func (e *FactSecretError) Error() string {
	return fmt.Sprintf("%s holds a secret (%s)", e.Field, strings.Join(e.Kinds, ", "))
}

// Is reports whether target is redact.ErrSecret.
func (e *FactSecretError) Is(target error) bool { return target == redact.ErrSecret }

// RedactFact replaces what r detects in f's text, entities and tags with
// [REDACTED:<kind>], adding the replacements to counts. Under Reject a
// secret is a *FactSecretError and f is left as it was. A nil r changes
// nothing.
func RedactFact(r *redact.Redactor, f *Fact, counts redact.Counts) error {
	if r == nil {
		return nil
	}
	if err := r.Check(f.Text); err != nil {
		return factSecret("text", err)
	}
	for _, l := range []struct {
		field  string
		labels []string
	}{{"entities", f.Entities}, {"tags", f.Tags}} {
		for i, v := range l.labels {
			if err := r.Check(v); err != nil {
				return factSecret(fmt.Sprintf("%s[%d]", l.field, i), err)
			}
		}
	}
	f.Text = redactInto(r, f.Text, counts)
	f.Entities = redactAll(r, f.Entities, counts)
	f.Tags = redactAll(r, f.Tags, counts)
	return nil
}

func factSecret(field string, err error) error {
	var se *redact.SecretError
	if errors.As(err, &se) {
		return &FactSecretError{Field: field, Kinds: se.Kinds}
	}
	return err
}

// redactInto returns text redacted, adding its replacements to counts.
func redactInto(r *redact.Redactor, text string, counts redact.Counts) string {
	out, c := r.Redact(text)
	for k, n := range c {
		counts[k] += n
	}
	return out
}

// redactAll redacts each of texts, copying the slice only when one changes.
func redactAll(r *redact.Redactor, texts []string, counts redact.Counts) []string {
	var out []string
	for i, t := range texts {
		red := redactInto(r, t, counts)
		if red != t && out == nil {
			out = slices.Clone(texts)
		}
		if out != nil {
			out[i] = red
		}
	}
	if out == nil {
		return texts
	}
	return out
}
