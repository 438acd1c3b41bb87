package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/promptops/promptops/controllers"
	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/llmtest"
	"github.com/promptops/promptops/internal/pgtest"
)

var pg *pgtest.Server

// TestMain runs the verbs in an empty environment: they read it only
// through lookupEnv, so a developer's own OPENAI_API_KEY or PROMPTOPS_*
// cannot change a result. PostgreSQL starts only for the tests that use a
// store, never for the pure render and assemble tests.
func TestMain(m *testing.M) {
	lookupEnv = func(string) (string, bool) { return "", false }
	code := m.Run()
	if pg != nil {
		pg.Stop()
	}
	os.Exit(code)
}

var (
	pgOnce sync.Once
	pgErr  error
)

func storeURLs(t *testing.T) map[string]string {
	t.Helper()
	pgOnce.Do(func() { pg, pgErr = pgtest.Start() })
	if pgErr != nil {
		t.Fatalf("pgtest: %v", pgErr)
	}
	dsn, err := pg.NewDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{"postgres": dsn, "sqlite": "sqlite://" + filepath.Join(t.TempDir(), "bank.db")}
}

// withEnv sets variables for the verbs' lookups during a test.
func withEnv(t *testing.T, env map[string]string) {
	t.Helper()
	old := lookupEnv
	lookupEnv = func(k string) (string, bool) {
		if v, ok := env[k]; ok {
			return v, true
		}
		return old(k)
	}
	t.Cleanup(func() { lookupEnv = old })
}

const factsJSONL = `{"id": "00000000-0000-4000-8000-000000000001", "text": "Alice works at Acme Corp", "entities": ["Alice"], "occurredStart": "2024-01-15", "mentionedAt": "2024-01-16T10:00:00Z"}
{"id": "00000000-0000-4000-8000-000000000002", "text": "Bob has a dog named Rex", "entities": ["Bob"], "tags": ["pets"]}

{"text": "张伟在北京工作", "entities": ["张伟"], "occurredStart": "2024-05-01"}
`

func TestFactsImportThenConsolidate(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			facts := filepath.Join(dir, "facts.jsonl")
			_ = os.WriteFile(facts, []byte(factsJSONL), 0o644)
			code, out, errOut := run(t, "", "facts", "import", "--bank", "agents/support", "--store", url, facts)
			if code != ExitOK || !strings.Contains(out, "imported 3 facts") {
				t.Fatalf("import: %d %s %s", code, out, errOut)
			}
			srv := llmtest.New(llmtest.OnePerFact)
			defer srv.Close()
			mission := filepath.Join(dir, "mission.txt")
			_ = os.WriteFile(mission, []byte("Track where people work and their pets."), 0o644)
			term := filepath.Join(dir, "termination-log")
			// Settings from the environment, as the Job passes them.
			withEnv(t, map[string]string{"PROMPTOPS_STORE": url, "PROMPTOPS_BATCH_SIZE": "2", "PROMPTOPS_TERMINATION_LOG": term, "OPENAI_API_KEY": ""})
			code, out, errOut = run(t, "", "consolidate", "--bank", "agents/support", "--llm-base-url", srv.BaseURL(), "--model", "m", "--mission-file", mission)
			if code != ExitOK {
				t.Fatalf("consolidate: %d %s", code, errOut)
			}
			var sum consolidation.Summary
			if err := json.Unmarshal([]byte(out), &sum); err != nil {
				t.Fatalf("stdout is not the JSON summary: %v %q", err, out)
			}
			if sum.FactsConsolidated != 3 || sum.Created != 3 || sum.Observations != 3 || sum.Batches != 2 || sum.MissionHash != consolidation.MissionHash("Track where people work and their pets.") {
				t.Fatalf("summary %+v", sum)
			}
			if strings.Count(errOut, "batch of") != 2 {
				t.Fatalf("want a progress line per batch:\n%s", errOut)
			}
			data, err := os.ReadFile(term)
			if err != nil || len(data) > MaxTerminationMessage || !strings.Contains(string(data), `"factsConsolidated":3`) {
				t.Fatalf("termination log %q %v", data, err)
			}
			reqs := srv.Requests()
			if !strings.Contains(reqs[0].System, "## MISSION\nTrack where people work and their pets.") || reqs[0].Authorization != "" {
				t.Fatalf("mission or auth: %q", reqs[0].Authorization)
			}
			code, out, _ = run(t, "", "observations", "list", "-o", "json", "--bank", "agents/support")
			var obs []consolidation.Observation
			if code != ExitOK || json.Unmarshal([]byte(out), &obs) != nil || len(obs) != 3 {
				t.Fatalf("observations list: %d %s", code, out)
			}
			want := map[string]int{"Alice works at Acme Corp": 1, "Bob has a dog named Rex": 1, "张伟在北京工作": 1}
			for _, o := range obs {
				if want[o.Text] != 1 || o.ProofCount != 1 || len(o.SourceFactIDs) != 1 {
					t.Errorf("unexpected observation %+v", o)
				}
			}
			if code, out, _ = run(t, "", "facts", "list", "--bank", "agents/support", "--status", "consolidated"); code != ExitOK || strings.Count(out, "consolidated") != 3 {
				t.Fatalf("facts list:\n%s", out)
			}
		})
	}
}

func TestFactsImportBadLineImportsNothing(t *testing.T) {
	url := "sqlite://" + filepath.Join(t.TempDir(), "bank.db")
	bad := factsJSONL + `{"text": "when?", "occurredStart": "last tuesday"}` + "\n"
	code, _, errOut := run(t, bad, "facts", "import", "--bank", "a/b", "--store", url, "-")
	if code != ExitInvalid || !strings.Contains(errOut, "line 5: occurredStart \"last tuesday\"") || !strings.Contains(errOut, "nothing imported") {
		t.Fatalf("%d %s", code, errOut)
	}
	code, _, errOut = run(t, `{"text": "x", "colour": "blue"}`, "facts", "import", "--bank", "a/b", "--store", url, "-")
	if code != ExitInvalid || !strings.Contains(errOut, "line 1: unknown field \"colour\"") {
		t.Fatalf("%d %s", code, errOut)
	}
	assertNoFacts(t, url, "a/b")
}

func TestConsolidateFailsWhenLLMUnreachableAndSendsKey(t *testing.T) {
	url := "sqlite://" + filepath.Join(t.TempDir(), "bank.db")
	run(t, factsJSONL, "facts", "import", "--bank", "a/b", "--store", url, "-")
	srv := llmtest.New(func(int, llmtest.Request) llmtest.Reply {
		return llmtest.Reply{Status: 503, Body: `{"error":{"message":"down"}}`}
	})
	defer srv.Close()
	term := filepath.Join(t.TempDir(), "term")
	withEnv(t, map[string]string{"OPENAI_API_KEY": "sk-test-secret", "PROMPTOPS_LLM_RETRIES": "1"})
	t.Setenv("OPENAI_API_KEY", "sk-test-secret")
	code, out, errOut := run(t, "", "consolidate", "--bank", "a/b", "--store", url, "--llm-base-url", srv.BaseURL(), "--model", "m", "--termination-log", term)
	if code != ExitFailed || !strings.Contains(out, `"error":"llm: chat completions answered 503: down"`) {
		t.Fatalf("%d %s %s", code, out, errOut)
	}
	if reqs := srv.Requests(); len(reqs) != 2 || reqs[0].Authorization != "Bearer sk-test-secret" {
		t.Fatalf("want one try and one retry with the key, got %d", len(reqs))
	}
	if strings.Contains(out+errOut, "sk-test-secret") {
		t.Fatal("the API key leaked into the output")
	}
	_, out, _ = run(t, "", "facts", "list", "--bank", "a/b", "--store", url, "--status", "pending", "-o", "json")
	var facts []consolidation.Fact
	if json.Unmarshal([]byte(out), &facts); len(facts) != 3 {
		t.Fatalf("facts must stay pending: %s", out)
	}
}

func TestTerminationMessageFits(t *testing.T) {
	s := consolidation.Summary{Error: strings.Repeat("x", 10000)}
	if n := len(terminationMessage(s)); n > MaxTerminationMessage {
		t.Fatalf("%d bytes", n)
	}
}

func TestConsolidateRejectsBadEnvInteger(t *testing.T) {
	withEnv(t, map[string]string{"PROMPTOPS_BATCH_SIZE": "eight"})
	code, _, errOut := run(t, "", "consolidate", "--bank", "a/b", "--store", "sqlite:///tmp/x.db", "--llm-base-url", "http://127.0.0.1:1/v1", "--model", "m")
	if code != ExitInvalid || !strings.Contains(errOut, `$PROMPTOPS_BATCH_SIZE="eight" is not an integer`) {
		t.Fatalf("%d %s", code, errOut)
	}
}

// TestConsolidateMaxTokensPerRun: the budget from the environment, as the
// Job passes it, cuts the run short before its first call here; the facts
// stay pending and the summary says why. A budget that is not a number is
// refused.
func TestConsolidateMaxTokensPerRun(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			facts := filepath.Join(dir, "facts.jsonl")
			_ = os.WriteFile(facts, []byte(factsJSONL), 0o644)
			if code, _, errOut := run(t, "", "facts", "import", "--bank", "agents/budget", "--store", url, facts); code != ExitOK {
				t.Fatal(errOut)
			}
			srv := llmtest.New(llmtest.OnePerFact)
			defer srv.Close()
			withEnv(t, map[string]string{"PROMPTOPS_STORE": url, "PROMPTOPS_MAX_TOKENS_PER_RUN": "1000", "OPENAI_API_KEY": ""})
			code, out, errOut := run(t, "", "consolidate", "--bank", "agents/budget", "--llm-base-url", srv.BaseURL(), "--model", "m")
			var sum consolidation.Summary
			if code != ExitOK || json.Unmarshal([]byte(out), &sum) != nil {
				t.Fatalf("%d %q %s", code, out, errOut)
			}
			if !strings.Contains(sum.CutShort, "maxTokensPerRun (1000)") || sum.PendingFacts != 3 || sum.LLMCalls != 0 || len(srv.Requests()) != 0 {
				t.Fatalf("summary %+v", sum)
			}
			if !strings.Contains(errOut, "maxTokensPerRun (1000) reached") {
				t.Fatalf("stderr lacks the reason:\n%s", errOut)
			}
			withEnv(t, map[string]string{"PROMPTOPS_MAX_TOKENS_PER_RUN": "lots"})
			if code, _, errOut := run(t, "", "consolidate", "--bank", "agents/budget", "--llm-base-url", srv.BaseURL(), "--model", "m"); code != ExitInvalid || !strings.Contains(errOut, "PROMPTOPS_MAX_TOKENS_PER_RUN") {
				t.Fatalf("%d %s", code, errOut)
			}
		})
	}
}

// TestConsolidateWithEmbeddings: the embeddings flags come from the
// environment like the Job sets them; the key reaches the server; the
// summary says the recall was hybrid. A server that is down fails the run
// with the reason, and every fact stays pending.
func TestConsolidateWithEmbeddings(t *testing.T) {
	url := "sqlite://" + filepath.Join(t.TempDir(), "bank.db")
	run(t, factsJSONL, "facts", "import", "--bank", "a/b", "--store", url, "-")
	srv := llmtest.New(llmtest.OnePerFact)
	defer srv.Close()
	emb := llmtest.NewEmbeddings(func(text string, dims int) ([]float32, error) {
		return llmtest.TopicVector(dims, []string{text}, []float64{1}), nil
	})
	defer emb.Close()
	keyFile := filepath.Join(t.TempDir(), "key")
	_ = os.WriteFile(keyFile, []byte("sk-emb-secret\n"), 0o600)
	emb.SetDown(true)
	withEnv(t, map[string]string{"PROMPTOPS_EMBEDDINGS_BASE_URL": emb.BaseURL(), "PROMPTOPS_EMBEDDINGS_MODEL": "e", "PROMPTOPS_EMBEDDINGS_DIMENSIONS": "32", "PROMPTOPS_LLM_RETRIES": "0"})
	code, out, errOut := run(t, "", "consolidate", "--bank", "a/b", "--store", url, "--llm-base-url", srv.BaseURL(), "--model", "m", "--embeddings-api-key-file", keyFile)
	if code != ExitFailed || !strings.Contains(out, `"error":"embeddings: embeddings answered 503: the embeddings server is down"`) || len(srv.Requests()) != 0 {
		t.Fatalf("%d %s %s", code, out, errOut)
	}
	emb.SetDown(false)
	code, out, errOut = run(t, "", "consolidate", "--bank", "a/b", "--store", url, "--llm-base-url", srv.BaseURL(), "--model", "m", "--embeddings-api-key-file", keyFile)
	var sum consolidation.Summary
	if code != ExitOK || json.Unmarshal([]byte(out), &sum) != nil || sum.FactsConsolidated != 3 || sum.Recall != "hybrid" || sum.EmbeddingCalls == 0 || sum.EmbeddingTokens == 0 {
		t.Fatalf("%d %s %s", code, out, errOut)
	}
	if strings.Contains(out+errOut, "sk-emb-secret") {
		t.Fatal("the key leaked into the output")
	}
	code, _, errOut = run(t, "", "consolidate", "--bank", "a/b", "--store", url, "--llm-base-url", srv.BaseURL(), "--model", "m", "--duplicate-similarity", "97")
	if code != ExitInvalid || !strings.Contains(errOut, "--duplicate-similarity 500..1000") {
		t.Fatalf("%d %s", code, errOut)
	}
}

// A run in which facts failed and none was consolidated exits with
// ConsolidateExitNoProgress, so its Job fails at once (its pod failure
// policy) instead of counting as succeeded; the summary still goes to
// stdout and the termination log, with the reason in "error".
func TestConsolidateEveryFactFailedExitsNonZero(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			if code, _, errOut := run(t, factsJSONL, "facts", "import", "--bank", "a/b", "--store", url, "-"); code != ExitOK {
				t.Fatal(errOut)
			}
			srv := llmtest.New(func(int, llmtest.Request) llmtest.Reply { return llmtest.Reply{Content: "not JSON at all"} })
			defer srv.Close()
			term := filepath.Join(t.TempDir(), "term")
			withEnv(t, map[string]string{"PROMPTOPS_STORE": url, "PROMPTOPS_MAX_ATTEMPTS": "1", "OPENAI_API_KEY": ""})
			code, out, errOut := run(t, "", "consolidate", "--bank", "a/b", "--llm-base-url", srv.BaseURL(), "--model", "m", "--termination-log", term)
			var sum consolidation.Summary
			if code != int(controllers.ConsolidateExitNoProgress) || json.Unmarshal([]byte(out), &sum) != nil {
				t.Fatalf("exit %d, stdout %q, stderr %s; want exit %d and the summary", code, out, errOut, controllers.ConsolidateExitNoProgress)
			}
			if sum.FactsFailed != 3 || sum.FactsConsolidated != 0 || sum.FailedFacts != 3 || !strings.Contains(sum.Error, "all 3 facts of the run failed") {
				t.Fatalf("summary %+v", sum)
			}
			if data, err := os.ReadFile(term); err != nil || !strings.Contains(string(data), `"factsFailed":3`) || !strings.Contains(string(data), "all 3 facts of the run failed") {
				t.Fatalf("termination log %q %v", data, err)
			}

			// Some progress is a success: one fact consolidated, one failed.
			if code, _, errOut := run(t, "", "facts", "retry", "--bank", "a/b"); code != ExitOK {
				t.Fatal(errOut)
			}
			srv.SetScript(func(_ int, req llmtest.Request) llmtest.Reply {
				if fs := llmtest.Facts(req.User); len(fs) == 1 && strings.HasPrefix(fs[0].Text, "Bob") {
					return llmtest.Reply{Content: "not JSON at all"}
				}
				return llmtest.OnePerFact(0, req)
			})
			withEnv(t, map[string]string{"PROMPTOPS_STORE": url, "PROMPTOPS_MAX_ATTEMPTS": "1", "PROMPTOPS_BATCH_SIZE": "1", "OPENAI_API_KEY": ""})
			code, out, errOut = run(t, "", "consolidate", "--bank", "a/b", "--llm-base-url", srv.BaseURL(), "--model", "m")
			if code != ExitOK || json.Unmarshal([]byte(out), &sum) != nil || sum.FactsFailed != 1 || sum.FactsConsolidated != 2 {
				t.Fatalf("partial run: exit %d, %s %s", code, out, errOut)
			}
		})
	}
}
