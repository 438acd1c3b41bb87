package consolidation

import "testing"

func TestLogIDIsAHashOfTheID(t *testing.T) {
	// printf %s abc | sha256sum | cut -c1-12
	if got := LogID("abc"); got != "ba7816bf8f01" {
		t.Errorf("LogID(abc) = %s", got)
	}
	if bank, scope := SplitBankKey("nons"); bank != "nons" || scope != "" {
		t.Errorf("SplitBankKey(nons) = %q, %q", bank, scope)
	}
}

func TestBankKeys(t *testing.T) {
	for _, tc := range []struct{ bank, scope, key string }{
		{"ns/bank", "", "ns/bank"},
		{"ns/bank", "user:ana", "ns/bank/user:ana"},
	} {
		if got := BankKey(tc.bank, tc.scope); got != tc.key {
			t.Errorf("BankKey(%q, %q) = %q", tc.bank, tc.scope, got)
		}
		if bank, scope := SplitBankKey(tc.key); bank != tc.bank || scope != tc.scope {
			t.Errorf("SplitBankKey(%q) = %q, %q", tc.key, bank, scope)
		}
	}
}
