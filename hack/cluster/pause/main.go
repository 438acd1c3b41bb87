// Command pause is the sandbox (pod infrastructure) process of the
// one-node cluster of make cluster: it holds the pod's namespaces, reaps
// orphaned children, and exits on SIGINT or SIGTERM. The machines it runs on
// have no registry, so hack/cluster.sh builds it into an image with ko.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
