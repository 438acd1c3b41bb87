package cli

import (
	"flag"
	"fmt"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/textclip"
)

// trustedSourcesFlag is --trusted-sources, shared by consolidate and serve
// --bank (a MemoryBank's spec.trustedSources, passed by the manager).
func trustedSourcesFlag(fs *flag.FlagSet, p *string) {
	envStringVar(fs, p, "trusted-sources", "PROMPTOPS_TRUSTED_SOURCES", "", "`SOURCES` the bank trusts, comma-separated (a fact's \"source\"; \"unspecified\" for facts without one), at most 64: untrusted facts never update, delete or join a trusted observation, and a recall may ask for trusted items alone. Unset trusts every source ($PROMPTOPS_TRUSTED_SOURCES).")
}

// trustedSources parses --trusted-sources (consolidation.ParseTrust); an
// error names the flag and the value.
func trustedSources(list string) (consolidation.Trust, error) {
	t, err := consolidation.ParseTrust(list)
	if err != nil {
		return consolidation.Trust{}, fmt.Errorf("--trusted-sources: %q: %w", textclip.Head(list, 256, "..."), err)
	}
	return t, nil
}
