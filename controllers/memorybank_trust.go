package controllers

import (
	"slices"
	"strings"

	promptopsv1 "github.com/promptops/promptops/api/v1"
)

// trustArgs are the flags of spec.trustedSources for the bank's serve
// Deployment and consolidation Job: the sources sorted, so that reordering
// the list changes no pod template; none when it is unset (every source
// is trusted), so a bank without it keeps its pod templates.
func trustArgs(mb *promptopsv1.MemoryBank) []string {
	if len(mb.Spec.TrustedSources) == 0 {
		return nil
	}
	sources := slices.Clone(mb.Spec.TrustedSources)
	slices.Sort(sources)
	return []string{"--trusted-sources=" + strings.Join(slices.Compact(sources), ",")}
}
