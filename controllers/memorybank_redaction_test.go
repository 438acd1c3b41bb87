package controllers

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	promptopsv1 "github.com/promptops/promptops/api/v1"
)

// spec.redaction reaches the bank's serve Deployment and consolidation Job
// as flags; a bank without it keeps the pod templates it had.
func TestRedactionArgs(t *testing.T) {
	bank := func(r *promptopsv1.RedactionSpec) *promptopsv1.MemoryBank {
		mb := &promptopsv1.MemoryBank{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns"}}
		mb.Spec.Store.SQLite = &promptopsv1.SQLiteStore{Path: "/data/b.db"}
		mb.Spec.Serving = &promptopsv1.ServingSpec{}
		mb.Spec.Redaction = r
		return mb
	}
	for _, tc := range []struct {
		name string
		r    *promptopsv1.RedactionSpec
		want []string
	}{
		{"unset", nil, nil},
		{"defaulted", &promptopsv1.RedactionSpec{}, []string{"--redact-secrets=Redact"}},
		{"reject with personal data", &promptopsv1.RedactionSpec{Secrets: promptopsv1.SecretsReject, PersonalData: []promptopsv1.PersonalDataKind{"Email", "IBAN"}},
			[]string{"--redact-secrets=Reject", "--redact-personal-data=Email,IBAN"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mb := bank(tc.r)
			job := desiredJob(mb, "run", "img", "hash", nil)
			if got, want := job.Spec.Template.Spec.Containers[0].Args, append([]string{"consolidate"}, tc.want...); !slices.Equal(got, want) {
				t.Errorf("job args %q, want %q", got, want)
			}
			c, err := desiredServing(mb, "img")
			if err != nil {
				t.Fatal(err)
			}
			args := c.deployment.Spec.Template.Spec.Containers[0].Args
			if n := len(tc.want); !slices.Equal(args[len(args)-n:], tc.want) || (n == 0 && slices.ContainsFunc(args, func(a string) bool { return len(a) > 9 && a[:9] == "--redact-" })) {
				t.Errorf("serve args %q, want them to end with %q", args, tc.want)
			}
		})
	}
}

// spec.retention reaches the bank's consolidation Job as
// --retention-max-age; a bank without it keeps the Job's pod template.
func TestRetentionArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    *promptopsv1.RetentionSpec
		want []string
	}{
		{"unset", nil, nil},
		{"thirty days", &promptopsv1.RetentionSpec{MaxAge: metav1.Duration{Duration: 720 * time.Hour}}, []string{"--retention-max-age=720h0m0s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mb := &promptopsv1.MemoryBank{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns"}}
			mb.Spec.Store.SQLite = &promptopsv1.SQLiteStore{Path: "/data/b.db"}
			mb.Spec.Redaction = &promptopsv1.RedactionSpec{}
			mb.Spec.Retention = tc.r
			job := desiredJob(mb, "run", "img", "hash", nil)
			if got, want := job.Spec.Template.Spec.Containers[0].Args, append([]string{"consolidate", "--redact-secrets=Redact"}, tc.want...); !slices.Equal(got, want) {
				t.Errorf("job args %q, want %q", got, want)
			}
		})
	}
}

// spec.trustedSources reaches the bank's serve Deployment and
// consolidation Job as --trusted-sources, sorted; a bank without it keeps
// the pod templates it had (every source trusted).
func TestTrustArgs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sources []string
		want    []string
	}{
		{"unset", nil, nil},
		{"one", []string{"user"}, []string{"--trusted-sources=user"}},
		{"several, sorted", []string{"user", "crm", "tool.web-search", "unspecified"}, []string{"--trusted-sources=crm,tool.web-search,unspecified,user"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mb := &promptopsv1.MemoryBank{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns"}}
			mb.Spec.Store.SQLite = &promptopsv1.SQLiteStore{Path: "/data/b.db", PersistentVolumeClaimName: "data"}
			mb.Spec.Serving = &promptopsv1.ServingSpec{}
			mb.Spec.Retention = &promptopsv1.RetentionSpec{MaxAge: metav1.Duration{Duration: time.Hour}}
			mb.Spec.TrustedSources = tc.sources
			job := desiredJob(mb, "run", "img", "hash", nil)
			if got, want := job.Spec.Template.Spec.Containers[0].Args, append([]string{"consolidate", "--retention-max-age=1h0m0s"}, tc.want...); !slices.Equal(got, want) {
				t.Errorf("job args %q, want %q", got, want)
			}
			c, err := desiredServing(mb, "img")
			if err != nil {
				t.Fatal(err)
			}
			args := c.deployment.Spec.Template.Spec.Containers[0].Args
			if got, want := slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--trusted-sources") }), tc.want != nil; got != want {
				t.Errorf("serve args %q, want --trusted-sources: %v", args, want)
			}
			if n := len(tc.want); n > 0 && !slices.Equal(args[len(args)-n:], tc.want) {
				t.Errorf("serve args %q, want them to end with %q", args, tc.want)
			}
		})
	}
}

// spec.extraction reaches the bank's consolidation Job as the
// --extraction-* flags it sets; a bank without it keeps the Job's pod
// template.
func TestExtractionArgs(t *testing.T) {
	zero, twelve := int32(0), int32(12)
	for _, tc := range []struct {
		name string
		x    *promptopsv1.ExtractionSpec
		want []string
	}{
		{"unset", nil, nil},
		{"all", &promptopsv1.ExtractionSpec{MaxPromptTokens: 4000, ContextMessages: &twelve, MessagesPerBatch: 32},
			[]string{"--extraction-max-prompt-tokens=4000", "--extraction-context-messages=12", "--extraction-messages-per-batch=32"}},
		{"no context", &promptopsv1.ExtractionSpec{ContextMessages: &zero}, []string{"--extraction-context-messages=0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mb := &promptopsv1.MemoryBank{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns"}}
			mb.Spec.Store.SQLite = &promptopsv1.SQLiteStore{Path: "/data/b.db"}
			mb.Spec.Extraction = tc.x
			job := desiredJob(mb, "run", "img", "hash", nil)
			if got, want := job.Spec.Template.Spec.Containers[0].Args, append([]string{"consolidate"}, tc.want...); !slices.Equal(got, want) {
				t.Errorf("job args %q, want %q", got, want)
			}
		})
	}
}
