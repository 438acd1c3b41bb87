package cli

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/promptops/promptops/internal/consolidation"
)

// --trusted-sources takes a comma-separated list of source names; empty
// trusts every source; an error names the flag and the value.
func TestTrustedSourcesFlag(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string // nil: every source
		err  bool
	}{
		{"", nil, false},
		{" ", nil, false},
		{"user", []string{"user"}, false},
		{"user, crm ,tool.web-search,unspecified,user", []string{"crm", "tool.web-search", "unspecified", "user"}, false},
		{"User", nil, true},
		{"user,,crm", nil, true},
		{"user,tool web", nil, true},
		{strings.Repeat("a", consolidation.MaxSourceBytes+1), nil, true},
		{strings.Repeat("s,", consolidation.MaxTrustedSources) + "s", nil, true},
	} {
		got, err := trustedSources(tc.in)
		if (err != nil) != tc.err || !slices.Equal(got.Sources(), tc.want) || got.Everyone() != (tc.want == nil) {
			t.Errorf("%.40q: %v, %v; want %v (error %v)", tc.in, got.Sources(), err, tc.want, tc.err)
		}
		if err != nil && (!strings.Contains(err.Error(), "--trusted-sources") || !strings.Contains(err.Error(), tc.in[:min(len(tc.in), 40)])) {
			t.Errorf("%.40q: the error %q does not name the flag and the value", tc.in, err)
		}
	}
	url := "sqlite://" + filepath.Join(t.TempDir(), "bank.db")
	for _, args := range [][]string{
		{"consolidate", "--bank", "a/b", "--store", url, "--llm-base-url", "http://127.0.0.1:1/v1", "--model", "m", "--trusted-sources", "user,CRM"},
		{"serve", "--bank", "a/b", "--store", url, "--listen", "127.0.0.1:0", "--trusted-sources", "user,CRM"},
	} {
		code, _, errOut := run(t, "", args...)
		if code != ExitInvalid || !strings.Contains(errOut, `--trusted-sources: "user,CRM"`) || !strings.Contains(errOut, `"CRM"`) {
			t.Errorf("%s --trusted-sources user,CRM: exit %d %q, want %d naming the flag and the value", args[0], code, errOut, ExitInvalid)
		}
	}
	// A valid list gets past the flags: a run over an empty bank succeeds.
	code, _, errOut := run(t, "", "consolidate", "--bank", "a/b", "--store", url, "--llm-base-url", "http://127.0.0.1:1/v1", "--model", "m", "--trusted-sources", "user,crm")
	if code != ExitOK {
		t.Errorf("consolidate --trusted-sources user,crm: exit %d %s", code, errOut)
	}
}

// serve --bank gives the bank's Recaller the trust its flag says (recall
// marks items trusted from it); without the flag every source is trusted.
func TestServeBankTrust(t *testing.T) {
	url := "sqlite://" + filepath.Join(t.TempDir(), "bank.db")
	for _, tc := range []struct {
		flag string
		want []string
	}{{"", nil}, {"user,crm", []string{"crm", "user"}}} {
		trust, err := trustedSources(tc.flag)
		if err != nil {
			t.Fatal(err)
		}
		bank, closeBank, err := openBank(context.Background(), storeFlags{bank: "a/b", store: url}, bankOptions{encoding: "cl100k_base", emb: &embeddingsFlags{}, trust: trust}, logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		if got := bank.Recaller.Trust.Sources(); !slices.Equal(got, tc.want) {
			t.Errorf("--trusted-sources %q: the Recaller trusts %v, want %v", tc.flag, got, tc.want)
		}
		closeBank()
	}
}
