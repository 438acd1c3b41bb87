// Package tokenstest gives tests the supplied encodings from the
// vocabularies make tokenizers fetches: make test sets tokens.EnvDir to
// them and PROMPTOPS_TOKENIZERS_REQUIRED, so that a test that needs one
// fails there rather than skip; a plain go test without them skips it.
package tokenstest

import (
	"errors"
	"os"
	"testing"

	"github.com/promptops/promptops/internal/tokens"
)

// EnvRequired, when set, makes a missing vocabulary fail a test.
const EnvRequired = "PROMPTOPS_TOKENIZERS_REQUIRED"

// Encoder returns the supplied encoding's encoder, or skips (fails under
// EnvRequired) when its vocabulary is not there.
func Encoder(t testing.TB, name string) *tokens.Encoder {
	t.Helper()
	e, err := tokens.Get(name)
	if err == nil {
		return e
	}
	var u *tokens.UnavailableError
	if errors.As(err, &u) && os.Getenv(EnvRequired) == "" {
		t.Skipf("%v (make tokenizers fetches it; make test sets %s)", err, tokens.EnvDir)
	}
	t.Fatal(err)
	return nil
}
