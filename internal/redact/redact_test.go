package redact

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestNewNamesTheBadValue(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Secrets: "redact"}, `"redact"`},
		{Config{Secrets: "Drop"}, `"Drop"`},
		{Config{PersonalData: []PersonalKind{Email, "Passport"}}, `"Passport"`},
	} {
		_, err := New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	for _, p := range []SecretPolicy{"", Redact, Reject, Keep} {
		r, err := New(Config{Secrets: p, PersonalData: []PersonalKind{Email, Email}})
		if err != nil {
			t.Fatalf("New(%q): %v", p, err)
		}
		if want := cmpOr(p, Redact); r.Policy() != want {
			t.Errorf("New(%q).Policy() = %q, want %q", p, r.Policy(), want)
		}
	}
}

func cmpOr(p, d SecretPolicy) SecretPolicy {
	if p == "" {
		return d
	}
	return p
}

func TestParsePersonalKinds(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []PersonalKind
		wantErr string
	}{
		{in: "", want: nil},
		{in: "Email", want: []PersonalKind{Email}},
		{in: "Email, Phone,PaymentCard,IBAN,NationalID", want: PersonalKinds},
		{in: "Email,Email", want: []PersonalKind{Email}},
		{in: "Email,email", wantErr: `"email"`},
		{in: "Email,,Phone", wantErr: `""`},
		{in: "SSN", wantErr: `"SSN"`},
	} {
		got, err := ParsePersonalKinds(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParsePersonalKinds(%q) = %v, %v; want an error naming %s", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParsePersonalKinds(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestRedactReplacesOnlyTheSecret(t *testing.T) {
	r, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ in, want string }{
		{"postgres://app:s3cr3t-pw@db:5432/orders", "postgres://app:[REDACTED:connection-string-password]@db:5432/orders"},
		{"redis://:s3cr3t@cache:6379", "redis://:[REDACTED:connection-string-password]@cache:6379"},
		{"https://example.com/a:b@c", "https://example.com/a:b@c"},
		{"the PIN is 4821.", "the PIN is [REDACTED:credential-in-sentence]."},
		{`password: "correct-horse-9"`, `password: "[REDACTED:credential-in-sentence]"`},
		{"my password is too weak", "my password is too weak"},
		{"nothing here", "nothing here"},
		{"", ""},
	} {
		got, _ := r.Redact(tc.in)
		if got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestKeepLeavesSecrets(t *testing.T) {
	fakes := fakeSecrets()
	keep, err := New(Config{Secrets: Keep, PersonalData: []PersonalKind{Email}})
	if err != nil {
		t.Fatal(err)
	}
	msg := "token " + fakes["ghp"] + " from ops@example.com"
	got, counts := keep.Redact(msg)
	if want := "token " + fakes["ghp"] + " from [REDACTED:email]"; got != want || counts["email"] != 1 || len(counts) != 1 {
		t.Errorf("Keep: Redact = %q, %v; want %q", got, counts, want)
	}
	if err := keep.Check(msg); err != nil {
		t.Errorf("Keep: Check = %v, want nil", err)
	}
}

func TestCheckUnderReject(t *testing.T) {
	fakes := fakeSecrets()
	reject, err := New(Config{Secrets: Reject, PersonalData: []PersonalKind{Email}})
	if err != nil {
		t.Fatal(err)
	}
	msg := "aws " + fakes["aws"] + " and again " + fakes["aws"] + ", stripe " + fakes["stripe"] + ", mail me at a@example.com"
	err = reject.Check(msg)
	var se *SecretError
	if !errors.As(err, &se) || !errors.Is(err, ErrSecret) {
		t.Fatalf("Check = %v, want a *SecretError", err)
	}
	if want := []string{"aws-access-token", "stripe-access-token"}; !slices.Equal(se.Kinds, want) {
		t.Errorf("Kinds = %v, want %v", se.Kinds, want)
	}
	for _, s := range []string{fakes["aws"], fakes["stripe"], "a@example.com"} {
		if strings.Contains(err.Error(), s) {
			t.Errorf("the error %q quotes %q", err, s)
		}
	}
	if err := reject.Check("mail me at a@example.com"); err != nil {
		t.Errorf("personal data alone: Check = %v, want nil", err)
	}
	fs := reject.Find(msg)
	if len(fs) != 4 {
		t.Fatalf("Find = %v, want 4 findings", fs)
	}
	for _, f := range fs {
		if got := msg[f.Start:f.End]; got != fakes["aws"] && got != fakes["stripe"] && got != "a@example.com" {
			t.Errorf("finding %+v spans %q", f, got)
		}
	}
}

func TestMergeOverlaps(t *testing.T) {
	got := merge([]Finding{
		{Kind: "email", Start: 10, End: 30},
		{Kind: "connection-string-password", Start: 10, End: 14, Secret: true},
		{Kind: "b", Start: 0, End: 5, Secret: true},
		{Kind: "c", Start: 3, End: 8, Secret: true},
	})
	want := []Finding{
		{Kind: "b", Start: 0, End: 8, Secret: true},
		{Kind: "connection-string-password", Start: 10, End: 30, Secret: true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("merge = %v, want %v", got, want)
	}
}

func TestLuhnIBANNationalID(t *testing.T) {
	for s, want := range map[string]bool{
		"4111 1111 1111 1111": true, "4111111111111112": false, "5555-5555-5555-4444": true, "123": false,
	} {
		if luhn(s) != want {
			t.Errorf("luhn(%q) = %v", s, !want)
		}
	}
	for s, want := range map[string]bool{
		"GB82 WEST 1234 5698 7654 32": true, "GB82WEST12345698765431": false, "DE89370400440532013000": true, "DE8937040044": false,
	} {
		if ibanValid(s) != want {
			t.Errorf("ibanValid(%q) = %v", s, !want)
		}
	}
	for s, want := range map[string]bool{
		"123-45-6789": true, "000-45-6789": false, "666-45-6789": false, "912-45-6789": false, "123-00-6789": false, "123-45-0000": false,
		"AB 12 34 56 C": true, "GB 12 34 56 C": false,
	} {
		if nationalIDValid(s) != want {
			t.Errorf("nationalIDValid(%q) = %v", s, !want)
		}
	}
}

func TestRedactorIsSafeForConcurrentUse(t *testing.T) {
	fakes := fakeSecrets()
	r := allPersonal(t)
	msg := "key " + fakes["ghp"] + " mail a@example.com card 4111 1111 1111 1111"
	want, _ := r.Redact(msg)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if got, _ := r.Redact(msg); got != want {
					t.Errorf("Redact = %q, want %q", got, want)
				}
			}
		})
	}
	wg.Wait()
}

// TestHostileInput runs 256 KiB texts that are worst cases for a keyword
// prefilter or a regular expression: every keyword of every rule, one
// character repeated, and digits with separators. It asserts what is
// found, not a time; BenchmarkHostile gives the time.
func TestHostileInput(t *testing.T) {
	r := allPersonal(t)
	for name, text := range hostileTexts(256 << 10) {
		out, counts := r.Redact(text)
		if len(out) == 0 {
			t.Errorf("%s: empty output", name)
		}
		t.Logf("%s: %v", name, counts)
	}
}

func hostileTexts(mib int) map[string]string {
	rs, _ := loadRules()
	var kw strings.Builder
	for kw.Len() < mib {
		for _, sr := range rs.rules {
			for _, k := range sr.rule.Keywords {
				kw.WriteString(k)
				kw.WriteByte(' ')
			}
		}
	}
	return map[string]string{
		"repeated-a":     strings.Repeat("a", mib),
		"repeated-digit": strings.Repeat("7", mib),
		"digit-groups":   strings.Repeat("1234 ", mib/5),
		"keywords":       kw.String()[:mib],
		"password-is":    strings.Repeat("password is ", mib/12),
		"at-signs":       strings.Repeat("a@b.", mib/4),
		"prose":          strings.Repeat("The user prefers dark mode and weekly summaries; order 100234987 shipped. ", mib/76),
	}
}
