package promptfit

import (
	"cmp"
	"slices"
)

// part is one section while an assembly is being cut.
type part struct {
	name, heading, body string
	kind                Kind
	cuttable            bool
	priority, minTokens int
	// tokens is the count of body and original that of the body before
	// any cut; -1 while not yet counted (Assemble counts lazily).
	tokens, original int
	// ver is bumped whenever body changes: the counts remembered for the
	// joins (see counts.total) name the bodies by index and ver.
	ver int
	// Once split is set, f and l are the first and last split points of
	// body (see nextSplit), f = -1 when it has none; mid is the count of
	// body[f:l], -1 until counted.
	split  bool
	f, l   int
	mid    int
	cutNow bool // cut at least once
	// shrink cuts a section that is not cut by the encoder's Truncate
	// (Section.Shrink): a memory section, by whole items.
	shrink func(target int) (string, int, error)
}

// cutter is what cut needs: the parts' counts, the prompt's total, and a
// way to replace a body by its cut.
type cutter interface {
	tokensOf(p *part) (int, error)
	total() (int, error)
	truncate(p *part, target int) error
}

// cutOrder lists the parts keep takes in the order they are cut: highest
// priority first, later sections first on a tie.
func cutOrder(parts []part, keep func(p *part) bool) []int {
	order := make([]int, 0, len(parts))
	for i := range parts {
		if keep(&parts[i]) {
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(parts[b].priority, parts[a].priority), cmp.Compare(b, a))
	})
	return order
}

// cut shrinks cuttable parts, in cutOrder, each down to its minimum, until
// the total fits limit. It returns the names of the parts cut, in order, and
// the total after the cuts. t is the total before; a total within limit cuts
// nothing and orders nothing.
func cut(c cutter, parts []part, limit, t int) ([]string, int, error) {
	var cutNames []string
	var order []int
	for k := 0; t > limit; {
		if order == nil {
			order = cutOrder(parts, func(p *part) bool { return p.cuttable })
		}
		if k == len(order) {
			break
		}
		p := &parts[order[k]]
		n, err := c.tokensOf(p)
		if err != nil {
			return nil, 0, err
		}
		if n <= p.minTokens {
			k++ // at its minimum: the next part
			continue
		}
		// t > limit: the target is below n (the 1 only guards that).
		if err := c.truncate(p, max(p.minTokens, n-max(t-limit, 1))); err != nil {
			return nil, 0, err
		}
		if len(cutNames) == 0 || cutNames[len(cutNames)-1] != p.name {
			cutNames = append(cutNames, p.name)
		}
		if t, err = c.total(); err != nil {
			return nil, 0, err
		}
	}
	return cutNames, t, nil
}

// dropMemorySections empties memory sections, in the order of the cut, while the
// prompt is over budget after the cut: memory never keeps a prompt over
// budget, whatever its minTokens.
func dropMemorySections(c cutter, parts []part, limit, t int, cutNames []string) ([]string, int, error) {
	order := cutOrder(parts, func(p *part) bool { return p.kind == Memory && p.body != "" })
	for _, i := range order {
		if t <= limit {
			break
		}
		p := &parts[i]
		if err := c.truncate(p, 0); err != nil {
			return nil, 0, err
		}
		if !slices.Contains(cutNames, p.name) {
			cutNames = append(cutNames, p.name)
		}
		var err error
		if t, err = c.total(); err != nil {
			return nil, 0, err
		}
	}
	return cutNames, t, nil
}
