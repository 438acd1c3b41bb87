package sqlstore

import "testing"

func BenchmarkFromJSON(b *testing.B) {
	s := `["alice","bob","acme corp"]`
	for b.Loop() {
		if len(fromJSON(s)) != 3 {
			b.Fatal()
		}
	}
}
