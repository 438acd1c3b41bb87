package plan

import (
	"crypto/sha256"
	"encoding/binary"
)

// Rollout assignment: while a PromptTemplate's change rolls out, a request
// gets the canary revision or the stable one by its assignment key (an
// application's user, tenant or session id; else its scope), so that the
// same key keeps its revision while the weight grows, and serve, this
// package and any client that follows docs/plan.md ("Rollout assignment")
// assign a key alike. testdata/conformance/assignment.json holds vectors.

// Buckets is how many buckets assignment keys fall into: a weight moves
// the canary by whole buckets, 1/Buckets of the keys each.
const Buckets = 10000

// Bucket is an assignment key's bucket, 0 to Buckets-1, for the template
// namespace/name: the first 8 bytes of the SHA-256 of namespace, "/",
// name, a line feed and the key (its UTF-8 bytes as given), read as a
// big-endian unsigned 64-bit integer, modulo Buckets. The template is in
// the hash, so the keys on one template's canary are not those on
// another's.
func Bucket(namespace, name, key string) int {
	h := sha256.New()
	h.Write([]byte(namespace))
	h.Write([]byte{'/'})
	h.Write([]byte(name))
	h.Write([]byte{'\n'})
	h.Write([]byte(key))
	var sum [sha256.Size]byte
	return int(binary.BigEndian.Uint64(h.Sum(sum[:0])[:8]) % Buckets)
}

// OnCanary tells whether a bucket gets the canary revision at a weight,
// the canary's share of keys in percent: the buckets below weight ×
// Buckets / 100. A weight at or below 0 puts no key on the canary, at or
// above 100 every key; a key on the canary at a weight stays on it at
// every greater weight.
func OnCanary(bucket, weight int) bool {
	return bucket < min(max(weight, 0), 100)*(Buckets/100)
}
