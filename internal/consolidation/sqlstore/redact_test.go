package sqlstore

import (
	"errors"
	"strings"
	"testing"
)

// TestRedactStoreURL: an error that quotes the store's URL, or one of its
// passwords, says neither.
func TestRedactStoreURL(t *testing.T) {
	for _, storeURL := range []string{
		"postgres://app:s3cret@db/bank?sslmode=require",
		"postgres://app@db/bank?password=s3cret",
		"postgres://app@db/bank?sslpassword=s3cret&sslmode=verify-full",
	} {
		err := redact(errors.New("cannot parse `"+storeURL+"`: s3cret rejected"), storeURL)
		if msg := err.Error(); strings.Contains(msg, "s3cret") || !strings.Contains(msg, "<store URL>") {
			t.Errorf("%s: %s", storeURL, msg)
		}
	}
}
