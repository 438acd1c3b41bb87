// Package readmetest runs the README's checked code blocks, those marked
// <!-- readme-check -->, and compares their output with the one documented.
package readmetest

import (
	"bufio"
	"fmt"
	"regexp"
	"strings"
)

// Marker is the HTML comment that marks the next ```sh block as checked.
const Marker = "<!-- readme-check -->"

// Chunk is commands of a checked block and the output documented after
// them: the whole-line comments that follow a command are its output.
type Chunk struct {
	Line     int // README line of the first command
	Commands string
	Expected []string
}

// Parse returns the chunks of the checked blocks, in README order.
func Parse(readme string) ([]Chunk, error) {
	var chunks []Chunk
	sc := bufio.NewScanner(strings.NewReader(readme))
	n, marked, inBlock := 0, false, false
	var cur *Chunk
	flush := func() {
		if cur != nil && strings.TrimSpace(cur.Commands) != "" {
			chunks = append(chunks, *cur)
		}
		cur = nil
	}
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case !inBlock && strings.TrimSpace(line) == Marker:
			marked = true
		case !inBlock && marked && strings.TrimSpace(line) == "":
		case !inBlock && marked:
			if strings.TrimSpace(line) != "```sh" {
				return nil, fmt.Errorf("README line %d: %s is not followed by a ```sh block", n, Marker)
			}
			inBlock, marked = true, false
		case inBlock && strings.TrimSpace(line) == "```":
			flush()
			inBlock = false
		case inBlock && strings.HasPrefix(line, "#"):
			if cur == nil || strings.TrimSpace(cur.Commands) == "" {
				return nil, fmt.Errorf("README line %d: documented output without a command before it", n)
			}
			cur.Expected = append(cur.Expected, strings.TrimPrefix(strings.TrimPrefix(line, "#"), " "))
		case inBlock:
			if cur != nil && len(cur.Expected) > 0 {
				flush()
			}
			if cur == nil {
				cur = &Chunk{Line: n}
			}
			cur.Commands += line + "\n"
		}
	}
	if inBlock {
		return nil, fmt.Errorf("README ends inside a checked block")
	}
	return chunks, sc.Err()
}

// Match reports the first documented line that the output does not have.
// The documented lines must appear in order, each matching a whole output
// line (trailing spaces aside); "…" stands for any text.
func Match(expected []string, output string) error {
	lines := strings.Split(output, "\n")
	i := 0
	for _, e := range expected {
		re := pattern(e)
		for ; i < len(lines); i++ {
			if re.MatchString(strings.TrimRight(lines[i], " \t\r")) {
				break
			}
		}
		if i == len(lines) {
			return fmt.Errorf("documented output %q not found (in order)", e)
		}
		i++
	}
	return nil
}

func pattern(e string) *regexp.Regexp {
	parts := strings.Split(strings.TrimRight(e, " \t"), "…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
}
