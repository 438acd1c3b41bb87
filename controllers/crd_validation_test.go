package controllers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/promptops/promptops/internal/testenv"
)

// decodeYAML splits multi-document YAML into unstructured objects.
func decodeYAML(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	objs, err := testenv.DecodeObjects(data)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func TestSamplesAreAccepted(t *testing.T) {
	ns := newNamespace(t)
	files, err := filepath.Glob(filepath.Join(testenv.Root(), "config", "samples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples found: %v", err)
	}
	kinds := map[string]int{}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range decodeYAML(t, data) {
			u.SetNamespace(ns)
			if err := k8sClient.Create(context.Background(), u); err != nil {
				t.Errorf("%s: %s %s rejected: %v", filepath.Base(f), u.GetKind(), u.GetName(), err)
			}
			kinds[u.GetKind()]++
		}
	}
	if kinds["PromptTemplate"] < 3 || kinds["MemoryBank"] < 1 {
		t.Errorf("samples should hold at least 3 PromptTemplates and a MemoryBank, got %v", kinds)
	}
}

const validTemplate = `
apiVersion: promptops.io/v1
kind: PromptTemplate
metadata: {name: valid}
spec:
  budget: {maxTokens: 1000}
  sections:
  - name: role
    text: You are helpful.
  - name: context
    runtime: {reserveTokens: 100}
    truncation: {priority: 2, minTokens: 10}
  - name: task
    intent: true
    truncation: {policy: Never}
  intents:
  - name: chat
    instruction: Answer.
`

const validBank = `
apiVersion: promptops.io/v1
kind: MemoryBank
metadata: {name: valid}
spec:
  store:
    postgres: {dsnSecretRef: {name: db, key: dsn}}
  llm: {baseURL: "http://llm:8000/v1", model: m}
`

// mutate applies a YAML merge-style change: path elements are map keys or
// list indexes ("sections", "0", "name").
func set(obj map[string]any, value any, path ...string) {
	var cur any = obj
	for i, p := range path {
		last := i == len(path)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				if value == nil {
					delete(c, p)
				} else {
					c[p] = value
				}
				return
			}
			cur = c[p]
		case []any:
			idx := int(p[0] - '0')
			if last {
				c[idx] = value
				return
			}
			cur = c[idx]
		}
	}
}

func fromYAML(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestInvalidManifestsAreRejected(t *testing.T) {
	ns := newNamespace(t)
	cases := []struct {
		name   string
		base   string
		mutate func(o map[string]any)
		want   string
	}{
		{"budget missing", validTemplate, func(o map[string]any) { set(o, nil, "spec", "budget") }, "spec.budget: Required value"},
		{"maxTokens zero", validTemplate, func(o map[string]any) { set(o, int64(0), "spec", "budget", "maxTokens") }, "spec.budget.maxTokens: Invalid value: 0: spec.budget.maxTokens in body should be greater than or equal to 1"},
		{"maxTokens too large", validTemplate, func(o map[string]any) { set(o, int64(2000001), "spec", "budget", "maxTokens") }, "should be less than or equal to 2000000"},
		{"unknown encoding", validTemplate, func(o map[string]any) { set(o, "p50k_base", "spec", "encoding") }, `spec.encoding: Unsupported value: "p50k_base"`},
		{"unknown onExceed", validTemplate, func(o map[string]any) { set(o, "Ignore", "spec", "budget", "onExceed") }, `spec.budget.onExceed: Unsupported value: "Ignore"`},
		{"no sections", validTemplate, func(o map[string]any) { set(o, []any{}, "spec", "sections") }, "spec.sections: Invalid value: 0: spec.sections in body should have at least 1 items"},
		{"no intents", validTemplate, func(o map[string]any) { set(o, []any{}, "spec", "intents") }, "spec.intents: Invalid value: 0: spec.intents in body should have at least 1 items"},
		{"duplicate section names", validTemplate, func(o map[string]any) { set(o, "role", "spec", "sections", "1", "name") }, `spec.sections[1]: Duplicate value: {"name":"role"}`},
		{"duplicate intent names", validTemplate, func(o map[string]any) {
			set(o, append(o["spec"].(map[string]any)["intents"].([]any), fromYAML(t, "{name: chat, instruction: again}")), "spec", "intents")
		}, `spec.intents[1]: Duplicate value: {"name":"chat"}`},
		{"no intent section", validTemplate, func(o map[string]any) { set(o, fromYAML(t, "{name: task, text: hi}"), "spec", "sections", "2") }, "exactly one section must have intent: true"},
		{"two intent sections", validTemplate, func(o map[string]any) { set(o, fromYAML(t, "{name: context, intent: true}"), "spec", "sections", "1") }, "exactly one section must have intent: true"},
		{"section with text and runtime", validTemplate, func(o map[string]any) { set(o, "x", "spec", "sections", "1", "text") }, "a section has exactly one of text (or from), runtime, memory, or intent: true"},
		{"section with no content", validTemplate, func(o map[string]any) { set(o, fromYAML(t, "{name: empty}"), "spec", "sections", "0") }, "a section has exactly one of text (or from), runtime, memory, or intent: true"},
		{"reserveTokens not below maxTokens", validTemplate, func(o map[string]any) { set(o, int64(1000), "spec", "sections", "1", "runtime", "reserveTokens") }, "runtime.reserveTokens must be less than budget.maxTokens"},
		{"memory and runtime", validTemplate, func(o map[string]any) {
			set(o, fromYAML(t, "{bankRef: {name: b}, query: {fromRequest: true}, reserveTokens: 10}"), "spec", "sections", "1", "memory")
		}, "a section has exactly one of text (or from), runtime, memory, or intent: true"},
		{"memory with both queries", validTemplate, func(o map[string]any) {
			set(o, fromYAML(t, "{name: role, memory: {bankRef: {name: b}, query: {fromRuntime: context, fromRequest: true}, reserveTokens: 10}}"), "spec", "sections", "0")
		}, "memory.query needs exactly one of fromRuntime and fromRequest: true"},
		{"memory with no query", validTemplate, func(o map[string]any) {
			set(o, fromYAML(t, "{name: role, memory: {bankRef: {name: b}, query: {}, reserveTokens: 10}}"), "spec", "sections", "0")
		}, "memory.query needs exactly one of fromRuntime and fromRequest: true"},
		{"memory scope from both", validTemplate, func(o map[string]any) {
			set(o, fromYAML(t, "{name: role, memory: {bankRef: {name: b}, query: {fromRequest: true}, scope: {fromRuntime: context, fromRequest: true}, reserveTokens: 10}}"), "spec", "sections", "0")
		}, "memory.scope needs exactly one of fromRuntime and fromRequest: true"},
		{"memory scope from a static section", validTemplate, func(o map[string]any) {
			set(o, fromYAML(t, "{name: role, memory: {bankRef: {name: b}, query: {fromRequest: true}, scope: {fromRuntime: task}, reserveTokens: 10}}"), "spec", "sections", "0")
		}, "memory.scope.fromRuntime must name a runtime section of this template"},
		{"memory query from a static section", validTemplate, func(o map[string]any) {
			set(o, fromYAML(t, "{name: role, memory: {bankRef: {name: b}, query: {fromRuntime: task}, reserveTokens: 10}}"), "spec", "sections", "0")
		}, "memory.query.fromRuntime must name a runtime section of this template"},
		{"memory query from no section", validTemplate, func(o map[string]any) {
			set(o, fromYAML(t, "{name: role, memory: {bankRef: {name: b}, query: {fromRuntime: nowhere}, reserveTokens: 10}}"), "spec", "sections", "0")
		}, "memory.query.fromRuntime must name a runtime section of this template"},
		{"memory reserve not below maxTokens", validTemplate, func(o map[string]any) {
			set(o, fromYAML(t, "{name: role, memory: {bankRef: {name: b}, query: {fromRequest: true}, reserveTokens: 1000}}"), "spec", "sections", "0")
		}, "memory.reserveTokens must be less than budget.maxTokens"},
		{"memory reserve zero", validTemplate, func(o map[string]any) {
			set(o, fromYAML(t, "{name: role, memory: {bankRef: {name: b}, query: {fromRequest: true}, reserveTokens: 0}}"), "spec", "sections", "0")
		}, "spec.sections[0].memory.reserveTokens: Invalid value: 0"},
		{"memory minScore above 1000", validTemplate, func(o map[string]any) {
			set(o, fromYAML(t, "{name: role, memory: {bankRef: {name: b}, query: {fromRequest: true}, reserveTokens: 10, minScore: 1001}}"), "spec", "sections", "0")
		}, "spec.sections[0].memory.minScore: Invalid value: 1001"},
		{"memory minScore a float", validTemplate, func(o map[string]any) {
			set(o, fromYAML(t, "{name: role, memory: {bankRef: {name: b}, query: {fromRequest: true}, reserveTokens: 10, minScore: 0.5}}"), "spec", "sections", "0")
		}, "spec.sections[0].memory.minScore: Invalid value"},
		{"memory maxItems zero", validTemplate, func(o map[string]any) {
			set(o, fromYAML(t, "{name: role, memory: {bankRef: {name: b}, query: {fromRequest: true}, reserveTokens: 10, maxItems: 0}}"), "spec", "sections", "0")
		}, "spec.sections[0].memory.maxItems: Invalid value: 0"},
		{"memory bank name invalid", validTemplate, func(o map[string]any) {
			set(o, fromYAML(t, "{name: role, memory: {bankRef: {name: B_1}, query: {fromRequest: true}, reserveTokens: 10}}"), "spec", "sections", "0")
		}, "spec.sections[0].memory.bankRef.name: Invalid value"},
		{"memory never cut", validTemplate, func(o map[string]any) {
			set(o, fromYAML(t, "{name: role, memory: {bankRef: {name: b}, query: {fromRequest: true}, reserveTokens: 10}, truncation: {policy: Never}}"), "spec", "sections", "0")
		}, "a memory section is always cut by priority"},
		{"minTokens not below maxTokens", validTemplate, func(o map[string]any) { set(o, int64(5000), "spec", "sections", "1", "truncation", "minTokens") }, "truncation.minTokens must be less than budget.maxTokens"},
		{"priority above 100", validTemplate, func(o map[string]any) { set(o, int64(101), "spec", "sections", "1", "truncation", "priority") }, "spec.sections[1].truncation.priority: Invalid value: 101"},
		{"priority with policy Never", validTemplate, func(o map[string]any) {
			set(o, fromYAML(t, "{policy: Never, priority: 3}"), "spec", "sections", "1", "truncation")
		}, "priority and minTokens apply only to policy Priority"},
		{"section name with upper case", validTemplate, func(o map[string]any) { set(o, "Role", "spec", "sections", "0", "name") }, `spec.sections[0].name: Invalid value: "Role"`},
		{"intent name with underscore", validTemplate, func(o map[string]any) { set(o, "deep_dive", "spec", "intents", "0", "name") }, `spec.intents[0].name: Invalid value: "deep_dive"`},
		{"intent with no instruction", validTemplate, func(o map[string]any) { set(o, fromYAML(t, "{name: chat}"), "spec", "intents", "0") }, "an intent needs instruction or from"},
		{"invalid variable name", validTemplate, func(o map[string]any) { set(o, map[string]any{"1st": "x"}, "spec", "variables") }, "variable names are letters, digits and '_'"},
		{"configMapKeyRef without key", validTemplate, func(o map[string]any) {
			set(o, fromYAML(t, "{configMapKeyRef: {name: cm}}"), "spec", "sections", "0", "from")
		}, "spec.sections[0].from.configMapKeyRef.key: Required value"},
		{"bank without store", validBank, func(o map[string]any) { set(o, map[string]any{}, "spec", "store") }, "store needs exactly one of postgres or sqlite"},
		{"bank with two stores", validBank, func(o map[string]any) { set(o, fromYAML(t, "{path: /data/b.db}"), "spec", "store", "sqlite") }, "store needs exactly one of postgres or sqlite"},
		{"bank maxObservations zero", validBank, func(o map[string]any) { set(o, int64(0), "spec", "maxObservations") }, "spec.maxObservations: Invalid value: 0"},
		{"bank maxObservationsPerScope above maxObservations", validBank, func(o map[string]any) {
			set(o, int64(10), "spec", "maxObservations")
			set(o, int64(11), "spec", "maxObservationsPerScope")
		}, "maxObservationsPerScope must not exceed maxObservations"},
		{"bank redaction secrets unknown", validBank, func(o map[string]any) { set(o, fromYAML(t, "{secrets: Mask}"), "spec", "redaction") }, `spec.redaction.secrets: Unsupported value: "Mask"`},
		{"bank redaction personal data unknown", validBank, func(o map[string]any) { set(o, fromYAML(t, "{personalData: [Email, Address]}"), "spec", "redaction") }, `spec.redaction.personalData[1]: Unsupported value: "Address"`},
		{"bank retention under a minute", validBank, func(o map[string]any) { set(o, fromYAML(t, "{maxAge: 30s}"), "spec", "retention") }, "retention.maxAge must be at least 1m"},
		{"bank retention negative", validBank, func(o map[string]any) { set(o, fromYAML(t, "{maxAge: -720h}"), "spec", "retention") }, "retention.maxAge must be at least 1m"},
		{"bank retention without maxAge", validBank, func(o map[string]any) { set(o, map[string]any{}, "spec", "retention") }, "spec.retention.maxAge: Required value"},
		{"bank parallelism zero", validBank, func(o map[string]any) { set(o, fromYAML(t, "{parallelism: 0}"), "spec", "consolidation") }, "spec.consolidation.parallelism: Invalid value: 0"},
		{"bank parallelism 33", validBank, func(o map[string]any) { set(o, fromYAML(t, "{parallelism: 33}"), "spec", "consolidation") }, "spec.consolidation.parallelism: Invalid value: 33"},
		{"bank batchSize above 100", validBank, func(o map[string]any) { set(o, fromYAML(t, "{batchSize: 101}"), "spec", "consolidation") }, "spec.consolidation.batchSize: Invalid value: 101"},
		{"bank baseURL not http", validBank, func(o map[string]any) { set(o, "ftp://llm/v1", "spec", "llm", "baseURL") }, "baseURL must be an http:// or https:// URL"},
		{"bank without llm model", validBank, func(o map[string]any) { set(o, nil, "spec", "llm", "model") }, "spec.llm.model: Required value"},
		{"bank embeddings without model", validBank, func(o map[string]any) {
			set(o, fromYAML(t, "{baseURL: http://tei:8080/v1}"), "spec", "embeddings")
		}, "spec.embeddings.model: Required value"},
		{"bank embeddings baseURL not http", validBank, func(o map[string]any) {
			set(o, fromYAML(t, "{baseURL: tei:8080/v1, model: e5}"), "spec", "embeddings")
		}, "baseURL must be an http:// or https:// URL"},
		{"bank embeddings dimensions too small", validBank, func(o map[string]any) {
			set(o, fromYAML(t, "{baseURL: http://tei/v1, model: e5, dimensions: 4}"), "spec", "embeddings")
		}, "spec.embeddings.dimensions: Invalid value: 4"},
		{"bank embeddings batchSize zero", validBank, func(o map[string]any) {
			set(o, fromYAML(t, "{baseURL: http://tei/v1, model: e5, batchSize: 0}"), "spec", "embeddings")
		}, "spec.embeddings.batchSize: Invalid value: 0"},
		{"bank embeddings recallSimilarity above 1000", validBank, func(o map[string]any) {
			set(o, fromYAML(t, "{baseURL: http://tei/v1, model: e5, recallSimilarity: 1001}"), "spec", "embeddings")
		}, "spec.embeddings.recallSimilarity: Invalid value: 1001"},
		{"bank embeddings key without name", validBank, func(o map[string]any) {
			set(o, fromYAML(t, "{baseURL: http://tei/v1, model: e5, apiKeySecretRef: {key: k}}"), "spec", "embeddings")
		}, "spec.embeddings.apiKeySecretRef.name: Required value"},
		{"bank duplicateSimilarity a float", validBank, func(o map[string]any) {
			set(o, fromYAML(t, "{duplicateSimilarity: 0.97}"), "spec", "consolidation")
		}, "spec.consolidation.duplicateSimilarity: Invalid value"},
		{"bank duplicateSimilarity below 500", validBank, func(o map[string]any) {
			set(o, fromYAML(t, "{duplicateSimilarity: 90}"), "spec", "consolidation")
		}, "spec.consolidation.duplicateSimilarity: Invalid value: 90"},
		{"bank serving replicas zero", validBank, func(o map[string]any) { set(o, fromYAML(t, "{replicas: 0}"), "spec", "serving") }, "spec.serving.replicas: Invalid value: 0"},
		{"bank serving replicas above 10", validBank, func(o map[string]any) { set(o, fromYAML(t, "{replicas: 11}"), "spec", "serving") }, "spec.serving.replicas: Invalid value: 11"},
		{"bank served from sqlite without a claim", validBank, func(o map[string]any) {
			set(o, fromYAML(t, "{sqlite: {path: /data/b.db}}"), "spec", "store")
			set(o, map[string]any{}, "spec", "serving")
		}, "serving a bank in SQLite needs store.sqlite.persistentVolumeClaimName"},
		{"bank served from sqlite by two replicas", validBank, func(o map[string]any) {
			set(o, fromYAML(t, "{sqlite: {path: /data/b.db, persistentVolumeClaimName: data}}"), "spec", "store")
			set(o, fromYAML(t, "{replicas: 2}"), "spec", "serving")
		}, "a bank in SQLite is served by one replica"},
		{"bank sqlite relative path", validBank, func(o map[string]any) {
			set(o, fromYAML(t, "{sqlite: {path: data/b.db}}"), "spec", "store")
		}, "spec.store.sqlite.path: Invalid value"},
	}
	for _, c := range []struct{ path, want string }{
		{"/bank.db", "store.sqlite.path must be in a directory, not directly in /"},
		{"/etc/promptops/bank.db", "store.sqlite.path must not be under /etc/promptops"},
		{"/etc/promptops", "store.sqlite.path must not be under /etc/promptops"},
		{"/dev/bank.db", "store.sqlite.path must not be under /dev, /proc or /sys"},
		{"/proc/1/bank.db", "store.sqlite.path must not be under /dev, /proc or /sys"},
		{"/sys/bank.db", "store.sqlite.path must not be under /dev, /proc or /sys"},
		{"/data//bank.db", "store.sqlite.path must be a clean absolute path"},
		{"/data/../etc/promptops/bank.db", "store.sqlite.path must be a clean absolute path"},
	} {
		c := c
		cases = append(cases, struct {
			name   string
			base   string
			mutate func(o map[string]any)
			want   string
		}{"bank sqlite path " + c.path, validBank, func(o map[string]any) {
			set(o, map[string]any{"sqlite": map[string]any{"path": c.path}}, "spec", "store")
		}, fmt.Sprintf("spec.store.sqlite.path: Invalid value: %q: %s", c.path, c.want)})
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := decodeYAML(t, []byte(tc.base))[0]
			u.SetNamespace(ns)
			u.SetName(fmt.Sprintf("case-%d", i))
			tc.mutate(u.Object)
			err := k8sClient.Create(context.Background(), u)
			if err == nil {
				t.Fatalf("accepted; want rejection with %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("rejected with\n  %v\nwant message containing\n  %q", err, tc.want)
			}
		})
	}
	// The base manifests themselves are valid, so each rejection above is
	// caused by its own change.
	for i, base := range []string{validTemplate, validBank} {
		u := decodeYAML(t, []byte(base))[0]
		u.SetNamespace(ns)
		u.SetName("base-" + string(rune('a'+i)))
		if err := k8sClient.Create(context.Background(), u); err != nil {
			t.Fatalf("valid base rejected: %v", err)
		}
	}
	// A retention of a minute or more is a valid one.
	for i, maxAge := range []string{"1m", "720h", "2160h30m"} {
		u := decodeYAML(t, []byte(validBank))[0]
		u.SetNamespace(ns)
		u.SetName(fmt.Sprintf("retention-%d", i))
		set(u.Object, map[string]any{"maxAge": maxAge}, "spec", "retention")
		if err := k8sClient.Create(context.Background(), u); err != nil {
			t.Errorf("retention.maxAge %s rejected: %v", maxAge, err)
		}
	}
}
