//go:build e2e

// Package e2e runs the operator on the real one-node cluster of make
// cluster: the Jobs' pods actually run. make e2e sets KUBECONFIG, HOST_IP
// (where pods reach this machine) and KUBECTL from bin/cluster/env. The
// tests start PostgreSQL and the scripted model (internal/llmtest) on this
// machine at HOST_IP.
package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/cli"
	"github.com/promptops/promptops/internal/llmtest"
	"github.com/promptops/promptops/internal/pgtest"
)

var (
	hostIP  = os.Getenv("HOST_IP")
	kubectl = os.Getenv("KUBECTL")
	podCIDR = envOr("POD_CIDR", "10.244.77.0/24")
	opNS    = envOr("OPERATOR_NAMESPACE", "promptops-system")
	root    = func() string { wd, _ := os.Getwd(); return filepath.Join(wd, "..", "..") }()
)

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func TestMain(m *testing.M) {
	if os.Getenv("KUBECONFIG") == "" || hostIP == "" {
		fmt.Fprintln(os.Stderr, "e2e: KUBECONFIG and HOST_IP are not set: run make cluster, then make e2e")
		os.Exit(1)
	}
	if kubectl == "" {
		kubectl = "kubectl"
	}
	code := m.Run()
	if pg != nil {
		pg.Stop()
	}
	os.Exit(code)
}

// k runs kubectl and returns its combined output.
func k(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(kubectl, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustK(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, err := k(t, stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// eventually retries f every second until it returns "" or the timeout
// passes, then fails with f's last message.
func eventually(t *testing.T, timeout time.Duration, f func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		msg := f()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", timeout, msg)
		}
		time.Sleep(time.Second)
	}
}

var nsSeq atomic.Int64

// namespace creates a namespace enforcing the Restricted Pod Security
// Standard (every pod the operator creates must be admitted) and deletes it
// when the test ends.
func namespace(t *testing.T) string {
	t.Helper()
	ns := fmt.Sprintf("e2e-%s-%d-%d", strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")), time.Now().Unix()%100000, nsSeq.Add(1))
	if len(ns) > 63 {
		ns = ns[len(ns)-63:]
		ns = strings.TrimLeft(ns, "-")
	}
	mustK(t, fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %s
  labels:
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/enforce-version: latest
    pod-security.kubernetes.io/warn: restricted
`, ns), "apply", "-f", "-")
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := k(t, "", "get", "all,mb,pt,events", "-n", ns)
			t.Logf("namespace %s at failure:\n%s", ns, out)
		}
		_, _ = k(t, "", "delete", "namespace", ns, "--wait=false")
	})
	return ns
}

func jsonpath(t *testing.T, ns, obj, path string) string {
	t.Helper()
	out, err := k(t, "", "get", "-n", ns, obj, "-o", "jsonpath="+path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

func promptops(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := cli.Main(args, strings.NewReader(""), &stdout, &stderr); code != 0 {
		t.Fatalf("promptops %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
	}
	return stdout.String()
}

const facts = `{"id": "00000000-0000-4000-8000-000000000001", "text": "Alice works at Acme Corp", "entities": ["Alice"]}
{"id": "00000000-0000-4000-8000-000000000002", "text": "Bob has a dog named Rex", "entities": ["Bob"]}
{"id": "00000000-0000-4000-8000-000000000003", "text": "Carol moved to Lisbon", "entities": ["Carol"]}
`

func importFacts(t *testing.T, bank, store string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "facts.jsonl")
	if err := os.WriteFile(f, []byte(facts), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := promptops(t, "facts", "import", "--bank", bank, "--store", store, f); !strings.Contains(out, "imported 3 facts") {
		t.Fatalf("facts import: %s", out)
	}
}

func observations(t *testing.T, bank, store string) int {
	t.Helper()
	out := promptops(t, "observations", "list", "--bank", bank, "--store", store, "-o", "json")
	var obs []map[string]any
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("observations list -o json: %v\n%s", err, out)
		}
		switch x := v.(type) {
		case []any:
			for _, o := range x {
				if m, ok := o.(map[string]any); ok {
					obs = append(obs, m)
				}
			}
		case map[string]any:
			obs = append(obs, x)
		}
	}
	return len(obs)
}

var pg *pgtest.Server

// postgres starts (once; TestMain stops it) a PostgreSQL on HOST_IP that
// trusts the pods, and returns the DSN of a new database.
func postgres(t *testing.T) string {
	t.Helper()
	if pg == nil {
		var err error
		if pg, err = pgtest.StartAt(hostIP, podCIDR); err != nil {
			t.Fatalf("PostgreSQL at %s: %v", hostIP, err)
		}
	}
	dsn, err := pg.NewDatabase(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

// model starts the scripted model on HOST_IP.
func model(t *testing.T, script llmtest.Script) *llmtest.Server {
	t.Helper()
	srv, err := llmtest.NewAt(script, hostIP+":0")
	if err != nil {
		t.Fatalf("the stand-in model at %s: %v", hostIP, err)
	}
	t.Cleanup(srv.Close)
	return srv
}

func requestRun(t *testing.T, ns, bank string) {
	t.Helper()
	mustK(t, "", "annotate", "-n", ns, "mb/"+bank, "--overwrite",
		"promptops.io/consolidate-requested-at="+time.Now().UTC().Format(time.RFC3339Nano))
}

func waitLastRun(t *testing.T, ns, bank string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, func() string {
		if ok := jsonpath(t, ns, "mb/"+bank, "{.status.lastRun.succeeded}"); ok != "true" {
			return fmt.Sprintf("mb/%s has no successful lastRun: %s", bank, jsonpath(t, ns, "mb/"+bank, "{.status}"))
		}
		return ""
	})
}

func TestNodeAndOperator(t *testing.T) {
	out := mustK(t, "", "get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
	if lines := strings.Fields(strings.TrimSpace(out)); len(lines) != 2 || lines[1] != "True" {
		t.Fatalf("want one Ready node, got %q", out)
	}
	img := mustK(t, "", "get", "pods", "-n", opNS, "-l", "app.kubernetes.io/component=manager",
		"-o", `jsonpath={range .items[*]}{.status.phase} {.spec.containers[0].image}{"\n"}{end}`)
	if !strings.Contains(img, "Running "+os.Getenv("OPERATOR_IMAGE")) {
		t.Fatalf("the operator is not Running from the local image: %q", img)
	}
}

func TestSamples(t *testing.T) {
	ns := namespace(t)
	samples := mustK(t, "", "kustomize", filepath.Join(root, "config/samples"))
	mustK(t, samples, "apply", "-n", ns, "-f", "-")
	mustK(t, "", "wait", "-n", ns, "--for=condition=Ready", "--timeout=120s", "pt/ssa-pro", "pt/support-assistant")
	mustK(t, "", "wait", "-n", ns, "--for=condition=BudgetExceeded", "--timeout=60s", "pt/over-budget-demo")

	t.Run("webhook warns at apply", func(t *testing.T) {
		eventually(t, 60*time.Second, func() string {
			out, _ := k(t, "", "apply", "-n", ns, "--dry-run=server", "-f", filepath.Join(root, "config/samples/promptops_v1_prompttemplate_overbudget.yaml"))
			if !strings.Contains(out, "Warning: intent chat needs ") {
				return "no budget warning from the webhook: " + out
			}
			return ""
		})
	})

	t.Run("garbage collector removes a deleted template's ConfigMaps", func(t *testing.T) {
		mustK(t, "", "get", "-n", ns, "configmap", "ssa-pro-prompts")
		mustK(t, "", "delete", "-n", ns, "pt/ssa-pro")
		eventually(t, 60*time.Second, func() string {
			if out, err := k(t, "", "get", "-n", ns, "configmap", "ssa-pro-prompts"); err == nil {
				return "configmap ssa-pro-prompts still there: " + out
			}
			return ""
		})
	})
}

func bankYAML(name, store, baseURL string) string {
	return fmt.Sprintf(`apiVersion: promptops.io/v1
kind: MemoryBank
metadata:
  name: %s
spec:
  store:
%s
  llm:
    baseURL: %s
    model: stand-in
    timeoutSeconds: 10
  consolidation:
    backoffLimit: 0
`, name, store, baseURL)
}

func pgBank(t *testing.T, ns, name, dsn, baseURL string) {
	t.Helper()
	mustK(t, "", "create", "secret", "generic", name+"-pg", "-n", ns, "--from-literal=dsn="+dsn)
	mustK(t, bankYAML(name, fmt.Sprintf("    postgres: {dsnSecretRef: {name: %s-pg, key: dsn}}", name), baseURL), "apply", "-n", ns, "-f", "-")
}

func TestConsolidationPostgres(t *testing.T) {
	ns := namespace(t)
	dsn := postgres(t)
	srv := model(t, llmtest.OnePerFact)
	importFacts(t, ns+"/pg", dsn)
	pgBank(t, ns, "pg", dsn, srv.BaseURL())
	requestRun(t, ns, "pg")
	waitLastRun(t, ns, "pg", 3*time.Minute)
	if n := jsonpath(t, ns, "mb/pg", "{.status.lastRun.factsConsolidated}"); n != "3" {
		t.Errorf("lastRun.factsConsolidated = %q, want 3", n)
	}
	if n := observations(t, ns+"/pg", dsn); n != 3 {
		t.Errorf("the store holds %d observations, want 3", n)
	}
	if len(srv.Requests()) == 0 {
		t.Errorf("the model received no request")
	}
	logs, _ := k(t, "", "logs", "-n", ns, "-l", "promptops.io/memorybank=pg", "--tail=5")
	t.Logf("the Job's pod:\n%s", logs)
}

func TestConsolidationSQLiteOnPersistentVolume(t *testing.T) {
	ns := namespace(t)
	dir, err := os.MkdirTemp("", "promptops-e2e-pv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	// The Job runs as 65532 with fsGroup 65532; a hostPath volume ignores
	// fsGroup, so the directory and file are the Job's.
	_ = os.Chown(dir, 65532, 65532)
	_ = os.Chmod(dir, 0o775)
	store := "sqlite://" + filepath.Join(dir, "bank.db")
	importFacts(t, ns+"/lite", store)
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		_ = os.Chown(filepath.Join(dir, e.Name()), 65532, 65532)
	}
	pv := ns + "-pv"
	mustK(t, fmt.Sprintf(`apiVersion: v1
kind: PersistentVolume
metadata: {name: %s}
spec:
  capacity: {storage: 64Mi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  claimRef: {namespace: %s, name: lite-data}
  hostPath: {path: %s, type: Directory}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: lite-data, namespace: %s}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  volumeName: %s
  resources: {requests: {storage: 64Mi}}
`, pv, ns, dir, ns, pv), "apply", "-f", "-")
	t.Cleanup(func() { _, _ = k(t, "", "delete", "pv", pv, "--wait=false") })
	srv := model(t, llmtest.OnePerFact)
	mustK(t, bankYAML("lite", "    sqlite: {path: /data/bank.db, persistentVolumeClaimName: lite-data}", srv.BaseURL()), "apply", "-n", ns, "-f", "-")
	requestRun(t, ns, "lite")
	waitLastRun(t, ns, "lite", 3*time.Minute)
	if n := observations(t, ns+"/lite", store); n != 3 {
		t.Errorf("the store holds %d observations, want 3", n)
	}
}

func TestUnreachableModel(t *testing.T) {
	ns := namespace(t)
	dsn := postgres(t)
	importFacts(t, ns+"/nomodel", dsn)
	// Port 9 (discard) on this machine: nothing listens, the connection is refused.
	pgBank(t, ns, "nomodel", dsn, "http://"+hostIP+":9/v1")
	requestRun(t, ns, "nomodel")
	eventually(t, 3*time.Minute, func() string {
		st := jsonpath(t, ns, "mb/nomodel", `{.status.conditions[?(@.type=="LastRunFailed")].status}`)
		if st != "True" {
			return "mb/nomodel is not LastRunFailed: " + jsonpath(t, ns, "mb/nomodel", "{.status.conditions}")
		}
		return ""
	})
	msg := jsonpath(t, ns, "mb/nomodel", `{.status.conditions[?(@.type=="LastRunFailed")].reason}: {.status.conditions[?(@.type=="LastRunFailed")].message}`)
	t.Logf("LastRunFailed: %s", msg)
	if !strings.Contains(msg, "refused") && !strings.Contains(strings.ToLower(msg), "llm") && !strings.Contains(msg, hostIP) {
		t.Errorf("the failure does not say why: %s", msg)
	}
}

// runInFlight starts a run of a new PostgreSQL bank in ns whose model
// answers each call after 5 s, and returns once the Job's pod has called
// it: the run is in flight. It returns the model and the database.
func runInFlight(t *testing.T, ns, bank string) (*llmtest.Server, string) {
	t.Helper()
	dsn := postgres(t)
	slow := func(n int, req llmtest.Request) llmtest.Reply {
		r := llmtest.OnePerFact(n, req)
		r.Delay = 5 * time.Second
		return r
	}
	srv := model(t, slow)
	importFacts(t, ns+"/"+bank, dsn)
	pgBank(t, ns, bank, dsn, srv.BaseURL())
	requestRun(t, ns, bank)
	eventually(t, 2*time.Minute, func() string {
		if len(srv.Requests()) == 0 {
			return "the Job's pod has not called the model yet"
		}
		return ""
	})
	return srv, dsn
}

func TestManagerKilledDuringRun(t *testing.T) {
	ns := namespace(t)
	runInFlight(t, ns, "killed")
	mustK(t, "", "delete", "pod", "-n", opNS, "-l", "app.kubernetes.io/component=manager", "--grace-period=0", "--force")
	deploy := strings.TrimSpace(mustK(t, "", "get", "deployment", "-n", opNS, "-l", "app.kubernetes.io/component=manager", "-o", "name"))
	mustK(t, "", "rollout", "status", "-n", opNS, deploy, "--timeout=120s")
	waitLastRun(t, ns, "killed", 3*time.Minute)
	// The new manager adopts the running Job and starts no second one: a
	// reconcile it has handled since (the force-reconcile annotation, whose
	// value it echoes in status) is the moment to count them.
	probe := time.Now().Format(time.RFC3339Nano)
	mustK(t, "", "annotate", "-n", ns, "--overwrite", "mb/killed", "promptops.io/reconcile-requested-at="+probe)
	eventually(t, time.Minute, func() string {
		if got, _ := k(t, "", "get", "-n", ns, "mb/killed", "-o", "jsonpath={.status.lastHandledReconcileAt}"); got != probe {
			return "the manager has not handled the probe reconcile yet (" + got + ")"
		}
		return ""
	})
	jobs := mustK(t, "", "get", "jobs", "-n", ns, "-l", "promptops.io/memorybank=killed", "-o", "name")
	if n := len(strings.Fields(jobs)); n != 1 {
		t.Fatalf("%d Jobs after the manager was killed mid-run, want 1:\n%s", n, jobs)
	}
}

// TestServeSidecar runs config/samples/serve/sidecar.yaml with the local
// image as the sidecar (and the pause image as the application) and asks
// the sidecar for a prompt through a port-forward to the pod's loopback.
func TestServeSidecar(t *testing.T) {
	ns := namespace(t)
	for _, f := range []string{"ssa-prompts-configmap.yaml", "promptops_v1_prompttemplate_ssa.yaml"} {
		mustK(t, "", "apply", "-n", ns, "-f", filepath.Join(root, "config/samples", f))
	}
	mustK(t, "", "wait", "-n", ns, "--for=condition=Ready", "--timeout=120s", "pt/ssa-pro")
	b, err := os.ReadFile(filepath.Join(root, "config/samples/serve/sidecar.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The sample names the image make cluster imported: never pulled.
	manifest := strings.Replace(string(b), "image: "+strings.TrimPrefix(os.Getenv("OPERATOR_IMAGE"), "docker.io/"), "image: "+os.Getenv("OPERATOR_IMAGE")+"\n        imagePullPolicy: Never", 1)
	if manifest == string(b) {
		t.Fatalf("the sidecar sample does not name the image %s", os.Getenv("OPERATOR_IMAGE"))
	}
	manifest = strings.Replace(manifest, "image: ssa-app:latest", "image: docker.io/promptops/pause:v1\n        imagePullPolicy: Never", 1)
	mustK(t, manifest, "apply", "-n", ns, "-f", "-")
	mustK(t, "", "rollout", "status", "-n", ns, "deployment/ssa-app", "--timeout=120s")

	// The sidecar has no probe (it listens on the pod's loopback), so the
	// first connections can find nothing listening yet; kubectl
	// port-forward exits on such an error, and is started again.
	var pf *forward
	t.Cleanup(func() {
		if pf != nil {
			pf.stop()
		}
	})
	body := `{"namespace": "` + ns + `", "name": "ssa-pro", "intent": "analyze", "runtime": {"data_context": "200 rows, 12 variables.", "tool_outputs": "mean 45.2"}}`
	var got struct {
		Prompt string `json:"prompt"`
		Tokens int    `json:"tokens"`
	}
	eventually(t, 60*time.Second, func() string {
		if pf == nil || pf.exited() {
			if pf != nil {
				pf.stop()
			}
			var err error
			if pf, err = portForward(ns, "deployment/ssa-app", 8089); err != nil {
				pf = nil
				return err.Error()
			}
		}
		url := pf.url
		resp, err := httpPost(url+"/v1/assemble", body)
		if err != nil {
			return err.Error()
		}
		if err := json.Unmarshal(resp, &got); err != nil || got.Prompt == "" {
			templates, _ := httpGet(url + "/v1/templates")
			return fmt.Sprintf("no prompt: %s (templates: %s)", resp, templates)
		}
		return ""
	})
	t.Logf("the sidecar assembled a prompt of %d tokens", got.Tokens)
}

func httpPost(url, body string) ([]byte, error) {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

func httpGet(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// forward is a running kubectl port-forward.
type forward struct {
	cmd  *exec.Cmd
	url  string
	done chan struct{}
}

// portForward forwards a free loopback port to port of target.
func portForward(ns, target string, port int) (*forward, error) {
	cmd := exec.Command(kubectl, "port-forward", "-n", ns, target, "--address=127.0.0.1", fmt.Sprintf(":%d", port))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	f := &forward{cmd: cmd, done: make(chan struct{})}
	buf := make([]byte, 256)
	n, _ := stdout.Read(buf)
	line := string(buf[:n])
	// The rest of its output ("Handling connection for ...") is drained so
	// that kubectl never blocks on a full pipe.
	go func() { _, _ = io.Copy(io.Discard, stdout); _ = cmd.Wait(); close(f.done) }()
	var local int
	if i := strings.Index(line, "127.0.0.1:"); i < 0 {
		f.stop()
		return nil, fmt.Errorf("kubectl port-forward: %q", line)
	} else if _, err := fmt.Sscanf(line[i:], "127.0.0.1:%d", &local); err != nil {
		f.stop()
		return nil, fmt.Errorf("kubectl port-forward: %q: %v", line, err)
	}
	f.url = fmt.Sprintf("http://127.0.0.1:%d", local)
	return f, nil
}

func (f *forward) exited() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

func (f *forward) stop() {
	_ = f.cmd.Process.Kill()
	<-f.done
}
