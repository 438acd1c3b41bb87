package controllers

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/llmtest"
)

// TestEmbeddingsDownFailsTheRunAndLosesNothing: the real `promptops
// consolidate` of a bank with spec.embeddings, its embeddings server down
// (answering 503, or refusing connections), with the Job's own environment.
// The run fails, lastRun says why without the key, the store's location or
// a fact's text, and every fact stays pending for the next run.
func TestEmbeddingsDownFailsTheRunAndLosesNothing(t *testing.T) {
	const key = "sk-embeddings-key-7f3a9c"
	emb := llmtest.NewEmbeddings(func(text string, _ int) ([]float32, error) {
		return llmtest.TopicVector(64, []string{text}, []float64{1}), nil
	})
	defer emb.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + l.Addr().String() + "/v1"
	_ = l.Close() // nothing listens there any more

	for _, tc := range []struct {
		name, baseURL, want string
	}{
		{"unavailable", emb.BaseURL(), "503"},
		{"refused", refused, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			createYAML(t, ns, bankYAML("emb", `  mission: Track pets.
  embeddings:
    baseURL: "http://tei.local:8080/v1"
    model: e5
    apiKeySecretRef: {name: emb-key, key: apiKey}
`))
			mb := waitMB(t, ns, "emb", hasCondition(promptopsv1.ConditionReady, metav1.ConditionTrue, ""))
			if mb.Status.Recall != promptopsv1.RecallHybrid {
				t.Fatalf("a bank with spec.embeddings says its recall is hybrid: %q", mb.Status.Recall)
			}
			emb.SetDown(true)
			request(t, ns, "emb", "go")
			job := waitJobs(t, ns, 1)[0]

			bin := promptopsBinary(t)
			dir := t.TempDir()
			srv := llmtest.New(llmtest.OnePerFact)
			defer srv.Close()
			store := "sqlite://" + filepath.Join(dir, "bank.db")
			facts := filepath.Join(dir, "facts.jsonl")
			texts := []string{"Rex is Alice's dog", "Tom is Bob's cat"}
			_ = os.WriteFile(facts, []byte(`{"text":"`+texts[0]+`"}`+"\n"+`{"text":"`+texts[1]+`"}`+"\n"), 0o644)
			if out, err := exec.Command(bin, "facts", "import", "--bank", ns+"/emb", "--store", store, facts).CombinedOutput(); err != nil {
				t.Fatalf("import: %v %s", err, out)
			}
			mission := filepath.Join(dir, "mission.txt")
			_ = os.WriteFile(mission, []byte(getCM(t, ns, "emb-consolidation").Data[missionKey]), 0o644)
			term := filepath.Join(dir, "termination-log")
			cmd := exec.Command(bin, "consolidate")
			sawKey, sawURL := false, false
			for _, e := range job.Spec.Template.Spec.Containers[0].Env {
				switch e.Name {
				case "PROMPTOPS_STORE", "PROMPTOPS_MISSION_FILE", "PROMPTOPS_TERMINATION_LOG", "PROMPTOPS_LLM_BASE_URL", "PROMPTOPS_LLM_RETRIES":
				case "PROMPTOPS_EMBEDDINGS_BASE_URL":
					sawURL = true
					cmd.Env = append(cmd.Env, e.Name+"="+tc.baseURL)
				case "PROMPTOPS_EMBEDDINGS_API_KEY":
					// What the kubelet resolves from the Secret.
					if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "emb-key" {
						t.Fatalf("the key comes from the Secret: %+v", e)
					}
					sawKey = true
					cmd.Env = append(cmd.Env, e.Name+"="+key)
				default:
					cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
				}
			}
			if !sawKey || !sawURL {
				t.Fatalf("the Job gets the embeddings server and its key: %+v", job.Spec.Template.Spec.Containers[0].Env)
			}
			cmd.Env = append(cmd.Env, "PROMPTOPS_STORE="+store, "PROMPTOPS_MISSION_FILE="+mission, "PROMPTOPS_TERMINATION_LOG="+term,
				"PROMPTOPS_LLM_BASE_URL="+srv.BaseURL(), "PROMPTOPS_LLM_RETRIES=1")
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("consolidate succeeded with its embeddings server down:\n%s", out)
			}
			for _, secret := range append([]string{key, dir}, texts...) {
				if strings.Contains(string(out), secret) {
					t.Fatalf("the run's output holds %q:\n%s", secret, out)
				}
			}
			if n := len(srv.Requests()); n != 0 {
				t.Fatalf("%d LLM calls: a batch without its recall is not sent", n)
			}
			msg, err := os.ReadFile(term)
			if err != nil {
				t.Fatal(err)
			}
			finishJob(t, &job, false, string(msg))
			mb = waitMB(t, ns, "emb", hasCondition(promptopsv1.ConditionLastRunFailed, metav1.ConditionTrue, promptopsv1.ReasonJobFailed))
			lr := mb.Status.LastRun
			if lr == nil || lr.JobName != job.Name || lr.Succeeded || lr.Recall != "hybrid" || lr.FactsConsolidated != 0 || lr.FactsFailed != 0 ||
				lr.PendingFacts != 2 || lr.EmbeddingCalls == 0 || !strings.Contains(lr.Message, "embeddings") || !strings.Contains(lr.Message, tc.want) {
				t.Fatalf("lastRun %+v", lr)
			}
			for _, secret := range append([]string{key, dir}, texts...) {
				for _, where := range []string{lr.Message, conditionMessage(mb.Status.Conditions, promptopsv1.ConditionLastRunFailed)} {
					if strings.Contains(where, secret) {
						t.Fatalf("status holds %q: %s", secret, where)
					}
				}
			}

			// Nothing is lost: both facts are pending, unclaimed, and the
			// next run (its server back) consolidates them.
			list, err := exec.Command(bin, "facts", "list", "--bank", ns+"/emb", "--store", store, "--status", "pending").CombinedOutput()
			if err != nil || strings.Count(string(list), "pending") != 2 {
				t.Fatalf("pending facts: %v\n%s", err, list)
			}
			emb.SetDown(false)
			again := exec.Command(bin, "consolidate")
			for _, e := range cmd.Env {
				if !strings.HasPrefix(e, "PROMPTOPS_EMBEDDINGS_BASE_URL=") {
					again.Env = append(again.Env, e)
				}
			}
			again.Env = append(again.Env, "PROMPTOPS_EMBEDDINGS_BASE_URL="+emb.BaseURL())
			if out, err := again.CombinedOutput(); err != nil {
				t.Fatalf("the run after the server came back: %v\n%s", err, out)
			}
			list, err = exec.Command(bin, "facts", "list", "--bank", ns+"/emb", "--store", store, "--status", "consolidated").CombinedOutput()
			if err != nil || strings.Count(string(list), "consolidated") != 2 {
				t.Fatalf("consolidated facts: %v\n%s", err, list)
			}
		})
	}
}
