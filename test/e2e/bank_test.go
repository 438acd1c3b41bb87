//go:build e2e

package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/llmtest"
	"github.com/promptops/promptops/internal/tokens"
)

// TestServedBank serves a PostgreSQL bank (spec.serving) on the node and
// talks to its HTTP API through a port-forward to the Service <bank>-memory
// with the tokens of ServiceAccounts holding no role, the reader role and
// the writer role; then a serve pod whose ServiceAccount holds the reader
// role fills a PromptTemplate's memory section from it.
func TestServedBank(t *testing.T) {
	ns := namespace(t)
	dsn := postgres(t)
	srv := model(t, llmtest.OnePerFact)
	mustK(t, "", "create", "secret", "generic", "pg-pg", "-n", ns, "--from-literal=dsn="+dsn)
	mustK(t, bankYAML("pg", "    postgres: {dsnSecretRef: {name: pg-pg, key: dsn}}", srv.BaseURL())+"  serving:\n    replicas: 1\n", "apply", "-n", ns, "-f", "-")

	// 1. The operator runs the memory server; the bank is Ready (kstatus
	// Current) only when its pod is.
	want := fmt.Sprintf("https://pg-memory.%s.svc:8089", ns)
	eventually(t, 3*time.Minute, func() string {
		if got := jsonpath(t, ns, "mb/pg", "{.status.serving.endpoint}"); got != want {
			return fmt.Sprintf("status.serving.endpoint = %q, want %q: %s", got, want, jsonpath(t, ns, "mb/pg", "{.status}"))
		}
		return ""
	})
	mustK(t, "", "wait", "-n", ns, "--for=condition=Ready", "--timeout=180s", "mb/pg")
	mustK(t, "", "rollout", "status", "-n", ns, "deployment/pg-memory", "--timeout=60s")
	if ready := jsonpath(t, ns, "mb/pg", "{.status.serving.readyReplicas}"); ready != "1" {
		t.Errorf("status.serving.readyReplicas = %q, want 1", ready)
	}

	// 2. Who may do what: RBAC, through TokenReview and SubjectAccessReview.
	mustK(t, fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata: {name: nobody}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: reader}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: writer}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bank-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: promptops-memorybank-reader}
subjects: [{kind: ServiceAccount, name: reader, namespace: %[1]s}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bank-writer}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: promptops-memorybank-writer}
subjects: [{kind: ServiceAccount, name: writer, namespace: %[1]s}]
`, ns), "apply", "-n", ns, "-f", "-")
	token := func(sa string) string {
		return strings.TrimSpace(mustK(t, "", "create", "token", "-n", ns, sa, "--duration=1h"))
	}
	nobody, reader, writer := token("nobody"), token("reader"), token("writer")

	bankURL := "/v1/banks/" + ns + "/pg/"
	retain := `{"facts": [{"id": "00000000-0000-4000-8000-0000000000a1", "text": "Alice works at Acme Corp", "entities": ["Alice"]},
	  {"id": "00000000-0000-4000-8000-0000000000a2", "text": "Bob has a dog named Rex", "entities": ["Bob"]}]}`
	recallPending := `{"query": "Alice Acme", "maxTokens": 200, "includePending": true}`
	recall := `{"query": "Alice Acme", "maxTokens": 200}`

	// Over HTTPS, verified against the CA the manager issued the bank's
	// certificate with (the ConfigMap pg-memory-ca), for the Service's name.
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(jsonpath(t, ns, "configmap/pg-memory-ca", `{.data.ca\.crt}`))) {
		t.Fatal("the ConfigMap pg-memory-ca holds no CA")
	}
	pf := &restartingForward{t: t, ns: ns, target: "service/pg-memory", port: 8089,
		tls: &tls.Config{RootCAs: pool, ServerName: "pg-memory." + ns + ".svc", MinVersion: tls.VersionTLS12}}
	t.Cleanup(pf.close)
	if resp, err := http.Get(strings.Replace(pf.url(), "https://", "http://", 1) + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("the memory server answered plain HTTP")
		}
	}

	checks := []struct {
		what, token, path, body string
		code                    int
	}{
		{"no token, recall", "", "recall", recall, http.StatusUnauthorized},
		{"no token, retain", "", "facts", retain, http.StatusUnauthorized},
		{"no role, recall", nobody, "recall", recall, http.StatusForbidden},
		{"no role, retain", nobody, "facts", retain, http.StatusForbidden},
		{"reader, retain", reader, "facts", retain, http.StatusForbidden},
		{"reader, recall", reader, "recall", recall, http.StatusOK},
		{"writer, retain", writer, "facts", retain, http.StatusOK},
		{"writer, recall", writer, "recall", recall, http.StatusOK},
	}
	for _, c := range checks {
		code, body := pf.post(bankURL+c.path, c.token, c.body)
		if code != c.code {
			t.Errorf("%s: %d %s, want %d", c.what, code, body, c.code)
		} else {
			t.Logf("%s: %d", c.what, code)
		}
	}
	// The same retain again is a no-op: both ids unchanged.
	if code, body := pf.post(bankURL+"facts", writer, retain); code != http.StatusOK || !strings.Contains(body, `"unchanged":2`) {
		t.Errorf("the retain repeated: %d %s, want 200 with unchanged 2", code, body)
	}

	// The facts posted are recalled with includePending before any run
	// (kind fact), by the reader too.
	var got recallAnswer
	code, body := pf.post(bankURL+"recall", reader, recallPending)
	if code != http.StatusOK || json.Unmarshal([]byte(body), &got) != nil {
		t.Fatalf("recall with includePending: %d %s", code, body)
	}
	if !got.has("fact", "Alice works at Acme Corp") {
		t.Errorf("recall with includePending does not hold the pending fact: %s", body)
	}
	if got.Tokens > got.MaxTokens {
		t.Errorf("recall tokens %d over maxTokens %d", got.Tokens, got.MaxTokens)
	}

	// The next consolidation run makes observations of them.
	requestRun(t, ns, "pg")
	waitLastRun(t, ns, "pg", 3*time.Minute)
	if n := jsonpath(t, ns, "mb/pg", "{.status.lastRun.factsConsolidated}"); n != "2" {
		t.Errorf("lastRun.factsConsolidated = %q, want 2", n)
	}
	// The server answers from the memory it holds while it loads the new
	// generation in the background (query.go, Recaller.memory): the
	// observation shows from a later recall on.
	eventually(t, time.Minute, func() string {
		code, body := pf.post(bankURL+"recall", reader, recall)
		got = recallAnswer{}
		if code != http.StatusOK || json.Unmarshal([]byte(body), &got) != nil {
			return fmt.Sprintf("recall after the run: %d %s", code, body)
		}
		if len(got.Items) == 0 || got.Items[0].Kind != "observation" || got.Items[0].Text != "Alice works at Acme Corp" {
			return "recall after the run does not find the observation first: " + body
		}
		if !strings.Contains(got.Text, "Alice works at Acme Corp") || got.Tokens > got.MaxTokens {
			return "recall text/tokens: " + body
		}
		return ""
	})
	// tokens is the count of text in the bank's encoding (the default).
	enc, err := tokens.Get("o200k_base")
	if err != nil {
		t.Fatal(err)
	}
	if n := enc.Count(got.Text); n != got.Tokens {
		t.Errorf("recall answers tokens %d, but its text counts %d in o200k_base", got.Tokens, n)
	}

	// 3. A PromptTemplate's memory section, filled by a serve pod (the
	// sidecar of config/samples/serve) with its ServiceAccount's projected
	// token: the reader's. The cluster of make cluster has no DNS, so the
	// pod resolves the bank's endpoint by hostAliases to the Service's IP.
	mustK(t, `apiVersion: promptops.io/v1
kind: PromptTemplate
metadata: {name: remember}
spec:
  budget: {maxTokens: 1000}
  sections:
  - name: role
    text: You are helpful.
  - name: memory
    heading: "## What you remember"
    memory:
      bankRef: {name: pg}
      query: {fromRequest: true}
      reserveTokens: 200
      maxItems: 5
    truncation: {priority: 2}
  - name: task
    intent: true
    truncation: {policy: Never}
  intents:
  - name: chat
    instruction: Answer.
`, "apply", "-n", ns, "-f", "-")
	mustK(t, "", "wait", "-n", ns, "--for=condition=Ready", "--timeout=120s", "pt/remember")
	plan := mustK(t, "", "get", "configmap", "-n", ns, "remember-prompts", "-o", "json")
	if !strings.Contains(plan, want) {
		t.Errorf("the rendered plan does not carry the bank's endpoint %s:\n%s", want, plan)
	}
	clusterIP := jsonpath(t, ns, "service/pg-memory", "{.spec.clusterIP}")
	image := os.Getenv("OPERATOR_IMAGE")
	mustK(t, fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: app}
spec:
  replicas: 1
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      serviceAccountName: reader
      hostAliases: [{ip: %q, hostnames: [%q]}]
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        seccompProfile: {type: RuntimeDefault}
      initContainers:
      - name: promptops-serve
        image: %s
        imagePullPolicy: Never
        restartPolicy: Always
        args: [serve, --plans-dir=/etc/promptops/remember, --listen=127.0.0.1:8089, --memory-timeout=5s, --memory-ca-file=/etc/promptops/memory-ca/ca.crt]
        volumeMounts: [{name: prompts, mountPath: /etc/promptops/remember, readOnly: true}, {name: memory-ca, mountPath: /etc/promptops/memory-ca, readOnly: true}]
        resources: {requests: {cpu: 50m, memory: 32Mi}, limits: {memory: 128Mi}}
        securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
      containers:
      - name: app
        image: docker.io/promptops/pause:v1
        imagePullPolicy: Never
        resources: {requests: {cpu: 10m, memory: 16Mi}, limits: {memory: 32Mi}}
        securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
      volumes:
      - name: prompts
        configMap: {name: remember-prompts}
      - name: memory-ca
        configMap: {name: pg-memory-ca}
`, clusterIP, "pg-memory."+ns+".svc", image), "apply", "-n", ns, "-f", "-")
	mustK(t, "", "rollout", "status", "-n", ns, "deployment/app", "--timeout=120s")
	app := &restartingForward{t: t, ns: ns, target: "deployment/app", port: 8089}
	t.Cleanup(app.close)
	assemble := `{"namespace": "` + ns + `", "name": "remember", "intent": "chat", "query": "Alice Acme"}`
	var answer struct {
		Prompt string          `json:"prompt"`
		Tokens int             `json:"tokens"`
		Memory json.RawMessage `json:"memory"`
	}
	eventually(t, 90*time.Second, func() string {
		code, body := app.post("/v1/assemble", "", assemble)
		if code != http.StatusOK || json.Unmarshal([]byte(body), &answer) != nil {
			return fmt.Sprintf("assemble: %d %s", code, body)
		}
		if !strings.Contains(answer.Prompt, "Alice works at Acme Corp") {
			logs, _ := k(t, "", "logs", "-n", ns, "deployment/app", "-c", "promptops-serve", "--tail=5")
			return fmt.Sprintf("the prompt does not hold the recalled memory: %s\nserve's log:\n%s", body, logs)
		}
		return ""
	})
	if m := string(answer.Memory); !strings.Contains(m, `"timedOut":false`) || !strings.Contains(m, `"kind":"observation"`) {
		t.Errorf("the answer's memory report: %s, want the observation recalled, not timed out", m)
	}
	if answer.Tokens > 1000 {
		t.Errorf("the prompt has %d tokens, over the budget of 1000", answer.Tokens)
	}
	t.Logf("assembled with memory (%d tokens): %s", answer.Tokens, answer.Memory)
}

type recallAnswer struct {
	Items []struct {
		ID   string `json:"id"`
		Kind string `json:"kind"`
		Text string `json:"text"`
	} `json:"items"`
	Text      string `json:"text"`
	Tokens    int    `json:"tokens"`
	MaxTokens int    `json:"maxTokens"`
	Omitted   int    `json:"omitted"`
}

func (r recallAnswer) has(kind, text string) bool {
	for _, it := range r.Items {
		if it.Kind == kind && it.Text == text {
			return true
		}
	}
	return false
}

// restartingForward is a kubectl port-forward started again when it has
// exited (it exits when a connection finds nothing listening).
type restartingForward struct {
	t          *testing.T
	ns, target string
	port       int
	// tls, when set, makes the requests HTTPS, verified with it.
	tls *tls.Config
	f   *forward
}

// url is the forward's base URL, started if need be.
func (p *restartingForward) url() string {
	p.t.Helper()
	if p.f == nil || p.f.exited() {
		p.close()
		f, err := portForward(p.ns, p.target, p.port)
		if err != nil {
			p.t.Fatal(err)
		}
		p.f = f
	}
	if p.tls != nil {
		return strings.Replace(p.f.url, "http://", "https://", 1)
	}
	return p.f.url
}

func (p *restartingForward) close() {
	if p.f != nil {
		p.f.stop()
		p.f = nil
	}
}

// post sends body with the bearer token (none when empty) and answers the
// status code and body; it retries for a minute while the forward or the
// connection fails.
func (p *restartingForward) post(path, token, body string) (int, string) {
	p.t.Helper()
	var code int
	var out string
	eventually(p.t, time.Minute, func() string {
		if p.f == nil || p.f.exited() {
			p.close()
			f, err := portForward(p.ns, p.target, p.port)
			if err != nil {
				return err.Error()
			}
			p.f = f
		}
		base, hc := p.f.url, http.DefaultClient
		if p.tls != nil {
			base = strings.Replace(base, "http://", "https://", 1)
			hc = &http.Client{Transport: &http.Transport{TLSClientConfig: p.tls}}
		}
		req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
		if err != nil {
			return err.Error()
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err.Error()
		}
		code, out = resp.StatusCode, string(b)
		return ""
	})
	return code, out
}
