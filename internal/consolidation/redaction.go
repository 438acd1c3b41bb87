package consolidation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/promptops/promptops/internal/redact"
)

// Redaction at the write path and before text leaves the process: a fact
// is redacted where it enters (the bank API's retain, facts import) with
// RedactFact, and a run redacts again what it sends to the LLM and the
// embeddings API (Engine.Redactor), in case facts were written straight
// into the store.

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

// redactFacts redacts the facts of a batch as the run sends them, in
// place (the run's own copies), counting into the run's summary.
func (r *run) redactFacts(facts []Fact) {
	if r.Redactor == nil {
		return
	}
	c := redact.Counts{}
	for i := range facts {
		f := &facts[i]
		f.Text = redactInto(r.Redactor, f.Text, c)
		f.Entities = redactAll(r.Redactor, f.Entities, c)
	}
	r.addRedacted(c)
}

// redactPool returns the pool with its texts and its sources' texts
// redacted; the candidates are copied, never changed, as recall may share
// them.
func (r *run) redactPool(pool []Candidate) []Candidate {
	if r.Redactor == nil || len(pool) == 0 {
		return pool
	}
	c := redact.Counts{}
	out := slices.Clone(pool)
	for i := range out {
		o := &out[i]
		o.Text = redactInto(r.Redactor, o.Text, c)
		if len(o.Sources) > 0 {
			src := slices.Clone(o.Sources)
			for j := range src {
				src[j].Text = redactInto(r.Redactor, src[j].Text, c)
				src[j].Entities = redactAll(r.Redactor, src[j].Entities, c)
			}
			o.Sources = src
		}
	}
	r.addRedacted(c)
	return out
}

// redactTexts returns texts redacted for an embeddings call.
func (r *run) redactTexts(texts []string) []string {
	if r.Redactor == nil {
		return texts
	}
	c := redact.Counts{}
	out := redactAll(r.Redactor, texts, c)
	r.addRedacted(c)
	return out
}

// addRedacted adds a redaction's counts to the run's summary.
func (r *run) addRedacted(c redact.Counts) {
	for k, n := range c {
		if r.sum.Redacted == nil {
			r.sum.Redacted = map[string]int64{}
		}
		r.sum.Redacted[k] += int64(n)
	}
}

// RedactEmbedder returns e with every text redacted by r before it is
// sent; a nil r returns e. For recall's queries, which leave the process
// for the embeddings API.
func RedactEmbedder(e Embedder, r *redact.Redactor) Embedder {
	if e == nil || r == nil {
		return e
	}
	return redactingEmbedder{e, r}
}

type redactingEmbedder struct {
	Embedder
	r *redact.Redactor
}

func (e redactingEmbedder) Embed(ctx context.Context, texts []string) (Embeddings, error) {
	out := make([]string, len(texts))
	for i, t := range texts {
		out[i], _ = e.r.Redact(t)
	}
	return e.Embedder.Embed(ctx, out)
}
