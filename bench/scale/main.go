// Command scale measures the PromptTemplate controller at scale: it starts
// envtest (real kube-apiserver and etcd) with an audit log, runs the
// operator binary as its own process and user, creates N templates of six
// intents (~4 KB each), and reports seconds until all are Ready, the
// operator's writes per template (from the audit log), its peak RSS, its
// writes in the minutes after settling, and the peak RSS of a shared
// `serve --watch` of the namespace started then, once it loaded every plan.
//
//	go build -o bin/promptops . && go run ./bench/scale -n 1000
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/bench/internal/loopback"
	"github.com/promptops/promptops/bench/internal/proc"
	"github.com/promptops/promptops/controllers"
	"github.com/promptops/promptops/internal/tokens/corpus"
)

const managerUser = "promptops-bench-manager"

// memoryLimit is the container limit the manager and serve run under: the
// chart's default for both.
var profileDir, managerArgs, managerEnv string

var memoryLimit = flag.Int64("memory-limit", 256<<20, "Bytes of the containers' memory limit the manager and serve take (PROMPTOPS_MEMORY_LIMIT); 0 for none.")

func main() {
	n := flag.Int("n", 1000, "Templates to create.")
	settle := flag.Duration("settle", 60*time.Second, "How long to watch for writes after all are Ready.")
	bin := flag.String("operator", "bin/promptops", "The operator binary.")
	flag.StringVar(&managerArgs, "manager-args", "", "More flags of the manager, separated by spaces (for example --max-concurrent-reconciles=8).")
	flag.StringVar(&managerEnv, "manager-env", "", "More environment of the manager only, separated by spaces (for example GOGC=100).")
	flag.StringVar(&profileDir, "profile-dir", "", "When set, the manager serves pprof on loopback and a CPU profile of each 20 s and a heap profile and the runtime's MemStats after a collection (the live heap) are written here until all are Ready.")
	flag.Parse()
	if err := run(*n, *settle, *bin); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func run(n int, settle time.Duration, bin string) error {
	work, err := os.MkdirTemp("", "promptops-scale-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	auditLog := filepath.Join(work, "audit.log")
	policy := filepath.Join(work, "policy.yaml")
	// Only writes, at Metadata level: enough to count them by user.
	if err := os.WriteFile(policy, []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`), 0o600); err != nil {
		return err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: "bin/k8s",
		CRDDirectoryPaths:     []string{"config/crd/bases"},
		ErrorIfCRDPathMissing: true,
	}
	api := env.ControlPlane.GetAPIServer()
	api.Configure().Append("audit-log-path", auditLog).Append("audit-policy-file", policy)
	cfg, err := env.Start()
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	cfg.QPS, cfg.Burst = 500, 1000
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: controllers.NewScheme()})
	if err != nil {
		return err
	}
	user, err := env.AddUser(envtest.User{Name: managerUser, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(work, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		return err
	}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "scale"}}
	if err := c.Create(ctx, ns); err != nil {
		return err
	}

	mgrArgs := []string{"manager", "--kubeconfig", kubeconfig, "--metrics-bind-address=0", "--health-probe-bind-address=0", "--zap-log-level=error"}
	mgrArgs = append(mgrArgs, strings.Fields(managerArgs)...)
	pprofAddr := ""
	if profileDir != "" {
		if pprofAddr, err = loopback.FreeAddr(); err != nil {
			return err
		}
		mgrArgs = append(mgrArgs, "--pprof-bind-address="+pprofAddr)
	}
	if err := proc.Evict(bin); err != nil {
		return err
	}
	mgr := exec.Command(bin, mgrArgs...)
	// As the chart runs both: under its default memory limit, from which
	// they set the Go runtime's (PROMPTOPS_MEMORY_LIMIT stands for the
	// cgroup's; -memory-limit 0 leaves it out).
	limitEnv := []string{}
	if *memoryLimit > 0 {
		limitEnv = append(limitEnv, fmt.Sprintf("PROMPTOPS_MEMORY_LIMIT=%d", *memoryLimit))
	}
	mgr.Env = append(append(os.Environ(), limitEnv...), strings.Fields(managerEnv)...)
	mgr.Stderr = os.Stderr
	if err := mgr.Start(); err != nil {
		return err
	}
	defer func() { _ = mgr.Process.Kill(); _, _ = mgr.Process.Wait() }()
	var peak peakRSS
	stopRSS := peak.watch(mgr.Process.Pid)
	defer stopRSS()
	time.Sleep(2 * time.Second) // caches synced before the clock starts

	// The templates are seen Ready by a watch from before the first is
	// created: a LIST of them all every 200 ms took most of the API
	// server's CPU at 10,000 (each a 270 MB answer, more of them the
	// longer it took).
	var empty promptopsv1.PromptTemplateList
	if err := c.List(ctx, &empty, client.InNamespace("scale")); err != nil {
		return err
	}
	readyCh := make(chan error, 1)
	go func() { readyCh <- watchReady(ctx, c, n, empty.ResourceVersion, 20*time.Minute) }()
	stopProfiles := func() {}
	if pprofAddr != "" {
		stopProfiles = profile(pprofAddr, profileDir)
	}
	start := time.Now()
	if err := createTemplates(ctx, c, n); err != nil {
		return err
	}
	created := time.Since(start)
	if err := <-readyCh; err != nil {
		return err
	}
	allReady := time.Since(start)
	stopProfiles()
	// Then a shared serve --watch of the namespace loads every plan (after
	// the clock, so that it takes none of the manager's CPU).
	serveAddr, err := loopback.FreeAddr()
	if err != nil {
		return err
	}
	srv := exec.Command(bin, "serve", "--watch", "--namespace", "scale", "--listen", serveAddr, "--auth", "none", "--zap-log-level=error")
	srv.Env = append(append(os.Environ(), "KUBECONFIG="+kubeconfig), limitEnv...)
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		return err
	}
	defer func() { _ = srv.Process.Kill(); _, _ = srv.Process.Wait() }()
	var servePeak peakRSS
	stopServeRSS := servePeak.watch(srv.Process.Pid)
	defer stopServeRSS()
	plans := 0
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if plans = servedPlans(serveAddr); plans == n {
			break
		}
	}
	time.Sleep(time.Second)     // a last sample of its resident set
	time.Sleep(3 * time.Second) // in-flight events and audit flush
	writesReady, byKind, err := countWrites(auditLog)
	if err != nil {
		return err
	}
	time.Sleep(settle)
	writesSettled, _, err := countWrites(auditLog)
	if err != nil {
		return err
	}
	fmt.Printf("templates:                    %d (six intents, ~4 KB each)\n", n)
	fmt.Printf("created in:                   %.1f s\n", created.Seconds())
	fmt.Printf("all Ready after:              %.1f s\n", allReady.Seconds())
	fmt.Printf("operator writes until Ready:  %d (%.2f per template) %v\n", writesReady, float64(writesReady)/float64(n), byKind)
	fmt.Printf("operator writes in %v after settling: %d\n", settle, writesSettled-writesReady)
	fmt.Printf("memory limit:                 %d MiB (0: none)\n", *memoryLimit>>20)
	anon, file := peak.parts()
	fmt.Printf("operator peak RSS:            %s (most anonymous %s, most file-backed %s)\n", proc.MiB(peak.get()), proc.MiB(anon), proc.MiB(file))
	anon, file = servePeak.parts()
	fmt.Printf("serve --watch peak RSS:       %s (%d of %d plans loaded; most anonymous %s, most file-backed %s)\n", proc.MiB(servePeak.get()), plans, n, proc.MiB(anon), proc.MiB(file))
	return nil
}

// profile writes the manager's CPU profile of each 20 s and its heap
// profile after it into dir, until stopped; stop waits for the last.
func profile(addr, dir string) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	save := func(name, path string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "scale: profile:", err)
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			fmt.Fprintln(os.Stderr, "scale: profile:", err)
			return
		}
		defer f.Close()
		_, _ = io.Copy(f, resp.Body)
	}
	go func() {
		defer close(finished)
		for i := 0; ; i++ {
			save(fmt.Sprintf("cpu-%02d.pb.gz", i), "/debug/pprof/profile?seconds=20")
			save(fmt.Sprintf("heap-%02d.pb.gz", i), "/debug/pprof/heap")
			save(fmt.Sprintf("memstats-%02d.txt", i), "/debug/pprof/heap?debug=1&gc=1")
			select {
			case <-done:
				return
			default:
			}
		}
	}()
	return func() { close(done); <-finished }
}

// servedPlans is serve's promptops_serve_plans gauge; -1 when unread.
func servedPlans(addr string) int {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "promptops_serve_plans "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return int(n)
			}
		}
	}
	return -1
}

func createTemplates(ctx context.Context, c client.Client, n int) error {
	base := corpus.Generate(3200)
	str := func(s string) *string { return &s }
	never := &promptopsv1.Truncation{Policy: promptopsv1.TruncationNever}
	sem := make(chan struct{}, 32)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			salt := "Template " + strconv.Itoa(i) + ". "
			pt := &promptopsv1.PromptTemplate{
				ObjectMeta: metav1.ObjectMeta{Namespace: "scale", Name: fmt.Sprintf("pt-%04d", i)},
				Spec: promptopsv1.PromptTemplateSpec{
					Budget: promptopsv1.Budget{MaxTokens: 8000},
					Sections: []promptopsv1.Section{
						{Name: "base_system", Text: str(salt + base), Truncation: never},
						{Name: "data_context", Runtime: &promptopsv1.RuntimeSection{ReserveTokens: 500}},
						{Name: "tool_outputs", Heading: "## Tool results", Runtime: &promptopsv1.RuntimeSection{ReserveTokens: 1000}},
						{Name: "intent_instruction", Heading: "## Task", Intent: true, Truncation: never},
					},
				},
			}
			for j, name := range []string{"chat", "explore", "consult", "analyze", "discuss", "feedback"} {
				pt.Spec.Intents = append(pt.Spec.Intents, promptopsv1.Intent{Name: name, Instruction: str(fmt.Sprintf("%sIntent %d: answer with care and cite the data.", salt, j))})
			}
			if err := c.Create(ctx, pt); err != nil {
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// watchReady waits until n templates of the namespace have been seen
// Ready, watching from resourceVersion rv and again from the last one seen
// when the server ends the watch.
func watchReady(ctx context.Context, c client.WithWatch, n int, rv string, limit time.Duration) error {
	ready := map[string]bool{}
	deadline := time.Now().Add(limit)
	for len(ready) < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d Ready after %s", len(ready), n, limit)
		}
		var list promptopsv1.PromptTemplateList
		w, err := c.Watch(ctx, &list, client.InNamespace("scale"), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})
		if err != nil {
			return err
		}
		for ev := range w.ResultChan() {
			switch o := ev.Object.(type) {
			case *promptopsv1.PromptTemplate:
				rv = o.ResourceVersion
				ready[o.Name] = ev.Type != watch.Deleted && meta.IsStatusConditionTrue(o.Status.Conditions, promptopsv1.ConditionReady)
				if !ready[o.Name] {
					delete(ready, o.Name)
				}
			case *metav1.Status:
				w.Stop()
				return fmt.Errorf("watching templates: %s", o.Message)
			}
			if len(ready) == n {
				break
			}
		}
		w.Stop()
	}
	return nil
}

// countWrites counts the operator user's write requests in the audit log.
func countWrites(path string) (int, map[string]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	total, byKind := 0, map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev struct {
			Stage string `json:"stage"`
			User  struct {
				Username string `json:"username"`
			} `json:"user"`
			Verb      string `json:"verb"`
			ObjectRef struct {
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
			} `json:"objectRef"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Stage != "ResponseComplete" || ev.User.Username != managerUser {
			continue
		}
		total++
		k := ev.Verb + " " + ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			k += "/" + ev.ObjectRef.Subresource
		}
		byKind[k]++
	}
	return total, byKind, sc.Err()
}

// peakRSS follows a process's VmHWM (peak resident set), and the most of
// its resident set seen anonymous (the Go heap and stacks) and
// file-backed (the binary's pages), each at its own moment, from
// /proc/PID/status every 200 ms.
type peakRSS struct {
	mu              sync.Mutex
	hwm, anon, file int64
}

// get is VmHWM in bytes.
func (p *peakRSS) get() int64 { p.mu.Lock(); defer p.mu.Unlock(); return p.hwm }

// parts are the largest anonymous and file-backed resident sets seen, in
// bytes.
func (p *peakRSS) parts() (anon, file int64) { p.mu.Lock(); defer p.mu.Unlock(); return p.anon, p.file }

func (p *peakRSS) watch(pid int) func() {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			hwm, _ := proc.Status(pid, "VmHWM")
			anon, _ := proc.Status(pid, "RssAnon")
			file, _ := proc.Status(pid, "RssFile")
			p.mu.Lock()
			p.hwm, p.anon, p.file = max(p.hwm, hwm), max(p.anon, anon), max(p.file, file)
			p.mu.Unlock()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done) }
}
