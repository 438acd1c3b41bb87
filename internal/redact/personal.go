package redact

import (
	"regexp"
	"strconv"
	"strings"
)

// Personal data, looked for only for the kinds a Config names. Each kind is
// a regular expression for the shape and, where the format has one, its
// checksum, so that order numbers and look-alikes are left alone.

type personalDetector struct {
	kind string
	// pre is a cheap test that text may hold one; nil means always.
	pre func(string) bool
	re  *regexp.Regexp
	// ok checks a match; nil accepts every match.
	ok func(string) bool
	// alone rejects a match that is one part of a longer run of digit
	// groups ("5500 0000 0000 0005 1", "DE89 3704 ...").
	alone bool
	// numeric says every match lies in a run of digits, capitals and
	// separators holding at least minDigits digits (numericRuns), so the
	// expression runs on those runs only, not on the prose around them.
	numeric bool
}

const minDigits = 6

func (d personalDetector) find(text string, fs []Finding) []Finding {
	if d.pre != nil && !d.pre(text) {
		return fs
	}
	if !d.numeric {
		return d.findIn(text, 0, len(text), fs)
	}
	for start := 0; start < len(text); {
		s, e := nextNumericRun(text, start)
		if s < 0 {
			break
		}
		fs = d.findIn(text, s, e, fs)
		start = e
	}
	return fs
}

func (d personalDetector) findIn(text string, from, to int, fs []Finding) []Finding {
	for _, m := range d.re.FindAllStringIndex(text[from:to], -1) {
		start, end := m[0]+from, m[1]+from
		if d.alone && !standsAlone(text, start, end) {
			continue
		}
		if d.ok == nil || d.ok(text[start:end]) {
			fs = append(fs, Finding{Kind: d.kind, Start: start, End: end, rank: 2})
		}
	}
	return fs
}

// nextNumericRun returns the next run of text from start made of digits,
// capital letters, spaces and "+().-/" that holds at least minDigits
// digits, with the parts of words it begins or ends inside taken off (so
// that \b means what it means in the whole text), or -1, -1.
func nextNumericRun(text string, start int) (int, int) {
	for i := start; i < len(text); {
		if !isNumericRunByte(text[i]) {
			i++
			continue
		}
		j, digits := i, 0
		for j < len(text) && isNumericRunByte(text[j]) {
			if isDigit(text[j]) {
				digits++
			}
			j++
		}
		s, e := i, j
		if s > 0 && isWordByte(text[s-1]) {
			for s < e && isWordByte(text[s]) {
				s++
			}
		}
		if e < len(text) && isWordByte(text[e]) {
			for e > s && isWordByte(text[e-1]) {
				e--
			}
		}
		if digits >= minDigits && s < e {
			return s, e
		}
		i = j
	}
	return -1, -1
}

func isNumericRunByte(c byte) bool {
	return isDigit(c) || 'A' <= c && c <= 'Z' || c == ' ' || c == '+' || c == '(' || c == ')' || c == '.' || c == '-' || c == '/'
}

func isWordByte(c byte) bool { return isAlnum(c) || c == '_' }

var personalDetectors = map[PersonalKind]personalDetector{
	Email: {
		kind: "email",
		pre:  func(s string) bool { return strings.IndexByte(s, '@') >= 0 },
		re:   regexp.MustCompile(`[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})*\.[A-Za-z]{2,24}\b`),
	},
	// Phone: an international number (+ and 8 to 15 digits, in groups), a
	// North American one written (415) 555-0132 or 415-555-0132, or a
	// national one with a trunk 0 and separators (030 1234 5678, 07700
	// 900123). A bare run of digits is not a phone number here: it is as
	// likely an order number.
	Phone: {
		kind:    "phone",
		pre:     hasDigit,
		numeric: true,
		re: regexp.MustCompile(`(?:\+\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{1,4}(?:[ .-]?\d{2,4}){1,4}\b` +
			`|(?:\(\d{3}\)\s?|\b\d{3}[.-])\d{3}[.-]\d{4}\b` +
			`|\b0\d{2,4}[ /-]\d{3,4}[ -]?\d{3,4}\b)`),
		ok:    func(s string) bool { n := countDigits(s); return n >= 8 && n <= 15 },
		alone: true,
	},
	// PaymentCard: 13 to 19 digits, in groups of any separator of one space
	// or dash, starting 2 to 6 (the networks' ranges), passing Luhn's check.
	PaymentCard: {
		kind:  "payment-card",
		pre:   hasDigit,
		re:    regexp.MustCompile(`\b[2-6]\d{3}(?:[ -]?\d){9,15}\b`),
		ok:    luhn,
		alone: true,
	},
	// IBAN: country, two check digits and 11 to 30 letters or digits, in
	// groups of four or not, whose ISO 7064 mod-97 remainder is 1.
	IBAN: {
		kind:    "iban",
		pre:     hasDigit,
		numeric: true,
		re:      regexp.MustCompile(`\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b`),
		ok:      ibanValid,
	},
	// NationalID: a US social security number ddd-dd-dddd outside the
	// ranges never issued (area 000, 666 and 900-999, group 00, serial
	// 0000), and a UK National Insurance number (two letters, six digits,
	// A to D) outside the prefixes never issued.
	NationalID: {
		kind:    "national-id",
		pre:     hasDigit,
		numeric: true,
		re:      regexp.MustCompile(`\b\d{3}-\d{2}-\d{4}\b|\b[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z] ?\d{2} ?\d{2} ?\d{2} ?[A-D]\b`),
		ok:      nationalIDValid,
	},
}

// standsAlone reports whether text[start:end] is neither preceded by a word
// holding a digit nor followed by one starting with a digit, across one
// space, dash, dot or slash.
func standsAlone(text string, start, end int) bool {
	if start >= 2 && isSep(text[start-1]) {
		i := start - 2
		for i >= 0 && isAlnum(text[i]) {
			if isDigit(text[i]) {
				return false
			}
			i--
		}
	}
	if end+1 < len(text) && isSep(text[end]) && isDigit(text[end+1]) {
		return false
	}
	return true
}

func isSep(c byte) bool   { return c == ' ' || c == '-' || c == '.' || c == '/' }
func isDigit(c byte) bool { return '0' <= c && c <= '9' }
func isAlnum(c byte) bool { return isDigit(c) || 'a' <= c|0x20 && c|0x20 <= 'z' }

func hasDigit(s string) bool { return strings.ContainsAny(s, "0123456789") }

func countDigits(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if '0' <= s[i] && s[i] <= '9' {
			n++
		}
	}
	return n
}

// luhn reports whether the digits of s pass the Luhn check.
func luhn(s string) bool {
	sum, n, double := 0, 0, false
	for i := len(s) - 1; i >= 0; i-- {
		c := s[i]
		if c < '0' || c > '9' {
			continue
		}
		d := int(c - '0')
		if double {
			d *= 2
			if d > 9 {
				d -= 9
			}
		}
		sum += d
		double = !double
		n++
	}
	return n >= 13 && n <= 19 && sum%10 == 0
}

// ibanValid reports whether s, spaces removed, is 15 to 34 characters whose
// rearranged digits leave 1 modulo 97.
func ibanValid(s string) bool {
	s = strings.ReplaceAll(s, " ", "")
	if len(s) < 15 || len(s) > 34 {
		return false
	}
	var digits strings.Builder
	for _, c := range s[4:] + s[:4] {
		switch {
		case '0' <= c && c <= '9':
			digits.WriteRune(c)
		case 'A' <= c && c <= 'Z':
			digits.WriteString(strconv.Itoa(int(c-'A') + 10))
		default:
			return false
		}
	}
	// mod 97 digit by digit, so no big number is needed
	rem := 0
	for _, c := range digits.String() {
		rem = (rem*10 + int(c-'0')) % 97
	}
	return rem == 1
}

func nationalIDValid(s string) bool {
	if len(s) == 11 && s[3] == '-' && s[6] == '-' {
		area, group, serial := s[:3], s[4:6], s[7:]
		return area != "000" && area != "666" && area[0] != '9' && group != "00" && serial != "0000"
	}
	prefix := s[:2]
	switch prefix {
	case "BG", "GB", "NK", "KN", "TN", "NT", "ZZ":
		return false
	}
	return true
}
