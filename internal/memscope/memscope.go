// Package memscope holds the one rule for a memory scope's name, shared by
// the store, the bank API, the CLI and the plan package.
//
// A scope is one counterpart's part of a bank: a product's user, a tenant,
// a conversation. The empty name is the bank's shared scope.
package memscope

import (
	"fmt"
	"strings"
)

// MaxBytes bounds a scope's name.
const MaxBytes = 253

// Problem says what is wrong with a scope name, or "" when it is valid: 1
// to MaxBytes bytes of ASCII letters, digits and "._:@-", so that it is a
// URL path segment as it is. "" (the shared scope) is valid.
func Problem(scope string) string {
	if scope == "" {
		return ""
	}
	if len(scope) > MaxBytes {
		return fmt.Sprintf("%d bytes, at most %d", len(scope), MaxBytes)
	}
	for i := 0; i < len(scope); i++ {
		if !allowed(scope[i]) {
			return fmt.Sprintf("byte %d is not a letter, digit or one of . _ : @ -", i+1)
		}
	}
	return ""
}

func allowed(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:@-", c) >= 0
}
