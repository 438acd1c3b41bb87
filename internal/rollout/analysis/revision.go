package analysis

import (
	"regexp"
	"strconv"
	"unicode/utf8"
)

// placeholder is {{revision}}, with spaces inside the braces allowed as Go
// templates and Argo Rollouts' arguments allow them.
var placeholder = regexp.MustCompile(`\{\{\s*revision\s*\}\}`)

// substitute puts the revision into every placeholder of query as a
// double-quoted PromQL string: PromQL's string literals follow Go's
// escapes, so strconv.Quote is the escaper. A placeholder inside quotes
// would be quoted twice and is refused with the way to write it.
func substitute(query, revision string) (string, error) {
	spots := placeholder.FindAllStringIndex(query, -1)
	if len(spots) == 0 {
		return query, nil
	}
	if revision == "" {
		return "", invalid("the query names {{revision}} but no revision is under test")
	}
	if !utf8.ValidString(revision) {
		return "", invalid("the revision under test is not valid UTF-8")
	}
	for _, s := range spots {
		if s[0] > 0 {
			switch query[s[0]-1] {
			case '"', '\'', '`':
				return "", invalid("the query writes {{revision}} inside quotes; it becomes a quoted string itself, so write revision={{revision}}")
			}
		}
	}
	return placeholder.ReplaceAllLiteralString(query, strconv.Quote(revision)), nil
}
