package consolidation

import (
	"time"

	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// A scope is one counterpart's part of a bank: a product's user, a
// tenant, a conversation. Facts of a scope consolidate only with facts of
// the same scope into observations of that scope, and recall answers from
// one scope (and, when asked, the bank's shared scope). The empty scope
// is the bank's shared scope.
//
// In the store a scope is addressed by its key (ScopeKey): the bank's
// "namespace/name" (BankID) for the shared scope, "namespace/name/scope"
// for the others. Every per-scope mechanism of a store (its rows, its
// generation, its indexes) works per key, so scopes never meet. A store
// method that takes a ScopeKey touches that scope's rows only; one that
// takes a BankID works over every scope of the bank.

// BankID names a bank: its "namespace/name".
type BankID string

// ScopeKey is the store key of one scope of a bank (BankID.Scope).
type ScopeKey string

// Scope is the key of the bank's scope name; "" is the shared scope,
// whose key is the bank's own id.
func (b BankID) Scope(name string) ScopeKey {
	if name == "" {
		return ScopeKey(b)
	}
	return ScopeKey(string(b) + "/" + name)
}

// Split is the bank and the scope name of a key. A bank is
// "namespace/name", so a key's third segment is its scope.
func (k ScopeKey) Split() (bank BankID, scope string) {
	s := string(k)
	i := strings.IndexByte(s, '/')
	if i < 0 {
		return BankID(s), ""
	}
	if j := strings.IndexByte(s[i+1:], '/'); j >= 0 {
		return BankID(s[:i+1+j]), s[i+2+j:]
	}
	return BankID(s), ""
}

// Bank is the bank the key is a scope of.
func (k ScopeKey) Bank() BankID {
	b, _ := k.Split()
	return b
}

// Name is the key's scope name; "" for the bank's shared scope.
func (k ScopeKey) Name() string {
	_, n := k.Split()
	return n
}

// Generation is how far a bank key's observations have moved: Applied
// moves with every batch applied to the key (-1 when the store does not
// know the key), Erasures with every erasure in the key's bank. A copy of
// a key's memory is current while both are unchanged; one whose Erasures
// moved may hold erased data and is never served again.
type Generation struct {
	Applied  int64
	Erasures int64
}

// Erasure is what an erasure removed: the facts and the observations
// (with their vectors, sources and history), the messages, and the facts
// put back to pending because an observation they supported was removed.
type Erasure struct {
	Facts        int64 `json:"facts"`
	Observations int64 `json:"observations"`
	Messages     int64 `json:"messages"`
	Requeued     int64 `json:"requeued"`
}

// ScopeCount is a scope's facts, observations and messages.
type ScopeCount struct {
	Scope        string `json:"scope"`
	Facts        int64  `json:"facts"`
	Observations int64  `json:"observations"`
	Messages     int64  `json:"messages"`
}

// Exported is one line of a scope's export: a fact (with its source), an
// observation (with its source fact ids and its provenance) or a message
// (KindMessage: its content as text, its role as source, with its
// conversation and time).
type Exported struct {
	Kind string `json:"kind"`
	Fact
	SourceFactIDs []string `json:"sourceFactIds,omitempty"`
	ProofCount    int      `json:"proofCount,omitempty"`
	UpdatedAt     string   `json:"updatedAt,omitempty"`
	// Provenance is an observation's (Observation.Provenance).
	Provenance []string `json:"provenance,omitempty"`
	// Conversation and At are a message's.
	Conversation string     `json:"conversation,omitempty"`
	At           *time.Time `json:"at,omitempty"`
}

// KindMessage is the kind of an exported message.
const KindMessage = "message"

// LogID is how logs and progress lines name a fact or an observation: the
// first 12 hex digits of the SHA-256 of its id, never the id itself (an
// application's ids may say whose memory it is). The same from a shell:
// printf %s ID | sha256sum | cut -c1-12.
func LogID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:6])
}
