package controllers

import (
	"strings"

	promptopsv1 "github.com/promptops/promptops/api/v1"
)

// redactionArgs are the flags of spec.redaction for the bank's serve
// Deployment and consolidation Job; none when it is unset (the binary's
// defaults are the field's), so a bank without it keeps its pod template.
func redactionArgs(mb *promptopsv1.MemoryBank) []string {
	r := mb.Spec.Redaction
	if r == nil {
		return nil
	}
	secrets := r.Secrets
	if secrets == "" {
		secrets = promptopsv1.SecretsRedact
	}
	args := []string{"--redact-secrets=" + string(secrets)}
	if len(r.PersonalData) > 0 {
		kinds := make([]string, len(r.PersonalData))
		for i, k := range r.PersonalData {
			kinds[i] = string(k)
		}
		args = append(args, "--redact-personal-data="+strings.Join(kinds, ","))
	}
	return args
}
