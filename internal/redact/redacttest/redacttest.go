// Package redacttest is internal/redact's corpus for the tests of the
// packages that redact: fake secrets said the way users say them, benign
// look-alikes and personal data, read from internal/redact/testdata.
package redacttest

import (
	"bufio"
	"encoding/base64"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// FakeSecrets generates one fake secret per placeholder of
// testdata/secrets.txt from the pattern its gitleaks rule matches, with a
// fixed seed: the corpus holds no key, live or not.
func FakeSecrets() map[string]string {
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

// Secret is a chat message holding fake secrets of one kind.
type Secret struct {
	// Kind is the kind internal/redact names them by.
	Kind string
	// Text is the message.
	Text string
	// Values are the secrets it holds, none of which may survive.
	Values []string
}

// Personal is a chat message holding one value of personal data.
type Personal struct {
	// Kind is the redact.PersonalKind that asks for it ("Email").
	Kind string
	// Name is the kind internal/redact names it by ("email").
	Name string
	// Value is the personal data; Text the message holding it.
	Value, Text string
}

// Secrets returns the secrets corpus with its fake secrets filled in.
func Secrets(t testing.TB) []Secret {
	t.Helper()
	fakes := FakeSecrets()
	var out []Secret
	for _, c := range Read(t, "secrets.txt", 2) {
		msg, values := Fill(t, c[1], fakes)
		out = append(out, Secret{Kind: c[0], Text: msg, Values: values})
	}
	return out
}

// Benign returns the benign look-alikes: UUIDs, commit SHAs, digests, order
// numbers, digit runs that fail the Luhn check.
func Benign(t testing.TB) []string {
	t.Helper()
	var out []string
	for _, c := range Read(t, "benign.txt", 1) {
		out = append(out, c[0])
	}
	return out
}

// PersonalData returns the personal data corpus.
func PersonalData(t testing.TB) []Personal {
	t.Helper()
	var out []Personal
	for _, c := range Read(t, "personal.txt", 4) {
		out = append(out, Personal{Kind: c[0], Name: c[1], Value: c[2], Text: strings.ReplaceAll(c[3], "{v}", c[2])})
	}
	return out
}

// dir is internal/redact/testdata, wherever the test runs.
func dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata")
}

// Read returns the lines of testdata/name that are neither blank nor
// comments, each split into nfields fields at " | ".
func Read(t testing.TB, name string, nfields int) [][]string {
	t.Helper()
	f, err := os.Open(filepath.Join(dir(), name))
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

// Fill replaces each {name} in template with its fake secret and returns
// the message and the secrets it holds.
func Fill(t testing.TB, template string, fakes map[string]string) (string, []string) {
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
