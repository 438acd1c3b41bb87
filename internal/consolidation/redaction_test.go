package consolidation

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/promptops/promptops/internal/redact"
	"github.com/promptops/promptops/internal/redact/redacttest"
)

func TestRedactFact(t *testing.T) {
	secret := redacttest.Secrets(t)[0]
	newR := func(cfg redact.Config) *redact.Redactor {
		r, err := redact.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	fact := func() Fact {
		return Fact{Text: secret.Text, Entities: []string{"Ana", secret.Values[0]}, Tags: []string{"billing"}}
	}

	f := fact()
	if err := RedactFact(nil, &f, redact.Counts{}); err != nil || f.Text != secret.Text {
		t.Fatalf("a nil Redactor changed %q (%v)", f.Text, err)
	}

	f = fact()
	entities := f.Entities
	counts := redact.Counts{}
	if err := RedactFact(newR(redact.Config{}), &f, counts); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(f.Text, secret.Values[0]) || slices.Contains(f.Entities, secret.Values[0]) || counts[secret.Kind] != 2 || f.Tags[0] != "billing" {
		t.Errorf("redacted %+v, counts %v", f, counts)
	}
	if entities[1] != secret.Values[0] {
		t.Error("RedactFact wrote into the caller's entities")
	}

	f = fact()
	f.Text = "nothing to see"
	err := RedactFact(newR(redact.Config{Secrets: redact.Reject}), &f, redact.Counts{})
	var se *FactSecretError
	if !errors.As(err, &se) || !errors.Is(err, redact.ErrSecret) || se.Field != "entities[1]" || !slices.Contains(se.Kinds, secret.Kind) || strings.Contains(err.Error(), secret.Values[0]) {
		t.Errorf("under Reject: %v", err)
	}
	if f.Entities[1] != secret.Values[0] {
		t.Error("a refused fact was changed")
	}
}

// redactAll copies texts only when one changes, and never writes into the
// caller's slice.
func TestRedactAll(t *testing.T) {
	secret := redacttest.Secrets(t)[0]
	r, err := redact.New(redact.Config{})
	if err != nil {
		t.Fatal(err)
	}
	plain := []string{"the user likes tea", "ships to Lisbon"}
	if got := redactAll(r, plain, redact.Counts{}); &got[0] != &plain[0] {
		t.Errorf("texts without a secret were copied")
	}
	texts := []string{"the user likes tea", secret.Text, "ships to Lisbon"}
	counts := redact.Counts{}
	got := redactAll(r, texts, counts)
	if texts[1] != secret.Text {
		t.Fatalf("redactAll wrote into the caller's slice")
	}
	if got[0] != texts[0] || got[2] != texts[2] || strings.Contains(got[1], secret.Values[0]) || len(counts) == 0 {
		t.Errorf("redactAll = %q, counts %v", got, counts)
	}
}
