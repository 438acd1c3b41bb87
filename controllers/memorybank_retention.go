package controllers

import (
	promptopsv1 "github.com/promptops/promptops/api/v1"
)

// retentionArgs are the flags of spec.retention for the bank's
// consolidation Job; none when it is unset, so a bank without it keeps its
// Job's pod template and its facts.
func retentionArgs(mb *promptopsv1.MemoryBank) []string {
	r := mb.Spec.Retention
	if r == nil || r.MaxAge.Duration <= 0 {
		return nil
	}
	return []string{"--retention-max-age=" + r.MaxAge.Duration.String()}
}
