// Command standin serves what the cluster demo's MemoryBank needs on this
// machine, where the cluster's pods reach it: a throwaway PostgreSQL
// (internal/pgtest) and, unless -no-model, the scripted OpenAI-compatible
// model of the tests (internal/llmtest, one observation per fact). It
// prints "dsn=..." and "model=..." lines, then runs until SIGINT/SIGTERM and
// removes the database's files.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/promptops/promptops/internal/llmtest"
	"github.com/promptops/promptops/internal/pgtest"
)

func main() {
	host := flag.String("host", "", "address to listen on (HOST_IP of bin/cluster/env)")
	allow := flag.String("allow", "", "CIDR PostgreSQL trusts (the pod network)")
	noModel := flag.Bool("no-model", false, "do not start the stand-in model")
	flag.Parse()
	if *host == "" || *allow == "" {
		fmt.Fprintln(os.Stderr, "usage: standin -host HOST_IP -allow POD_CIDR [-no-model]")
		os.Exit(2)
	}
	pg, err := pgtest.StartAt(*host, *allow)
	if err != nil {
		fmt.Fprintln(os.Stderr, "standin: PostgreSQL:", err)
		os.Exit(1)
	}
	defer pg.Stop()
	fmt.Println("dsn=" + pg.DSN("postgres"))
	if !*noModel {
		srv, err := llmtest.NewAt(llmtest.OnePerFact, *host+":0")
		if err != nil {
			fmt.Fprintln(os.Stderr, "standin: model:", err)
			return
		}
		defer srv.Close()
		fmt.Println("model=" + srv.BaseURL())
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	<-sigs
}
