package redact

import (
	"regexp"
	"strings"
)

// What rule sets made for source code miss in chat: a password inside a
// connection string, and a credential said in a sentence.

const (
	kindConnectionString = "connection-string-password"
	kindSentence         = "credential-in-sentence"
)

// connectionString matches scheme://user:password@ and captures the
// password: postgres://app:pw@db, mongodb+srv://u:pw@cluster, redis://:pw@host,
// amqp://guest:pw@mq, and any other scheme written the same way.
var connectionString = regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.-]{1,20}://[^\s:/@?#]*:([^\s@/?#]+)@[^\s@]`)

// sentence matches a credential named and then given: "my password is
// hunter2", "the PIN is 4821", "passcode: 7731", "my pw for the portal is
// x", "password for the VPN: x", "login code = x". It captures the value.
var sentence = regexp.MustCompile(`(?i)\b(?:password|passwd|passphrase|passcode|pass code|pwd|pw|pin(?: code| number)?|security code|login code|access code|otp|one[- ]time code|secret(?: word| answer)?|(?:secret|api|access|private|license)\s+key|(?:api|access|auth|bearer|refresh)\s+token|token)` +
	// an optional "for the portal", "to my bank", "of the router", "on github"
	`(?:\s+(?:for|to|of|on|at)\s+(?:the\s+|my\s+|our\s+)?[\w.@-]+(?:\s+[\w.@-]+)?)?` +
	// the link: "is", "was", "is now", "'s", ":", "="
	`(?:\s+(?:is\s+now|is|was|has\s+been)\s+|(?:'s|’s)\s+|\s*[=:]\s*)` +
	// the value, optionally quoted
	"[\"'`“‘]?" + `([^\s"'` + "`" + `”’]{3,100}?)` + "[\"'`”’]?" + `(?:[.,;!?)]*(?:\s|$))`)

// notAValue are words that follow "password is" without being one.
var notAValue = map[string]bool{
	"the": true, "a": true, "an": true, "my": true, "your": true, "our": true, "their": true, "its": true,
	"not": true, "too": true, "very": true, "still": true, "also": true, "now": true, "just": true, "only": true,
	"wrong": true, "correct": true, "right": true, "incorrect": true, "invalid": true, "valid": true,
	"expired": true, "expiring": true, "reset": true, "changed": true, "change": true, "set": true, "same": true,
	"required": true, "needed": true, "missing": true, "empty": true, "blank": true, "weak": true, "strong": true,
	"long": true, "short": true, "different": true, "locked": true, "forgotten": true, "lost": true, "sent": true,
	"in": true, "on": true, "at": true, "for": true, "to": true, "of": true, "and": true, "or": true, "but": true,
	"that": true, "this": true, "it": true, "was": true, "is": true, "be": true, "been": true, "being": true,
	"with": true, "without": true, "from": true, "into": true, "when": true, "if": true, "so": true, "as": true,
	"manager": true, "policy": true, "field": true, "hint": true, "protected": true, "case-sensitive": true,
	"number": true, "code": true, "please": true, "again": true, "here": true, "there": true, "below": true,
	"above": true, "expires": true, "valid?": true, "used": true, "revoked": true, "attached": true, "stored": true, "saved": true, "written": true, "unknown": true, "none": true,
}

func findChatSecrets(text string, fs []Finding) []Finding {
	if strings.Contains(text, "://") {
		for _, m := range connectionString.FindAllStringSubmatchIndex(text, -1) {
			fs = append(fs, Finding{Kind: kindConnectionString, Start: m[2], End: m[3], Secret: true, rank: 1})
		}
	}
	if hasCredentialWord(text) {
		for _, m := range sentence.FindAllStringSubmatchIndex(text, -1) {
			v := text[m[2]:m[3]]
			if notAValue[strings.ToLower(v)] {
				continue
			}
			fs = append(fs, Finding{Kind: kindSentence, Start: m[2], End: m[3], Secret: true, rank: 1})
		}
	}
	return fs
}

// credentialWords prefilter sentence: each alternative of it holds one.
var credentialWords = []string{"pass", "pw", "pin", "code", "otp", "secret", "key", "token"}

func hasCredentialWord(text string) bool {
	for _, w := range credentialWords {
		if containsFold(text, w) {
			return true
		}
	}
	return false
}

// containsFold reports whether text holds the lowercase ASCII word w in any case.
func containsFold(text, w string) bool {
	n := len(w)
	for i := 0; i+n <= len(text); i++ {
		j := 0
		for ; j < n; j++ {
			c := text[i+j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != w[j] {
				break
			}
		}
		if j == n {
			return true
		}
	}
	return false
}
