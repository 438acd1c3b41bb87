package serve

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/promptops/promptops/internal/assembler"
	"github.com/promptops/promptops/internal/promptfit"
	"github.com/promptops/promptops/plan"
)

// memoryPlanJSON is a sealed plan whose memory section takes its query
// from the runtime section question (or, fromRequest, from the request).
func memoryPlanJSON(t testing.TB, endpoint string, fromRequest bool) []byte {
	t.Helper()
	q := plan.MemoryQuery{FromRuntime: "question"}
	if fromRequest {
		q = plan.MemoryQuery{FromRequest: true}
	}
	p := &plan.Plan{
		APIVersion: plan.PlanAPIVersion, Kind: plan.PlanKind, Namespace: "shop", Name: "support",
		Encoding: "cl100k_base", MaxTokens: 400, OnExceed: "Reject", Separator: plan.Separator,
		Sections: []plan.Section{
			{Name: "role", Kind: plan.KindStatic, Text: "You are the support assistant.", Policy: plan.PolicyNever},
			{Name: "question", Kind: plan.KindRuntime, Heading: "## Question", ReserveTokens: 50, Policy: plan.PolicyNever},
			{Name: "memory", Kind: plan.KindMemory, Heading: "## What we know", ReserveTokens: 100, Policy: plan.PolicyPriority, Priority: 10,
				Memory: &plan.MemorySource{Bank: plan.BankRef{Namespace: "shop", Name: "customers"}, Endpoint: endpoint, Query: q, MaxItems: 10, MinScorePerMille: 300}},
			{Name: "task", Kind: plan.KindIntent, Heading: "## Task", Policy: plan.PolicyNever},
		},
		Intents: []plan.Intent{{Name: "chat", Instruction: "Answer briefly."}},
		Runtime: plan.RuntimeSummary{Placeholder: promptfit.Placeholder("NAME"), MemoryPlaceholder: promptfit.MemoryPlaceholder("NAME")},
	}
	if _, err := assembler.Seal(context.Background(), p, false); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func memoryServer(t testing.TB, planJSON []byte, tokenFile string, timeout time.Duration) *httptest.Server {
	t.Helper()
	rc := NewHTTPRecaller(tokenFile)
	rc.MaxBytes = 1 << 20
	s := New(Options{Log: logr.Discard(), MemoryRecaller: rc, MemoryTimeout: timeout})
	s.Apply(map[string][]byte{"support": planJSON})
	ts := newServer(t, s.Handler())
	t.Cleanup(ts.Close)
	return ts
}

type memoryAnswer struct {
	AssembleResponse
}

func assembleMemory(t *testing.T, url, body string) (int, memoryAnswer) {
	t.Helper()
	code, out := post(t, url, body)
	var a memoryAnswer
	if err := json.Unmarshal(out, &a); err != nil {
		t.Fatalf("%d %s", code, out)
	}
	return code, a
}

var recalled = []plan.MemoryItem{
	{ID: "o1", Kind: "observation", Text: "The customer prefers email.", Score: 0.9, ProofCount: 3},
	{ID: "o2", Kind: "observation", Text: "The customer is on the Pro plan.", Score: 0.8, ProofCount: 1},
	{ID: "o3", Kind: "observation", Text: "Too far from the question.", Score: 0.1, ProofCount: 1},
}

func TestAssembleFillsMemoryByRecall(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("token-one\n"), 0o600)
	var gotAuth atomic.Value
	var gotReq RecallRequest
	var gotPath string
	bank := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth.Store(r.Header.Get("Authorization"))
		gotPath = r.URL.Path
		_ = json.NewDecoder(r.Body).Decode(&gotReq)
		json.NewEncoder(w).Encode(map[string]any{"items": recalled, "text": "", "tokens": 0, "maxTokens": gotReq.MaxTokens, "omitted": 0})
	}))
	defer bank.Close()
	for _, fromRequest := range []bool{false, true} {
		ts := memoryServer(t, memoryPlanJSON(t, bank.URL, fromRequest), tokenFile, 0)
		body := `{"namespace":"shop","name":"support","intent":"chat","runtime":{"question":"How do I reach them?"}}`
		if fromRequest {
			body = `{"namespace":"shop","name":"support","intent":"chat","runtime":{"question":"Hi"},"query":"How do I reach them?"}`
		}
		code, a := assembleMemory(t, ts.URL, body)
		if code != http.StatusOK || len(a.Memory) != 1 {
			t.Fatalf("%d %+v", code, a)
		}
		m := a.Memory[0]
		if len(m.Items) != 2 || m.Items[0].ID != "o1" || m.Recalled != 3 || m.Omitted != 1 || m.TimedOut || m.Error != "" {
			t.Errorf("memory %+v", m)
		}
		if want := "## What we know\nThe customer prefers email.\nThe customer is on the Pro plan.\n\n"; !strings.Contains(a.Prompt, want) {
			t.Errorf("prompt %q lacks %q", a.Prompt, want)
		}
		if gotPath != "/v1/banks/shop/customers/recall" || gotAuth.Load() != "Bearer token-one" {
			t.Errorf("called %s with %q", gotPath, gotAuth.Load())
		}
		if gotReq.Query != "How do I reach them?" || gotReq.MaxTokens == nil || *gotReq.MaxTokens != 100 || gotReq.MaxItems == nil || *gotReq.MaxItems != 10 || gotReq.MinScorePerMille == nil || *gotReq.MinScorePerMille != 300 || gotReq.LegacyMinScore != nil {
			t.Errorf("recall request %+v", gotReq)
		}
	}
	// A rotated token is read again by the same recaller.
	ts := memoryServer(t, memoryPlanJSON(t, bank.URL, false), tokenFile, 0)
	for _, token := range []string{"token-one", "token-two-longer", "token-three-longest"} {
		os.WriteFile(tokenFile, []byte(token), 0o600)
		assembleMemory(t, ts.URL, `{"namespace":"shop","name":"support","intent":"chat","runtime":{"question":"q"}}`)
		if gotAuth.Load() != "Bearer "+token {
			t.Errorf("token after rotation to %s: %q", token, gotAuth.Load())
		}
	}
}

func TestAssembleMemoryTimesOut(t *testing.T) {
	release := make(chan struct{})
	bank := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer bank.Close()
	defer close(release)
	ts := memoryServer(t, memoryPlanJSON(t, bank.URL, false), "", 50*time.Millisecond)
	code, a := assembleMemory(t, ts.URL, `{"namespace":"shop","name":"support","intent":"chat","runtime":{"question":"q"}}`)
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	m := a.Memory[0]
	if !m.TimedOut || m.Error != string(plan.MemoryTimedOut) || len(m.Items) != 0 || strings.Contains(a.Prompt, "## What we know") {
		t.Errorf("memory %+v, prompt %q", m, a.Prompt)
	}
}

func TestAssembleMemoryErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		code    string
	}{
		{"500 without a body", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }, "RecallHTTPError500"},
		{"401 with the bank's code", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(401)
			fmt.Fprint(w, `{"error":{"code":"Unauthorized","message":"no token"}}`)
		}, "Unauthorized"},
		{"not JSON", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "<html>") }, string(CodeRecallMalformed)},
		{"endless answer", func(w http.ResponseWriter, r *http.Request) {
			// A 300 MB answer is never read whole: the recaller stops
			// past its bound and drops the connection.
			fmt.Fprint(w, `{"items":[`)
			chunk := []byte(strings.Repeat(`{"id":"x","kind":"fact","text":"padding padding padding","score":1},`, 1000))
			for written := 0; written < 300<<20; written += len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		}, string(CodeRecallTooLarge)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bank := httptest.NewServer(tc.handler)
			defer bank.Close()
			ts := memoryServer(t, memoryPlanJSON(t, bank.URL, false), "", 10*time.Second)
			code, a := assembleMemory(t, ts.URL, `{"namespace":"shop","name":"support","intent":"chat","runtime":{"question":"q"}}`)
			m := a.Memory[0]
			if code != http.StatusOK || m.Error != tc.code || m.TimedOut || len(m.Items) != 0 {
				t.Errorf("%d memory %+v, want code %s", code, m, tc.code)
			}
		})
	}
	// No endpoint (the bank is not served) and no query.
	ts := memoryServer(t, memoryPlanJSON(t, "", false), "", 0)
	if _, a := assembleMemory(t, ts.URL, `{"namespace":"shop","name":"support","intent":"chat","runtime":{"question":"q"}}`); a.Memory[0].Error != string(CodeNotServed) {
		t.Errorf("memory %+v", a.Memory[0])
	}
	if _, a := assembleMemory(t, ts.URL, `{"namespace":"shop","name":"support","intent":"chat","runtime":{}}`); a.Memory[0].Error != string(plan.MemoryNoQuery) {
		t.Errorf("memory %+v", a.Memory[0])
	}
}

// The recaller is an interface: an in-process bank plugs in.
type stubRecaller struct{ items []plan.MemoryItem }

func (s stubRecaller) Recall(ctx context.Context, r plan.MemoryRequest) ([]plan.MemoryItem, error) {
	return s.items, nil
}

func TestAssembleMemoryInProcessRecaller(t *testing.T) {
	s := New(Options{Log: logr.Discard(), MemoryRecaller: stubRecaller{recalled}})
	s.Apply(map[string][]byte{"support": memoryPlanJSON(t, "", false)})
	ts := newServer(t, s.Handler())
	defer ts.Close()
	_, a := assembleMemory(t, ts.URL, `{"namespace":"shop","name":"support","intent":"chat","runtime":{"question":"q"}}`)
	if len(a.Memory[0].Items) != 2 {
		t.Errorf("memory %+v", a.Memory[0])
	}
	if v := testutilValue(s.metrics.recalls.WithLabelValues("shop", "customers", "ok")); v != 1 {
		t.Errorf("recalls metric %v", v)
	}
}

// HTTPRecaller at its edges: an https endpoint with the default answer
// bound, other schemes refused, a failed call and an ended context told
// apart, a bank's error code kept up to 64 bytes, and an answer of exactly
// MaxBytes taken.
func TestHTTPRecallerEdges(t *testing.T) {
	answer, _ := json.Marshal(RecallResponse{Items: recalled[:1]})
	var code atomic.Value
	code.Store("")
	handler := func(w http.ResponseWriter, r *http.Request) {
		if c := code.Load().(string); c != "" {
			w.WriteHeader(http.StatusConflict)
			fmt.Fprintf(w, `{"error":{"code":%q,"message":"m"}}`, c)
			return
		}
		w.Write(answer)
	}
	tlsBank := httptest.NewTLSServer(http.HandlerFunc(handler))
	defer tlsBank.Close()
	req := func(endpoint string) plan.MemoryRequest {
		return plan.MemoryRequest{Bank: plan.BankRef{Namespace: "shop", Name: "customers"}, Endpoint: endpoint, Query: "q", MaxTokens: 100}
	}
	rc := NewHTTPRecaller("")
	rc.Client = tlsBank.Client() // MaxBytes unset: DefaultMaxRecallBytes
	if items, err := rc.Recall(context.Background(), req(tlsBank.URL)); err != nil || len(items) != 1 || items[0].ID != "o1" {
		t.Fatalf("https: %v, %v", items, err)
	}
	wantCode := func(what string, err error, want string) {
		t.Helper()
		var re *plan.RecallError
		if !errors.As(err, &re) || string(re.Code) != want {
			t.Errorf("%s: %v, want code %s", what, err, want)
		}
	}
	_, err := rc.Recall(context.Background(), req("ftp://"+tlsBank.Listener.Addr().String()))
	wantCode("ftp", err, string(CodeNotServed))

	closed := httptest.NewServer(http.HandlerFunc(handler))
	closed.Close()
	_, err = rc.Recall(context.Background(), req(closed.URL))
	wantCode("a closed port", err, string(plan.MemoryRecallFailed))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := rc.Recall(ctx, req(tlsBank.URL)); !errors.Is(err, context.Canceled) {
		t.Errorf("an ended context: %v", err)
	}

	code.Store(strings.Repeat("C", 64))
	_, err = rc.Recall(context.Background(), req(tlsBank.URL))
	wantCode("a 64-byte code", err, strings.Repeat("C", 64))
	code.Store(strings.Repeat("C", 65))
	_, err = rc.Recall(context.Background(), req(tlsBank.URL))
	wantCode("a 65-byte code", err, fmt.Sprintf("%s%d", CodeRecallHTTP, http.StatusConflict))
	code.Store("")

	// The context ends while the answer is being read: the context's
	// error, not a malformed answer.
	stall := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"items":[`))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer stall.Close()
	plain := NewHTTPRecaller("")
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := plain.Recall(ctx, req(stall.URL)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a context that ends mid-answer: %v", err)
	}

	rc.MaxBytes = int64(len(answer))
	if items, err := rc.Recall(context.Background(), req(tlsBank.URL)); err != nil || len(items) != 1 {
		t.Fatalf("an answer of exactly MaxBytes: %v, %v", items, err)
	}
	rc.MaxBytes--
	_, err = rc.Recall(context.Background(), req(tlsBank.URL))
	wantCode("an answer one byte over MaxBytes", err, string(CodeRecallTooLarge))
}

// With CAFile, a recall verifies the bank's certificate against the file's
// CAs, re-read when the file changes; without it, against the system's,
// which do not know a cluster's own CA.
func TestHTTPRecallerCAFile(t *testing.T) {
	bank := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"items":[{"id":"o1","text":"t","score":0.9,"tokens":1}]}`))
	}))
	defer bank.Close()
	bankCA := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: bank.Certificate().Raw})
	otherCA := selfSignedCA(t)
	req := plan.MemoryRequest{Bank: plan.BankRef{Namespace: "shop", Name: "customers"}, Endpoint: bank.URL, Query: "q", MaxTokens: 100}
	wantCode := func(what string, err error, want plan.MemoryCode) {
		t.Helper()
		var re *plan.RecallError
		if !errors.As(err, &re) || re.Code != want {
			t.Errorf("%s: %v, want code %s", what, err, want)
		}
	}

	rc := NewHTTPRecaller("")
	_, err := rc.Recall(context.Background(), req)
	wantCode("the system's roots", err, plan.MemoryRecallFailed)

	caFile := filepath.Join(t.TempDir(), "ca.crt")
	rc.CAFile = caFile
	_, err = rc.Recall(context.Background(), req)
	wantCode("a missing CA file", err, CodeCAUnreadable)
	if err := os.WriteFile(caFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = rc.Recall(context.Background(), req)
	wantCode("a CA file without a certificate", err, CodeCAUnreadable)

	write := func(data []byte, mod time.Time) {
		t.Helper()
		if err := os.WriteFile(caFile, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(caFile, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	write(otherCA, now.Add(-time.Minute))
	_, err = rc.Recall(context.Background(), req)
	wantCode("another CA", err, plan.MemoryRecallFailed)
	// A bundle of both, as during a CA's rotation: re-read, and verified.
	write(append(otherCA, bankCA...), now)
	if items, err := rc.Recall(context.Background(), req); err != nil || len(items) != 1 {
		t.Fatalf("the bank's CA in the file: %v, %v", items, err)
	}
	if items, err := rc.Recall(context.Background(), req); err != nil || len(items) != 1 {
		t.Fatalf("again, the file unchanged: %v, %v", items, err)
	}
}

// selfSignedCA is a CA certificate (PEM) no server in these tests uses.
func selfSignedCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other-ca"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
