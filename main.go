// Command promptops is the promptops operator and its tools, one binary with
// several verbs so that the consolidation Job runs the operator's own image.
package main

import (
	"os"

	"github.com/promptops/promptops/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
