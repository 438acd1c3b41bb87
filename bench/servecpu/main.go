// Command servecpu measures the CPU promptops serve spends per ordinary
// request, for two binaries side by side: an anchor and a change, run in
// alternated pairs in one sitting, so that the machine's drift between
// runs (larger than 10% on a shared VM) falls on both alike. Each run
// starts `promptops serve --plans-dir` on the rendered samples, warms it,
// sends N assemble requests of 8 KB of new runtime content, one at a time
// on one keep-alive connection, and reads the server's utime+stime from
// /proc around them.
//
//	go run ./bench/servecpu -anchor /tmp/promptops-before -change bin/promptops -pairs 7 -n 5000
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/promptops/promptops/bench/internal/loopback"
)

func main() {
	anchor := flag.String("anchor", "", "The binary to compare against.")
	change := flag.String("change", "bin/promptops", "The binary measured.")
	pairs := flag.Int("pairs", 7, "Alternated runs of each binary.")
	n := flag.Int("n", 5000, "Requests per run.")
	root := flag.String("root", ".", "The repository root (for config/samples).")
	flag.Parse()
	if err := run(*anchor, *change, *pairs, *n, *root); err != nil {
		fmt.Fprintln(os.Stderr, "servecpu:", err)
		os.Exit(1)
	}
}

func run(anchor, change string, pairs, n int, root string) error {
	if anchor == "" {
		return fmt.Errorf("-anchor is required")
	}
	plans, err := os.MkdirTemp("", "promptops-servecpu-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(plans)
	render := exec.Command(change, "render", "-f", filepath.Join(root, "config/samples/promptops_v1_prompttemplate_ssa.yaml"),
		"-f", filepath.Join(root, "config/samples/ssa-prompts-configmap.yaml"), "--out-dir", plans)
	if out, err := render.CombinedOutput(); err != nil {
		return fmt.Errorf("render: %v: %s", err, out)
	}
	cpu := map[string][]float64{}
	for i := 0; i < pairs; i++ {
		for _, bin := range []string{anchor, change} {
			us, err := measure(bin, plans, n)
			if err != nil {
				return fmt.Errorf("%s: %w", bin, err)
			}
			cpu[bin] = append(cpu[bin], us)
			fmt.Printf("pair %d  %-40s server CPU %.0f µs a request\n", i+1, bin, us)
		}
	}
	ma, mc := median(cpu[anchor]), median(cpu[change])
	fmt.Printf("median: anchor %.0f µs, change %.0f µs; change/anchor %.2f\n", ma, mc, mc/ma)
	return nil
}

// measure runs one server and returns its CPU microseconds per request.
func measure(bin, plans string, n int) (float64, error) {
	addr, err := loopback.FreeAddr()
	if err != nil {
		return 0, err
	}
	cmd := exec.Command(bin, "serve", "--plans-dir", plans, "--listen", addr)
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	url := "http://" + addr
	if err := loopback.WaitReady(url+"/readyz", 10*time.Second); err != nil {
		return 0, err
	}
	var content strings.Builder
	for content.Len() < 8<<10 {
		content.WriteString("变量 12：描述性统计，均值 45.2，标准差 12.8，四分位数 33/44/57，缺失 0。\n")
	}
	post := func(i int) error {
		body, _ := json.Marshal(map[string]any{"namespace": "default", "name": "ssa-pro", "intent": "analyze",
			"runtime": map[string]string{"data_context": strconv.Itoa(i) + content.String()}})
		r, err := http.Post(url+"/v1/assemble", "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
		if r.StatusCode != http.StatusOK {
			return fmt.Errorf("assemble answered %d", r.StatusCode)
		}
		return nil
	}
	for i := 0; i < 200; i++ { // warm: the encoder, the connection, the heap
		if err := post(-1 - i); err != nil {
			return 0, err
		}
	}
	before, err := loopback.ProcCPU(cmd.Process.Pid)
	if err != nil {
		return 0, err
	}
	for i := 0; i < n; i++ {
		if err := post(i); err != nil {
			return 0, err
		}
	}
	after, err := loopback.ProcCPU(cmd.Process.Pid)
	if err != nil {
		return 0, err
	}
	return float64((after - before).Microseconds()) / float64(n), nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
