package consolidation

import "testing"

func TestLogIDIsAHashOfTheID(t *testing.T) {
	// printf %s abc | sha256sum | cut -c1-12
	if got := LogID("abc"); got != "ba7816bf8f01" {
		t.Errorf("LogID(abc) = %s", got)
	}
	if bank, scope := ScopeKey("nons").Split(); bank != "nons" || scope != "" {
		t.Errorf("ScopeKey(nons).Split() = %q, %q", bank, scope)
	}
}

func TestScopeKeys(t *testing.T) {
	for _, tc := range []struct {
		bank  BankID
		scope string
		key   ScopeKey
	}{
		{"ns/bank", "", "ns/bank"},
		{"ns/bank", "user:ana", "ns/bank/user:ana"},
		// The third segment starts after the second slash wherever it
		// stands, also right after the first.
		{"ns/", "x", "ns//x"},
	} {
		if got := tc.bank.Scope(tc.scope); got != tc.key {
			t.Errorf("BankID(%q).Scope(%q) = %q", tc.bank, tc.scope, got)
		}
		if bank, scope := tc.key.Split(); bank != tc.bank || scope != tc.scope {
			t.Errorf("ScopeKey(%q).Split() = %q, %q", tc.key, bank, scope)
		}
		if tc.key.Bank() != tc.bank || tc.key.Name() != tc.scope {
			t.Errorf("ScopeKey(%q): Bank %q, Name %q", tc.key, tc.key.Bank(), tc.key.Name())
		}
	}
}
