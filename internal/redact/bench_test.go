package redact

import (
	"strings"
	"testing"
)

// BenchmarkRedact gives the cost per fact of Redact (secrets and every
// personal kind) beside a no-op that copies the text, the anchor for ratios.
func BenchmarkRedact(b *testing.B) {
	fakes := fakeSecrets()
	plain := "The customer is on the Pro plan since March, prefers e-mail over phone, " +
		"and asked on 2024-03-15 about order 100234987, which shipped with tracking 1Z999AA10123456784."
	withSecret := "Here is my GitHub token " + fakes["ghp"] + ", and the db is postgres://app:pw-77x@db:5432/orders, thanks."
	var big strings.Builder
	for big.Len() < 64<<10 {
		big.WriteString(plain)
		big.WriteByte('\n')
	}
	facts := []struct{ name, text string }{
		{"fact-200B", plain},
		{"fact-200B-secret", withSecret},
		{"fact-64KiB", big.String()[:64<<10]},
	}
	r := allPersonal(b)
	secretsOnly, _ := New(Config{})
	for _, f := range facts {
		b.Run(f.name+"/noop", func(b *testing.B) {
			b.SetBytes(int64(len(f.text)))
			b.ReportAllocs()
			for b.Loop() {
				sink = strings.Clone(f.text)
			}
		})
		b.Run(f.name+"/secrets", func(b *testing.B) {
			b.SetBytes(int64(len(f.text)))
			b.ReportAllocs()
			for b.Loop() {
				sink, _ = secretsOnly.Redact(f.text)
			}
		})
		b.Run(f.name+"/secrets+personal", func(b *testing.B) {
			b.SetBytes(int64(len(f.text)))
			b.ReportAllocs()
			for b.Loop() {
				sink, _ = r.Redact(f.text)
			}
		})
	}
}

// BenchmarkHostile times TestHostileInput's worst cases at 1 MiB.
func BenchmarkHostile(b *testing.B) {
	r := allPersonal(b)
	for name, text := range hostileTexts(1 << 20) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			for b.Loop() {
				sink, _ = r.Redact(text)
			}
		})
	}
}

var sink string
