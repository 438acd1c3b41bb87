package consolidation

// What leaves the process is redacted again, in case facts were written
// straight into the store: a run's batch, its pool and its embeddings
// inputs (the run's methods), and a served bank's recall queries
// (RedactEmbedder). Where a fact enters is redaction.go.

import (
	"context"
	"slices"

	"github.com/promptops/promptops/internal/redact"
)

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
