package controllers

import (
	"strconv"

	promptopsv1 "github.com/promptops/promptops/api/v1"
)

// extractionArgs are the flags of spec.extraction for the bank's
// consolidation Job, each only when set (the API server fills the
// defaults of a given spec.extraction), so a bank without it keeps its
// Job's pod template; consolidate's own defaults are the same.
func extractionArgs(mb *promptopsv1.MemoryBank) []string {
	x := mb.Spec.Extraction
	if x == nil {
		return nil
	}
	var args []string
	if x.MaxPromptTokens > 0 {
		args = append(args, "--extraction-max-prompt-tokens="+strconv.Itoa(int(x.MaxPromptTokens)))
	}
	if x.ContextMessages != nil {
		args = append(args, "--extraction-context-messages="+strconv.Itoa(int(*x.ContextMessages)))
	}
	if x.MessagesPerBatch > 0 {
		args = append(args, "--extraction-messages-per-batch="+strconv.Itoa(int(x.MessagesPerBatch)))
	}
	return args
}
