package redact

import (
	"strings"
	"testing"

	"github.com/promptops/promptops/internal/redact/redacttest"
)

func fakeSecrets() map[string]string { return redacttest.FakeSecrets() }

func readCorpus(t testing.TB, name string, nfields int) [][]string {
	t.Helper()
	return redacttest.Read(t, name, nfields)
}

func fill(t testing.TB, template string, fakes map[string]string) (string, []string) {
	t.Helper()
	return redacttest.Fill(t, template, fakes)
}

func allPersonal(t testing.TB) *Redactor {
	t.Helper()
	r, err := New(Config{PersonalData: PersonalKinds})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestCorpusSecretsRedacted(t *testing.T) {
	fakes := fakeSecrets()
	r := allPersonal(t)
	kinds := map[string]bool{}
	for _, c := range readCorpus(t, "secrets.txt", 2) {
		kind, msg, secrets := c[0], "", []string(nil)
		msg, secrets = fill(t, c[1], fakes)
		kinds[kind] = true
		out, counts := r.Redact(msg)
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Errorf("%s: the secret is still in %q", kind, out)
			}
		}
		if counts[kind] == 0 {
			t.Errorf("%s: counts %v of %q have no %s", kind, counts, out, kind)
		}
		if !strings.Contains(out, "[REDACTED:"+kind+"]") {
			t.Errorf("%s: %q has no [REDACTED:%s]", kind, out, kind)
		}
	}
	if len(kinds) < 15 {
		t.Errorf("the corpus has %d kinds of secret, want at least 15", len(kinds))
	}
	t.Logf("%d kinds of secret redacted", len(kinds))
}

func TestCorpusBenignKept(t *testing.T) {
	r := allPersonal(t)
	benign := readCorpus(t, "benign.txt", 1)
	changed := 0
	for _, b := range benign {
		if out, counts := r.Redact(b[0]); out != b[0] {
			changed++
			t.Logf("changed (%v): %q", counts, out)
		}
	}
	share := float64(changed) / float64(len(benign))
	t.Logf("%d of %d benign facts changed (%.1f%%)", changed, len(benign), 100*share)
	if share > 0.02 {
		t.Errorf("%d of %d benign facts changed (%.1f%%), want at most 2%%", changed, len(benign), 100*share)
	}
}

func TestCorpusPersonalOnlyWhenAsked(t *testing.T) {
	none, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range readCorpus(t, "personal.txt", 4) {
		pk, kind, value := PersonalKind(c[0]), c[1], c[2]
		msg := strings.ReplaceAll(c[3], "{v}", value)
		if out, counts := none.Redact(msg); out != msg {
			t.Errorf("%s redacted without being asked: %q (%v)", pk, out, counts)
		}
		only, err := New(Config{PersonalData: []PersonalKind{pk}})
		if err != nil {
			t.Fatal(err)
		}
		out, counts := only.Redact(msg)
		if strings.Contains(out, value) || counts[kind] != 1 || !strings.Contains(out, "[REDACTED:"+kind+"]") {
			t.Errorf("%s: got %q (%v), want %s redacted once", pk, out, counts, kind)
		}
		for _, other := range PersonalKinds {
			if other == pk {
				continue
			}
			r, _ := New(Config{PersonalData: []PersonalKind{other}})
			if out, counts := r.Redact(msg); out != msg {
				t.Errorf("%s: asking for %s alone changed %q to %q (%v)", pk, other, msg, out, counts)
			}
		}
	}
}

func TestCorpusReject(t *testing.T) {
	fakes := fakeSecrets()
	r, err := New(Config{Secrets: Reject})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range readCorpus(t, "secrets.txt", 2) {
		kind := c[0]
		msg, secrets := fill(t, c[1], fakes)
		err := r.Check(msg)
		if err == nil {
			t.Errorf("%s: Check(%q) = nil, want a SecretError", kind, msg)
			continue
		}
		if !strings.Contains(err.Error(), kind) {
			t.Errorf("%s: %q does not name the kind", kind, err)
		}
		for _, s := range secrets {
			if strings.Contains(err.Error(), s) {
				t.Errorf("%s: the error %q quotes the secret", kind, err)
			}
		}
		found := false
		for _, f := range r.Find(msg) {
			found = found || (f.Kind == kind && f.Secret)
		}
		if !found {
			t.Errorf("%s: Find(%q) = %v has no %s", kind, msg, r.Find(msg), kind)
		}
	}
	for _, b := range readCorpus(t, "benign.txt", 1) {
		if err := r.Check(b[0]); err != nil {
			t.Logf("benign %q rejected: %v", b[0], err)
		}
	}
}

// Facts are redacted when they enter and again when a run sends them: a
// redacted text redacts to itself, counting nothing, and Reject takes it.
func TestCorpusRedactedTwice(t *testing.T) {
	fakes := fakeSecrets()
	r := allPersonal(t)
	reject, err := New(Config{Secrets: Reject, PersonalData: PersonalKinds})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range readCorpus(t, "secrets.txt", 2) {
		msg, _ := fill(t, c[1], fakes)
		once, _ := r.Redact(msg)
		if twice, counts := r.Redact(once); twice != once || counts != nil {
			t.Errorf("%s: %q redacted again is %q (%v)", c[0], once, twice, counts)
		}
		if err := reject.Check(once); err != nil {
			t.Errorf("%s: Check(%q) = %v", c[0], once, err)
		}
	}
}
