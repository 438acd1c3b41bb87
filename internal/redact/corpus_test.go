package redact

import (
	"bufio"
	"encoding/base64"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// fakeSecrets generates one fake secret per placeholder of testdata/secrets.txt
// from the pattern its gitleaks rule matches, with a fixed seed: the corpus
// holds no key, live or not.
func fakeSecrets() map[string]string {
	rnd := rand.New(rand.NewPCG(44, 44))
	from := func(alphabet string, n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rnd.IntN(len(alphabet))]
		}
		return string(b)
	}
	const (
		upper  = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
		lower  = "abcdefghijklmnopqrstuvwxyz"
		digits = "0123456789"
		alnum  = upper + lower + digits
		hex    = "0123456789abcdef"
		b32    = upper + "234567"
		word   = alnum + "_"
	)
	b64url := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	var pem strings.Builder
	pem.WriteString("-----BEGIN RSA PRIVATE KEY-----\n")
	for range 6 {
		pem.WriteString(from(alnum+"+/", 64) + "\n")
	}
	pem.WriteString("-----END RSA PRIVATE KEY-----")
	return map[string]string{
		"aws":        "AKIA" + from(b32, 16),
		"ghp":        "ghp_" + from(alnum, 36),
		"github_pat": "github_pat_" + from(word, 82),
		"glpat":      "glpat-" + from(alnum, 20),
		"xoxb":       "xoxb-" + from(digits, 12) + "-" + from(digits, 13) + "-" + from(alnum, 24),
		"slackhook":  "https://hooks.slack.com/services/T" + from(upper+digits, 8) + "/B" + from(upper+digits, 10) + "/" + from(alnum, 24),
		"stripe":     "sk_live_" + from(alnum, 24),
		"openai":     "sk-proj-" + from(alnum, 74) + "T3BlbkFJ" + from(alnum, 74),
		"anthropic":  "sk-ant-api03-" + from(alnum, 93) + "AA",
		"jwt":        b64url(`{"alg":"HS256","typ":"JWT"}`) + "." + b64url(`{"sub":"`+from(digits, 10)+`","name":"Test User","iat":1700000000}`) + "." + from(alnum, 43),
		"gcp":        "AIza" + from(alnum, 35),
		"pem":        pem.String(),
		"npm":        "npm_" + from(lower+digits, 36),
		"sendgrid":   "SG." + from(alnum, 22) + "." + from(alnum, 43),
		"hf":         "hf_" + from(lower+upper, 34),
		"dop":        "dop_v1_" + from(hex, 64),
		"shpat":      "shpat_" + from(hex, 32),
		"pw":         from(alnum, 6) + "!" + from(digits, 2),
		"pin":        from(digits, 4),
		"awssecret":  from(alnum+"/+", 40),
		"hexkey":     from(hex, 32),
	}
}

type corpusLine struct{ fields []string }

func readCorpus(t testing.TB, name string, nfields int) [][]string {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if nfields == 1 {
			out = append(out, []string{line})
			continue
		}
		parts := strings.SplitN(line, " | ", nfields)
		if len(parts) != nfields {
			t.Fatalf("%s: %q has %d fields, want %d", name, line, len(parts), nfields)
		}
		out = append(out, parts)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// fill replaces each {name} in template with its fake secret and returns
// the message and the secrets it holds.
func fill(t testing.TB, template string, fakes map[string]string) (string, []string) {
	t.Helper()
	msg := strings.ReplaceAll(template, `\n`, "\n")
	var used []string
	for name, v := range fakes {
		if strings.Contains(msg, "{"+name+"}") {
			msg = strings.ReplaceAll(msg, "{"+name+"}", v)
			used = append(used, v)
		}
	}
	if len(used) == 0 {
		t.Fatalf("%q names no known secret", template)
	}
	return msg, used
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
