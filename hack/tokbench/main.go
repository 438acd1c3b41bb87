// Command tokbench counts the tokens of a file with promptops' encoder, to be
// timed as a whole process against hack/tokenfixtures/count.mjs (npm
// tiktoken) on the same file:
//
//	go run ./hack/tokencorpus -size 10000000 > /tmp/corpus10.txt
//	go build -o /tmp/tokbench ./hack/tokbench
//	time /tmp/tokbench -encoding o200k_base /tmp/corpus10.txt
//	time node hack/tokenfixtures/count.mjs o200k_base /tmp/corpus10.txt
//
// Like count.mjs it encodes the file in ~4 KB chunks cut at line ends (the
// size of a prompt section), uncached, and prints the total.
package main

import (
	"flag"
	"fmt"
	"os"
	"syscall"
	"time"
	"unsafe"

	"github.com/promptops/promptops/internal/tokens"
	"github.com/promptops/promptops/internal/tokens/corpus"
)

func main() {
	enc := flag.String("encoding", tokens.O200K, "encoding: cl100k_base or o200k_base")
	verbose := flag.Bool("v", false, "also print the time of loading the encoding and of counting")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: tokbench [-encoding name] file")
		os.Exit(2)
	}
	data, err := os.ReadFile(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	t0, c0 := time.Now(), cpu()
	e, err := tokens.Get(*enc)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	t1, c1 := time.Now(), cpu()
	n := 0
	// The file's bytes are the text, not a copy: they are never changed.
	text := unsafe.String(unsafe.SliceData(data), len(data))
	for _, c := range corpus.Chunks(text, 4096) {
		n += e.CountUncached(c)
	}
	fmt.Printf("%s: %d tokens, %d bytes\n", *enc, n, len(data))
	if *verbose {
		d, c2 := time.Since(t1), cpu()
		fmt.Printf("load %v (cpu %v), count %v (cpu %v, %.1f MB/s of cpu)\n",
			t1.Sub(t0), c1-c0, d, c2-c1, float64(len(data))/(c2-c1).Seconds()/1e6)
	}
}

// cpu is the process's user and system time so far.
func cpu() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
