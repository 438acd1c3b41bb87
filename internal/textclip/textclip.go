// Package textclip shortens text for messages and prompts: by bytes, never
// inside a UTF-8 character, with a marker saying that something was cut.
package textclip

import "strings"

// Head returns s when it is at most n bytes long; otherwise its first n
// bytes, less a character cut in two, followed by more. The result may be
// longer than n by len(more).
func Head(s string, n int, more string) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:max(n, 0)], "") + more
}

// Fit returns s when it is at most n bytes long; otherwise as much of its
// start as fits in n bytes together with more, which ends it. The result
// is never longer than n bytes when len(more) <= n.
func Fit(s string, n int, more string) string {
	if len(s) <= n {
		return s
	}
	return Head(s, n-len(more), more)
}
