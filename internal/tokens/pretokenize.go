package tokens

import "unicode/utf8"

// The pre-tokenizers split text into the pieces that tiktoken's regular
// expressions match, written out by hand: a regex engine costs most of the
// encoding time, and Go's has no look-ahead. Each function returns the end of
// the piece that starts at s[i], trying the pattern's alternatives in order
// with the backtracking (leftmost-first) semantics of the reference engine.
// Every character is matched by some alternative, so pieces tile the text.

// splitFunc returns the end of the piece starting at s[i], i < len(s).
type splitFunc func(s string, i int) int

// splitCL100K implements cl100k_base's pattern:
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func splitCL100K(s string, i int) int { return splitCL(s, i, false) }

// splitQwen implements Qwen 2.5 and 3's pattern, cl100k_base's with one
// digit a piece:
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func splitQwen(s string, i int) int { return splitCL(s, i, true) }

// splitCL is cl100k_base's pattern, with \p{N} in place of \p{N}{1,3}
// when oneDigit.
func splitCL(s string, i int, oneDigit bool) int {
	b := s[i]
	// No alternative before \p{N}{1,3} starts with a digit.
	if b-'0' < 10 {
		if oneDigit {
			return i + 1
		}
		return digitsEnd(s, i+1)
	}
	// An ASCII letter, or a space and one, starts a letter run.
	if (b|0x20)-'a' < 26 {
		return runEnd(s, i+1, cL)
	}
	if b == ' ' && i+1 < len(s) && (s[i+1]|0x20)-'a' < 26 {
		return runEnd(s, i+2, cL)
	}
	if b == '\'' {
		if n := contraction(s, i); n > 0 {
			return i + n
		}
	}
	c, n := classAt(s, i)
	if c&cL != 0 {
		return runEnd(s, i+n, cL)
	}
	if b != '\r' && b != '\n' && c&cN == 0 && i+n < len(s) {
		if c2, _ := classAt(s, i+n); c2&cL != 0 {
			return runEnd(s, i+n, cL)
		}
	}
	if c&cN != 0 {
		if oneDigit {
			return i + n
		}
		return digitsEnd(s, i+n)
	}
	if end := punctEnd(s, i, c, false); end > 0 {
		return end
	}
	return spaceEnd(s, i)
}

// splitO200K implements o200k_base's pattern:
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// The optional first character may be a mark (\p{M} is not \p{L}), so both
// "with it" and "without it" are tried, as the engine would.
func splitO200K(s string, i int) int { return splitO200KLike(s, i, false) }

// splitTekken implements Mistral's Tekken pattern, o200k_base's with one
// digit a piece and no contractions:
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+
//	|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*
//	|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
func splitTekken(s string, i int) int { return splitO200KLike(s, i, true) }

// splitO200KLike is o200k_base's pattern, Tekken's when tekken.
func splitO200KLike(s string, i int, tekken bool) int {
	// No alternative before \p{N}{1,3} starts with a digit.
	if s[i]-'0' < 10 {
		if tekken {
			return i + 1
		}
		return digitsEnd(s, i+1)
	}
	if end := asciiWord(s, i, !tekken); end > 0 {
		return end
	}
	b := s[i]
	c, n := classAt(s, i)
	lead := b != '\r' && b != '\n' && c&(cL|cN) == 0 && i+n < len(s)
	if c&(cU|cW) != 0 || lead {
		if lead {
			if end := upperLower(s, i+n, !tekken); end > 0 {
				return end
			}
		}
		if end := upperLower(s, i, !tekken); end > 0 {
			return end
		}
		if lead {
			if end := upperThenLower(s, i+n, !tekken); end > 0 {
				return end
			}
		}
		if end := upperThenLower(s, i, !tekken); end > 0 {
			return end
		}
	}
	if c&cN != 0 {
		if tekken {
			return i + n
		}
		return digitsEnd(s, i+n)
	}
	if end := punctEnd(s, i, c, true); end > 0 {
		return end
	}
	return spaceEnd(s, i)
}

// asciiWord is splitO200K's letter alternatives for ASCII text, most of
// English and code: an optional ASCII lead that is not a letter, a digit or
// a line break, then [A-Z]*[a-z]* (not empty) and the optional contraction,
// where the letters end at an ASCII byte. On ASCII letters the two
// alternatives come to this: the first takes the upper-case run and then
// the lower-case one, the second only matches when no lower-case letter
// follows and takes the upper-case run. It returns 0 when it does not apply
// (the full code then decides).
func asciiWord(s string, i int, contractions bool) int {
	p := i
	if b := s[p]; (b|0x20)-'a' >= 26 {
		if b >= utf8.RuneSelf || b == '\r' || b == '\n' || b-'0' < 10 || p+1 >= len(s) || (s[p+1]|0x20)-'a' >= 26 {
			return 0
		}
		p++
	}
	q := p
	for q < len(s) && s[q]-'A' < 26 {
		q++
	}
	for q < len(s) && s[q]-'a' < 26 {
		q++
	}
	if q < len(s) && s[q] >= utf8.RuneSelf {
		return 0
	}
	return q + optContraction(s, q, contractions)
}

// optContraction is contraction when contractions, else 0.
func optContraction(s string, i int, contractions bool) int {
	if !contractions {
		return 0
	}
	return contraction(s, i)
}

// upperLower matches [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+
// and the optional contraction at s[p], returning its end or 0. The first
// star is greedy: when no lower-class character follows the upper run, the
// engine gives back characters until the last one of the run that is also
// in the lower class (Lm, Lo, M) can serve as the plus.
func upperLower(s string, p int, contractions bool) int {
	q, lastLower := p, 0
	for q < len(s) {
		c, n := classAt(s, q)
		if c&cU == 0 {
			break
		}
		q = repeatEnd(s, q, n)
		if c&cW != 0 {
			lastLower = q
		}
	}
	end := 0
	if q < len(s) {
		if c, _ := classAt(s, q); c&cW != 0 {
			end = runEnd(s, q, cW)
		}
	}
	if end == 0 {
		end = lastLower
	}
	if end == 0 {
		return 0
	}
	return end + optContraction(s, end, contractions)
}

// upperThenLower matches [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*
// and the optional contraction at s[p], returning its end or 0.
func upperThenLower(s string, p int, contractions bool) int {
	q := runEnd(s, p, cU)
	if q == p {
		return 0
	}
	end := runEnd(s, q, cW)
	return end + optContraction(s, end, contractions)
}

// contraction returns the length of (?i:'s|'t|'re|'ve|'m|'ll|'d) at s[i], or
// 0. Case-insensitive means simple case folding, so 'ſ (long s) counts.
func contraction(s string, i int) int {
	if i >= len(s) || s[i] != '\'' {
		return 0
	}
	l1, n1 := foldedLetter(s, i+1)
	switch l1 {
	case 's', 't', 'm', 'd':
		return 1 + n1
	case 'r', 'v', 'l':
		want := byte('e')
		if l1 == 'l' {
			want = 'l'
		}
		if l2, n2 := foldedLetter(s, i+1+n1); l2 == want {
			return 1 + n1 + n2
		}
	}
	return 0
}

// foldedLetter returns the lower-case ASCII letter that the character at s[i]
// case-folds to, or 0, and the character's width.
func foldedLetter(s string, i int) (byte, int) {
	if i >= len(s) {
		return 0, 0
	}
	if b := s[i]; b < utf8.RuneSelf {
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		return b, 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return foldedContractionLetters[r], n
}

// runEnd returns the end of the run of characters with any of the bits
// starting at s[p].
func runEnd(s string, p int, bits uint8) int {
	for p < len(s) {
		if b := s[p]; b < utf8.RuneSelf {
			if bmpClass[b]&bits == 0 {
				return p
			}
			p++
			continue
		}
		c, n := classAt(s, p)
		if c&bits == 0 {
			return p
		}
		p = repeatEnd(s, p, n)
	}
	return p
}

// repeatEnd returns the end of the copies of the n-byte character at s[p]
// that follow one another from p (at least p+n): a megabyte-long run of one
// character is then classified once, and skipped at the speed of a memory
// compare.
func repeatEnd(s string, p, n int) int {
	q := p + n
	if q+n > len(s) || s[q+n-1] != s[p+n-1] || s[q:q+n] != s[p:q] {
		return q
	}
	q += n
	// s[p:q] is copies of the character: compare blocks of doubling, then
	// halving, length.
	l := q - p
	for q+l <= len(s) && s[q:q+l] == s[p:p+l] {
		q += l
		l *= 2
	}
	for l > n {
		l /= 2
		if q+l <= len(s) && s[q:q+l] == s[p:p+l] {
			q += l
		}
	}
	return q
}

// digitsEnd ends \p{N}{1,3} whose first digit ends at p.
func digitsEnd(s string, p int) int {
	for k := 1; k < 3 && p < len(s); k++ {
		if s[p]-'0' < 10 {
			p++
			continue
		}
		c, n := classAt(s, p)
		if c&cN == 0 {
			break
		}
		p += n
	}
	return p
}

// punctEnd matches ` ?[^\s\p{L}\p{N}]+[\r\n]*` (with '/' in the trailing set
// for o200k_base) at s[i], whose first character has class c; 0 when it does
// not match.
func punctEnd(s string, i int, c uint8, slash bool) int {
	var p int
	switch {
	case c&(cS|cL|cN) == 0:
		p = i
	case s[i] == ' ' && i+1 < len(s):
		if c2, _ := classAt(s, i+1); c2&(cS|cL|cN) != 0 {
			return 0
		}
		p = i + 1
	default:
		return 0
	}
	for p < len(s) {
		if b := s[p]; b < utf8.RuneSelf {
			if bmpClass[b]&(cS|cL|cN) != 0 {
				break
			}
			p++
			continue
		}
		c, n := classAt(s, p)
		if c&(cS|cL|cN) != 0 {
			break
		}
		p = repeatEnd(s, p, n)
	}
	for p < len(s) && (s[p] == '\r' || s[p] == '\n' || (slash && s[p] == '/')) {
		p++
	}
	return p
}

// spaceEnd matches \s*[\r\n]+|\s+(?!\S)|\s+ at s[i], a white-space character.
// Over the maximal white-space run: up to its last line break if it has one;
// else all of it at the end of the text; else all but its last character
// (which then leads the next piece); else the single character.
func spaceEnd(s string, i int) int {
	p, lastBreak, lastStart := i, 0, i
	for p < len(s) {
		c, n := classAt(s, p)
		if c&cS == 0 {
			break
		}
		end := repeatEnd(s, p, n)
		if s[p] == '\r' || s[p] == '\n' {
			lastBreak = end
		}
		lastStart = end - n
		p = end
	}
	switch {
	case lastBreak > 0:
		return lastBreak
	case p == len(s):
		return p
	case lastStart > i:
		return lastStart
	}
	return p
}

// StartsPiece reports whether a piece always starts at the beginning of s
// when s follows a line feed, in both encodings: s starts with a letter or a
// number. No alternative of either pattern runs from a line feed into a
// letter or a number (the optional leading character excludes \r and \n,
// punctuation takes only line feeds and '/' after it, white space stops at
// them), and the pieces before the line feed end there with or without the
// text after it. So the tokens of a + s, where a ends in '\n', are the
// tokens of a followed by those of s: Count(a+s) == Count(a)+Count(s). The
// plan package uses it to count a long prompt without re-counting the text
// it did not change.
func StartsPiece(s string) bool {
	if s == "" {
		return false
	}
	c, _ := classAt(s, 0)
	return c&(cL|cN) != 0
}

// EndsPiece reports whether a piece always ends at the end of s when s is
// followed by a line feed (or by nothing), in both encodings: s ends with a
// letter or a number. Letter and number pieces never take a line feed after
// them, and every piece before the last ends where it does without the line
// feed. So Count(s+b) == Count(s)+Count(b) when b starts with '\n'.
func EndsPiece(s string) bool {
	if s == "" {
		return false
	}
	_, size := utf8.DecodeLastRuneInString(s)
	c, _ := classAt(s, len(s)-size)
	return c&(cL|cN) != 0
}

// splitDeepSeek implements DeepSeek V3's pre-tokenizer, three splits in
// sequence, each isolating its matches and keeping the text between them
// as pieces, and each run over the pieces of the one before:
//
//  1. \p{N}{1,3}
//  2. [\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+
//  3. [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
//     | ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Step 3 sees each piece of steps 1 and 2 alone: a run of step 2's
// characters (which holds punctuation and symbols too, such as U+30FB) is
// split again and ends as the text does, as does the text between such
// runs and numbers; text that none of its alternatives matches is a piece
// of its own. A number of up to three digits is never split again.
func splitDeepSeek(s string, i int) int {
	c, n := classAt(s, i)
	if c&cN != 0 {
		p := i + n
		for k := 1; k < 3 && p < len(s); k++ {
			c, n := classAt(s, p)
			if c&cN == 0 {
				break
			}
			p += n
		}
		return p
	}
	cjk := deepSeekCJK(s, i)
	if end := deepSeekMatch(s, i, c, n, cjk); end > i {
		return end
	}
	// Text no alternative matches, up to where one does or the piece ends.
	p := i + n
	for !deepSeekStop(s, p, cjk) {
		c, n := classAt(s, p)
		if deepSeekMatch(s, p, c, n, cjk) > p {
			break
		}
		p += n
	}
	return p
}

// deepSeekCJK reports whether s[i] starts a character of step 2's class:
// all are three bytes, U+3040-U+30FF and U+4E00-U+9FA5.
func deepSeekCJK(s string, i int) bool {
	if i+2 >= len(s) {
		return false
	}
	r := rune(s[i]&0x0f)<<12 | rune(s[i+1]&0x3f)<<6 | rune(s[i+2]&0x3f)
	return s[i]&0xf0 == 0xe0 && s[i+1]&0xc0 == 0x80 && s[i+2]&0xc0 == 0x80 &&
		(r >= 0x3040 && r <= 0x30ff || r >= 0x4e00 && r <= 0x9fa5)
}

// deepSeekStop reports whether step 3's text ends at p: at the end of s, or
// where the piece of steps 1 and 2 it is in ends (cjk: a run of step 2's
// characters; else the text between them and numbers).
func deepSeekStop(s string, p int, cjk bool) bool {
	if p >= len(s) {
		return true
	}
	if cjk {
		return !deepSeekCJK(s, p)
	}
	c, _ := classAt(s, p)
	return c&cN != 0 || deepSeekCJK(s, p)
}

// deepSeekMatch is the end of step 3's match at s[i] (class c, n bytes) in
// a piece of kind cjk, or i when no alternative matches there.
func deepSeekMatch(s string, i int, c uint8, n int, cjk bool) int {
	b := s[i]
	// [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+ (never in a CJK run)
	if !cjk && b < utf8.RuneSelf && c&cP != 0 && i+1 < len(s) && (s[i+1]|0x20)-'a' < 26 {
		p := i + 2
		for p < len(s) && (s[p]|0x20)-'a' < 26 {
			p++
		}
		return p
	}
	// [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+: with the optional character, or
	// from s[i] (the same run when s[i] is a mark).
	if b != '\r' && b != '\n' && c&(cL|cP) == 0 && !deepSeekStop(s, i+n, cjk) {
		if c2, _ := classAt(s, i+n); c2&(cL|cM) != 0 {
			return deepSeekRun(s, i+n, cL|cM, cjk)
		}
	}
	if c&(cL|cM) != 0 {
		return deepSeekRun(s, i, cL|cM, cjk)
	}
	// ' ?[\p{P}\p{S}]+[\r\n]*
	p := i
	if b == ' ' && !deepSeekStop(s, i+1, cjk) {
		if c2, _ := classAt(s, i+1); c2&cP != 0 {
			p = i + 1
		}
	}
	if p > i || c&cP != 0 {
		p = deepSeekRun(s, p, cP, cjk)
		for !deepSeekStop(s, p, cjk) && (s[p] == '\r' || s[p] == '\n') {
			p++
		}
		return p
	}
	// \s*[\r\n]+|\s+(?!\S)|\s+, with the text ending at its stop. (No
	// white space is in a CJK run.)
	if c&cS != 0 {
		p := i
		for p < len(s) {
			c, n := classAt(s, p)
			if c&cS == 0 {
				break
			}
			p = repeatEnd(s, p, n)
		}
		if deepSeekStop(s, p, false) {
			return spaceEnd(s[:p], i)
		}
		return spaceEnd(s, i)
	}
	return i
}

// deepSeekRun is the end of the run of characters with any of bits from p,
// within step 3's text.
func deepSeekRun(s string, p int, bits uint8, cjk bool) int {
	for !deepSeekStop(s, p, cjk) {
		c, n := classAt(s, p)
		if c&bits == 0 {
			break
		}
		p = repeatEnd(s, p, n)
	}
	return p
}
