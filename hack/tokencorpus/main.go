// Command tokencorpus prints the benchmark corpus (about 1 MB), for the Node
// reference benchmark in hack/tokenfixtures/bench.mjs.
package main

import (
	"fmt"

	"github.com/promptops/promptops/internal/tokens/corpus"
)

func main() { fmt.Print(corpus.Generate(1 << 20)) }
