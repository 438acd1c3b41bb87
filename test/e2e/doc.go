// Package e2e holds the end-to-end tests, which need the one-node cluster of
// make cluster and run with make e2e (go test -tags e2e ./test/e2e). Without
// the e2e build tag the package has no tests.
package e2e
