package cli

import (
	"flag"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/promptops/promptops/internal/redact"
)

// redactionFlags are --redact-secrets and --redact-personal-data, shared by
// facts import, serve --bank and consolidate (a MemoryBank's
// spec.redaction, passed by the manager).
type redactionFlags struct {
	secrets, personal string
}

func (f *redactionFlags) register(fs *flag.FlagSet) {
	envStringVar(fs, &f.secrets, "redact-secrets", "PROMPTOPS_REDACT_SECRETS", string(redact.Redact), "What a fact holding a secret becomes (`POLICY`): Redact (each secret replaced by [REDACTED:<kind>]), Reject (refused) or Keep ($PROMPTOPS_REDACT_SECRETS).")
	envStringVar(fs, &f.personal, "redact-personal-data", "PROMPTOPS_REDACT_PERSONAL_DATA", "", "Personal data `KINDS` to redact as well, comma-separated: Email, Phone, PaymentCard, IBAN, NationalID; none by default ($PROMPTOPS_REDACT_PERSONAL_DATA).")
}

// redactor builds the Redactor the flags say; an error names the flag and
// the bad value.
func (f *redactionFlags) redactor() (*redact.Redactor, error) {
	policy := redact.SecretPolicy(strings.TrimSpace(f.secrets))
	if !slices.Contains([]redact.SecretPolicy{redact.Redact, redact.Reject, redact.Keep}, policy) {
		return nil, fmt.Errorf("--redact-secrets: %q is not one of Redact, Reject, Keep", f.secrets)
	}
	kinds, err := redact.ParsePersonalKinds(f.personal)
	if err != nil {
		return nil, fmt.Errorf("--redact-personal-data: %w", err)
	}
	return redact.New(redact.Config{Secrets: policy, PersonalData: kinds})
}

// formatRedacted writes counts by kind as "aws-access-token=1 email=2",
// sorted by kind; never the text.
func formatRedacted[N int | int64](counts map[string]N) string {
	kinds := make([]string, 0, len(counts))
	for k := range counts {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s=%d", k, counts[k])
	}
	return strings.Join(parts, " ")
}
