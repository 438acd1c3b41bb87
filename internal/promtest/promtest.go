// Package promtest runs a real Prometheus server (bin/prometheus, built by
// make prometheus from its Go module) for tests that query one.
package promtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/promptops/promptops/internal/testenv"
)

// Job is the job label of every target Start scrapes.
const Job = "promtest"

// startTimeout bounds how long Start waits for the server to be ready: a
// loaded two-core CI machine, not the server, sets it.
const startTimeout = 60 * time.Second

// Binary is the Prometheus server the tests run: $PROMPTOPS_PROMETHEUS,
// else bin/prometheus of the repository. It fails with a message saying
// how to build it when it is missing, so that a test run never silently
// skips.
func Binary() (string, error) {
	bin := os.Getenv("PROMPTOPS_PROMETHEUS")
	if bin == "" {
		bin = filepath.Join(testenv.Root(), "bin", "prometheus")
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("no Prometheus server at %s: run 'make prometheus' (builds it from its Go module) or set PROMPTOPS_PROMETHEUS", bin)
	}
	return bin, nil
}

// config is the server's configuration: every target scraped every second
// under one job, and rules (none yet) evaluated as often, so a value a
// test sets is queryable within a couple of seconds.
func config(targets []string) string {
	var b strings.Builder
	b.WriteString("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n")
	if len(targets) == 0 {
		return b.String()
	}
	fmt.Fprintf(&b, "scrape_configs:\n  - job_name: %s\n    static_configs:\n      - targets:\n", Job)
	for _, t := range targets {
		fmt.Fprintf(&b, "          - %q\n", t)
	}
	return b.String()
}

// Start starts a Prometheus server on a free loopback port, scraping
// /metrics of each target (host:port) every second under the job Job, with
// its data in a temporary directory, and returns its base URL
// (http://127.0.0.1:PORT). The server stops when the test ends; its log
// is printed when the test failed.
func Start(t testing.TB, targets ...string) string {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(config(targets)), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	logs := &syncBuffer{}
	cmd := exec.Command(bin,
		"--config.file="+cfg,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn",
	)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	// Registered after t.TempDir, so it runs before the directory goes.
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("prometheus log:\n%s", logs.String())
		}
	})

	base := "http://" + addr
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		select {
		case <-exited:
			return false, errors.New("prometheus exited")
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/-/ready", nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("prometheus was not ready on %s: %v\n%s", addr, err, logs.String())
	}
	return base
}

// WaitFor polls the server at base until query answers with at least one
// sample, and returns that answer; it fails the test after a minute. Tests
// use it to wait for a scrape instead of sleeping.
func WaitFor(t testing.TB, base, query string) model.Vector {
	t.Helper()
	client, err := api.NewClient(api.Config{Address: base})
	if err != nil {
		t.Fatal(err)
	}
	prom := promv1.NewAPI(client)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	var got model.Vector
	var last error
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		v, _, err := prom.Query(ctx, query, time.Time{})
		if err != nil {
			last = err
			return false, nil
		}
		vec, ok := v.(model.Vector)
		if !ok {
			return false, fmt.Errorf("%s answers a %s, not a vector", query, v.Type())
		}
		got = vec
		return len(vec) > 0, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s on %s: %v (last error: %v)", query, base, err, last)
	}
	return got
}

// syncBuffer is the server's output, written by the process's copier
// goroutines and read by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
