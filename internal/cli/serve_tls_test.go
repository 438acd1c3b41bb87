package cli

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/webhook"
)

// testCA writes a fresh CA and a serving certificate for 127.0.0.1 signed
// by it into a new directory, and returns the directory and a pool that
// trusts the CA.
func testCA(t *testing.T) (dir string, pool *x509.CertPool) {
	t.Helper()
	dir = t.TempDir()
	ca, _, err := (&webhook.SelfSigned{Dir: dir, Hosts: []string{"127.0.0.1"}}).Ensure()
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("no CA")
	}
	return dir, pool
}

func httpsClient(pool *x509.CertPool, maxVersion uint16) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, MaxVersion: maxVersion},
		DisableKeepAlives: true,
	}}
}

// serve --tls-cert-file answers HTTPS with a certificate its callers
// verify against their CA, refuses TLS before 1.2 and plain HTTP, and
// serves a rewritten pair to the next handshake without a restart.
func TestServeTLS(t *testing.T) {
	old := certWatchInterval
	certWatchInterval = 100 * time.Millisecond
	t.Cleanup(func() { certWatchInterval = old })
	certs, pool := testCA(t)
	s := newServes(t)
	addr := s.start("--plans-dir", t.TempDir(), "--tls-cert-file", filepath.Join(certs, webhook.CertFile), "--tls-key-file", filepath.Join(certs, webhook.KeyFile))

	resp, err := httpsClient(pool, 0).Get("https://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("HTTPS with the CA: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
		t.Fatalf("HTTPS: %d, TLS %+v", resp.StatusCode, resp.TLS)
	}
	if _, err := httpsClient(x509.NewCertPool(), 0).Get("https://" + addr + "/healthz"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client without the CA connected: %v", err)
	}
	if _, err := httpsClient(pool, tls.VersionTLS11).Get("https://" + addr + "/healthz"); err == nil {
		t.Error("TLS 1.1 was accepted")
	}
	if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP was answered: %s", body)
		}
	}

	// A new pair, as cert-manager or the manager rewrites a Secret: the
	// key first, the certificate last, each replaced whole.
	next, nextPool := testCA(t)
	for _, f := range []string{webhook.KeyFile, webhook.CertFile} {
		data, err := os.ReadFile(filepath.Join(next, f))
		if err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(certs, "."+f)
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(certs, f)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := httpsClient(nextPool, 0).Get("https://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rewritten certificate was not served: %v\n%s", err, s.logged())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := httpsClient(pool, 0).Get("https://" + addr + "/healthz"); err == nil {
		t.Error("the old certificate is still served")
	}
}

// Plain HTTP only on loopback; the pair whole or not at all; each refusal
// names the flag to give.
func TestServeTLSFlags(t *testing.T) {
	certs, _ := testCA(t)
	cert, key := filepath.Join(certs, webhook.CertFile), filepath.Join(certs, webhook.KeyFile)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--auth=kubernetes", "--listen", ":8089"}, "give --tls-cert-file and --tls-key-file"},
		{[]string{"--auth=kubernetes", "--listen", "10.1.2.3:8089"}, "--plain-http"},
		{[]string{"--tls-cert-file", cert}, "--tls-cert-file needs --tls-key-file"},
		{[]string{"--tls-key-file", key}, "--tls-key-file needs --tls-cert-file"},
		{[]string{"--tls-cert-file", cert, "--tls-key-file", key, "--plain-http"}, "--plain-http and --tls-cert-file"},
		{[]string{"--tls-cert-file", cert, "--tls-key-file", filepath.Join(certs, "missing")}, "--tls-cert-file, --tls-key-file"},
		{[]string{"--tls-cert-file", key, "--tls-key-file", cert}, "--tls-cert-file, --tls-key-file"},
	} {
		code, _, e := run(t, "", append([]string{"serve", "--plans-dir", t.TempDir()}, c.args...)...)
		if code != ExitInvalid || !strings.Contains(e, c.want) {
			t.Errorf("%v: exit %d, want %d and %q in: %s", c.args, code, ExitInvalid, c.want, e)
		}
	}
	for _, c := range []struct {
		cert, key, listen string
		plain             bool
		ok                bool
	}{
		{"", "", "127.0.0.1:8089", false, true},
		{"", "", "[::1]:8089", false, true},
		{"", "", ":8089", true, true},
		{cert, key, ":8089", false, true},
		{"", "", "0.0.0.0:8089", false, false},
	} {
		if err := checkTLSFlags(c.cert, c.key, c.plain, c.listen); (err == nil) != c.ok {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

// A memory section's recall over HTTPS: the bank's serve has a certificate
// from a CA that the plans' serve trusts by --memory-ca-file; without the
// file, the system's roots do not know the CA and the section says
// RecallFailed.
func TestServeRecallOverTLS(t *testing.T) {
	certs, _ := testCA(t)
	dir := t.TempDir()
	store := "sqlite://" + filepath.Join(dir, "bank.db")
	serves := newServes(t)
	bank := serves.start("--bank", "shop/customers", "--store", store,
		"--tls-cert-file", filepath.Join(certs, webhook.CertFile), "--tls-key-file", filepath.Join(certs, webhook.KeyFile))
	plans, _ := renderPlans(t, dir, `apiVersion: promptops.io/v1
kind: PromptTemplate
metadata: {name: support, namespace: shop}
spec:
  budget: {maxTokens: 400}
  sections:
  - {name: role, text: "You are the support assistant."}
  - name: memory
    heading: "## What we know"
    memory: {bankRef: {name: customers}, query: {fromRequest: true}, scope: {fromRequest: true}, reserveTokens: 100}
  - {name: task, heading: "## Task", intent: true}
  intents: [{name: chat, instruction: "Answer briefly."}]
`, "https://"+bank)
	assemble := func(front string) string {
		t.Helper()
		code, body := httpDo(t, "POST", "http://"+front+"/v1/assemble", `{"namespace": "shop", "name": "support", "intent": "chat", "query": "Where is the passport?", "scope": "user:ana"}`)
		var out struct {
			Memory []struct {
				Error string `json:"error"`
			} `json:"memory"`
		}
		if code != http.StatusOK || json.Unmarshal([]byte(body), &out) != nil || len(out.Memory) != 1 {
			t.Fatalf("assemble: %d %s", code, body)
		}
		return out.Memory[0].Error
	}
	verified := serves.start("--plans-dir", plans, "--memory-token-file", "", "--memory-ca-file", filepath.Join(certs, webhook.CAFile))
	if code := assemble(verified); code != "" {
		t.Errorf("with the bank's CA: the memory section failed with %s\n%s", code, serves.logged())
	}
	system := serves.start("--plans-dir", plans, "--memory-token-file", "")
	if code := assemble(system); code != "RecallFailed" {
		t.Errorf("with the system's roots: %q, want RecallFailed", code)
	}
}

// manager --memory-cert-issuer is KIND/NAME, refused otherwise before the
// manager starts.
func TestManagerCertIssuerFlag(t *testing.T) {
	for _, bad := range []string{"ca", "Secret/ca", "ClusterIssuer/"} {
		if code, _, e := run(t, "", "manager", "--memory-cert-issuer", bad); code != ExitInvalid || !strings.Contains(e, "--memory-cert-issuer") {
			t.Errorf("%q: exit %d %s", bad, code, e)
		}
	}
}
