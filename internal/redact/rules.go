package redact

import (
	"fmt"
	"math"
	"regexp/syntax"
	"strings"
	"sync"
	"unicode/utf8"

	ahocorasick "github.com/BobuSumisu/aho-corasick"
	"github.com/spf13/viper"
	"github.com/zricethezav/gitleaks/v8/config"
)

// The secret rules are gitleaks' default configuration (its config package,
// the gitleaks.toml it embeds), so a new kind of token is one module update
// away. gitleaks' own detect package is not used: it reports lines and
// columns rather than byte ranges, logs through a process-wide logger, and
// brings archive readers and report templates into the binary. secretsIn
// does what its detectRule does for a plain string: a keyword prefilter,
// the rule's regular expression, its secret group, its entropy threshold,
// then the global and the rule's allowlists.

// disabledRules are gitleaks rules left out, with the reason. None is at
// present: on the benign corpus (testdata/benign.txt) no default rule fires.
// generic-api-key, the noisy one (any "key", "token", "auth" or "access"
// word, then "=" or ":", then a high-entropy word), fires on "session
// key=<a commit SHA>", which is arguably a secret, and it is what catches a
// pasted .env line (AWS_SECRET_ACCESS_KEY=...), so it stays.
// sourcegraph-access-token matches any 40-hex word, a commit SHA included,
// but only in a text that says "sourcegraph" or "sgp_" (its keywords).
var disabledRules = map[string]string{}

type secretRule struct {
	id          string
	rule        config.Rule
	secretGroup int
	reach       int // the most bytes a match can hold (maxMatch)
}

type ruleSet struct {
	rules      []secretRule
	byKeyword  [][]int // pattern index in trie -> rule indices
	trie       *ahocorasick.Trie
	allowlists []*config.Allowlist
}

var loadRules = sync.OnceValues(func() (*ruleSet, error) {
	v := viper.New()
	v.SetConfigType("toml")
	if err := v.ReadConfig(strings.NewReader(config.DefaultConfig)); err != nil {
		return nil, fmt.Errorf("reading gitleaks' default rules: %w", err)
	}
	var vc config.ViperConfig
	if err := v.Unmarshal(&vc); err != nil {
		return nil, fmt.Errorf("reading gitleaks' default rules: %w", err)
	}
	cfg, err := vc.Translate()
	if err != nil {
		return nil, fmt.Errorf("reading gitleaks' default rules: %w", err)
	}
	rs := &ruleSet{allowlists: cfg.Allowlists}
	keywordIndex := map[string]int{}
	var keywords []string
	for _, r := range cfg.GetOrderedRules() {
		// A rule without a regular expression matches file paths; one that
		// skips reporting or needs other rules is part of a composite rule.
		if r.Regex == nil || r.Path != nil || r.SkipReport || len(r.RequiredRules) > 0 || len(r.Keywords) == 0 {
			continue
		}
		if _, off := disabledRules[r.RuleID]; off {
			continue
		}
		i := len(rs.rules)
		rs.rules = append(rs.rules, secretRule{id: r.RuleID, rule: r, secretGroup: r.SecretGroup,
			reach: maxMatch(r.Regex.String(), windowUnbounded)})
		for _, k := range r.Keywords {
			k = strings.ToLower(k)
			p, ok := keywordIndex[k]
			if !ok {
				p = len(keywords)
				keywordIndex[k] = p
				keywords = append(keywords, k)
				rs.byKeyword = append(rs.byKeyword, nil)
			}
			rs.byKeyword[p] = append(rs.byKeyword[p], i)
		}
	}
	rs.trie = ahocorasick.NewTrieBuilder().AddStrings(keywords).Build()
	return rs, nil
})

// RuleIDs returns the ids of the gitleaks rules in use, in gitleaks' order.
func RuleIDs() []string {
	rs, err := loadRules()
	if err != nil {
		return nil
	}
	ids := make([]string, len(rs.rules))
	for i, r := range rs.rules {
		ids[i] = r.id
	}
	return ids
}

// findSecrets appends the secrets in text to fs: gitleaks' rules, then chat's.
func findSecrets(text string, fs []Finding) []Finding {
	rs, _ := loadRules() // New has checked the error
	if rs != nil {
		fs = rs.find(text, fs)
	}
	return findChatSecrets(text, fs)
}

// A rule's regular expression runs only on windows of the text around its
// keywords' hits, not on the whole text: every default rule's match holds
// one of its keywords, so it starts at most the rule's longest match before
// the hit and ends at most that after it. The longest match comes from the
// expression's syntax (maxMatch); a rule with an unbounded repetition (a JWT,
// a PEM private key) gets windowUnbounded. Small windows also let Go's
// regexp use its backtracker, several times faster than its NFA on long
// inputs; both are linear.
const (
	windowUnbounded = 8 << 10
	windowSnap      = 32 // how far a window's edge moves to reach a space
)

// maxMatch returns the most bytes a match of expr can hold, at most limit.
func maxMatch(expr string, limit int) int {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return limit
	}
	return min(width(re.Simplify(), limit), limit)
}

func width(re *syntax.Regexp, limit int) int {
	switch re.Op {
	case syntax.OpLiteral:
		n := 0
		for _, r := range re.Rune {
			n += utf8.RuneLen(r)
		}
		return n
	case syntax.OpCharClass:
		if len(re.Rune) > 0 && re.Rune[len(re.Rune)-1] < utf8.RuneSelf {
			return 1
		}
		return utf8.UTFMax
	case syntax.OpAnyCharNotNL, syntax.OpAnyChar:
		return utf8.UTFMax
	case syntax.OpCapture:
		return width(re.Sub[0], limit)
	case syntax.OpConcat:
		n := 0
		for _, sub := range re.Sub {
			n = min(n+width(sub, limit), limit)
		}
		return n
	case syntax.OpAlternate:
		n := 0
		for _, sub := range re.Sub {
			n = max(n, width(sub, limit))
		}
		return n
	case syntax.OpQuest:
		return width(re.Sub[0], limit)
	case syntax.OpRepeat:
		if re.Max < 0 {
			return limit
		}
		return min(re.Max*width(re.Sub[0], limit), limit)
	case syntax.OpStar, syntax.OpPlus:
		return limit
	}
	return 0 // empty-width assertions, no match
}

func (rs *ruleSet) find(text string, fs []Finding) []Finding {
	lower := make([]byte, len(text))
	for i := 0; i < len(text); i++ {
		c := text[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		lower[i] = c
	}
	// windows[i] are rule i's windows, in order, merged when they overlap.
	windows := make([][][2]int, len(rs.rules))
	rs.trie.Walk(lower, func(end, n, pattern int64) bool {
		hit := int(end) - int(n) + 1
		for _, i := range rs.byKeyword[pattern] {
			reach := rs.rules[i].reach
			w := [2]int{max(0, hit-reach), min(len(text), int(end)+1+reach)}
			ws := windows[i]
			if k := len(ws) - 1; k >= 0 && w[0] <= ws[k][1] {
				ws[k][1] = max(ws[k][1], w[1])
			} else {
				windows[i] = append(ws, w)
			}
		}
		return true
	})
	var scan string
	budget := scanBudget(len(text))
	for i, ws := range windows {
		if len(ws) == 0 {
			continue
		}
		if scan == "" {
			scan = chatText(text)
		}
		for _, w := range ws {
			start, end := snap(scan, w[0], w[1])
			if budget < end-start {
				// Past the budget the window is not scanned but replaced
				// whole: a text this dense with rule keywords is hostile,
				// and what was not scanned must not leak.
				fs = append(fs, Finding{Kind: KindUnscanned, Start: start, End: end, Secret: true})
				continue
			}
			budget -= end - start
			fs = rs.rules[i].find(scan, start, end, rs.allowlists, fs)
		}
	}
	return fs
}

// KindUnscanned is the kind of a span left unscanned because the text held
// so many rule keywords that scanning it all would cost more than
// scanBudget: it is redacted (or rejected) whole, unread.
const KindUnscanned = "unscanned"

// scanBudget is how many bytes of rule windows one text may have scanned:
// 8 times its length and 64 KiB more, which ordinary text never nears
// (a paragraph triggers a few rules, a pasted .env file one or two a line)
// and which bounds a hostile text's cost to a fixed multiple of its length.
func scanBudget(n int) int { return 8*n + 64<<10 }

// snap moves a window's edges outwards to the nearest space, by at most
// windowSnap bytes, so that a window rarely starts or ends inside a word.
func snap(text string, start, end int) (int, int) {
	for i := 0; start > 0 && i < windowSnap && !isSpace(text[start-1]); i++ {
		start--
	}
	for i := 0; end < len(text) && i < windowSnap && !isSpace(text[end]); i++ {
		end++
	}
	return start, end
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }

// chatText returns text with sentence punctuation after a word (".", ",",
// ";", ":", "!", "?", ")", "]") turned into a space when a space or the end
// follows. Many gitleaks rules end a token only at a space, a quote or ";",
// as in source code; in chat "my key is sk_live_... ." ends with a period.
// The length and every offset stay the same.
func chatText(text string) string {
	var b []byte
	for i := 0; i < len(text); i++ {
		switch text[i] {
		case '.', ',', ';', ':', '!', '?', ')', ']':
			if i+1 == len(text) || text[i+1] == ' ' || text[i+1] == '\n' || text[i+1] == '\t' || text[i+1] == '\r' {
				if b == nil {
					b = []byte(text)
				}
				b[i] = ' '
			}
		}
	}
	if b == nil {
		return text
	}
	return string(b)
}

func (sr *secretRule) find(text string, from, to int, global []*config.Allowlist, fs []Finding) []Finding {
	r := &sr.rule
	for _, m := range r.Regex.FindAllStringSubmatchIndex(text[from:to], -1) {
		for j := range m {
			if m[j] >= 0 {
				m[j] += from
			}
		}
		// As gitleaks: the match without trailing newlines, and the secret
		// its secretGroup or else its first non-empty group.
		start, end := m[0], m[1]
		for end > start && text[end-1] == '\n' {
			end--
		}
		for start < end && text[start] == '\n' {
			start++
		}
		match := text[start:end]
		ss, se := start, end
		if len(m) >= 4 {
			if g := sr.secretGroup; g > 0 {
				if 2*g+1 >= len(m) || m[2*g] < 0 {
					continue
				}
				ss, se = m[2*g], m[2*g+1]
			} else {
				for g := 1; 2*g+1 < len(m); g++ {
					if m[2*g] >= 0 && m[2*g+1] > m[2*g] {
						ss, se = m[2*g], m[2*g+1]
						break
					}
				}
			}
		}
		se = min(se, end)
		if se <= ss {
			continue
		}
		secret := text[ss:se]
		if r.Entropy != 0 && shannonEntropy(secret) <= r.Entropy {
			continue
		}
		line := lineAround(text, start, end)
		if allowed(global, secret, match, line) || allowed(r.Allowlists, secret, match, line) {
			continue
		}
		fs = append(fs, Finding{Kind: sr.id, Start: ss, End: se, Secret: true})
	}
	return fs
}

// allowed is gitleaks' checkFindingAllowed for a text with no path or commit.
func allowed(lists []*config.Allowlist, secret, match, line string) bool {
	for _, a := range lists {
		target := secret
		switch a.RegexTarget {
		case "match":
			target = match
		case "line":
			target = line
		}
		regexOK := a.RegexAllowed(target)
		stopOK, _ := a.ContainsStopWord(secret)
		if a.MatchCondition == config.AllowlistMatchAnd {
			if len(a.Commits) > 0 || len(a.Paths) > 0 {
				continue // a text has neither
			}
			if (len(a.Regexes) == 0 || regexOK) && (len(a.StopWords) == 0 || stopOK) && (len(a.Regexes) > 0 || len(a.StopWords) > 0) {
				return true
			}
			continue
		}
		if regexOK || stopOK {
			return true
		}
	}
	return false
}

func lineAround(text string, start, end int) string {
	ls := strings.LastIndexByte(text[:start], '\n') + 1
	le := strings.IndexByte(text[end:], '\n')
	if le < 0 {
		return text[ls:]
	}
	return text[ls : end+le]
}

// shannonEntropy is gitleaks' entropy of a secret, in bits per character.
func shannonEntropy(s string) float64 {
	if s == "" {
		return 0
	}
	var counts [256]int
	var other map[rune]int
	for _, c := range s {
		if c < 256 {
			counts[c]++
		} else {
			if other == nil {
				other = map[rune]int{}
			}
			other[c]++
		}
	}
	inv := 1.0 / float64(len(s))
	var e float64
	add := func(n int) {
		if n > 0 {
			f := float64(n) * inv
			e -= f * math.Log2(f)
		}
	}
	for _, n := range counts {
		add(n)
	}
	for _, n := range other {
		add(n)
	}
	return e
}
