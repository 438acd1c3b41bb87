// Command tokencorpus prints the benchmark corpus (about 1 MB, or -size
// bytes), for the Node reference benchmark in hack/tokenfixtures/bench.mjs
// and the whole-process comparison with hack/tokbench.
package main

import (
	"flag"
	"fmt"

	"github.com/promptops/promptops/internal/tokens/corpus"
)

func main() {
	size := flag.Int("size", 1<<20, "approximate size of the corpus in bytes")
	flag.Parse()
	fmt.Print(corpus.Generate(*size))
}
