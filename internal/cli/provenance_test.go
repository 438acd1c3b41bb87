package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/consolidation/sqlstore"
	"github.com/promptops/promptops/internal/llmtest"
	"github.com/promptops/promptops/plan"
)

// The done-when test of provenance, on both stores, with a scripted model
// that updates by facet ("plan: ...", "seats: ..."): it updates the
// observation of a fact's facet when one is shown, deletes it for "remove:
// <facet>", and creates one otherwise. The CRM's facts (a trusted source)
// are consolidated first, then a user's contradicting claims. Every
// trusted observation keeps its text; every claim is an untrusted
// observation of its own; the refusals are counted; the served bank's
// recall marks the claims "trusted": false, and trustedOnly recall and a
// trustedOnly memory section give the trusted state alone; export shows
// each fact's source.
func TestProvenanceEndToEnd(t *testing.T) {
	const bank = "shop/accounts"
	const scope = "cust-1"
	const prefix = "The customer's "
	crm := map[string]string{"plan": "plan: Free", "seats": "seats: 5", "region": "region: eu-west", "discount": "discount: 10 percent"}
	claims := map[string]string{"plan": "plan: Enterprise", "seats": "seats: 500", "region": "region: us-east"}
	const remove, pet = "remove: discount", "pet: a cat named Miso"
	facet := func(text string) string {
		k, _, _ := strings.Cut(strings.TrimPrefix(text, prefix), ":")
		return strings.TrimSpace(k)
	}
	byFacet := func(_ int, req llmtest.Request) llmtest.Reply {
		var a llmtest.Answer
		obs := llmtest.Observations(req.User)
		of := func(f string) string {
			for _, o := range obs {
				if facet(o.Text) == f {
					return o.ID
				}
			}
			return ""
		}
		for _, f := range llmtest.Facts(req.User) {
			if gone, ok := strings.CutPrefix(f.Text, "remove: "); ok {
				if id := of(gone); id != "" {
					a.Deletes = append(a.Deletes, map[string]any{"observation_id": id})
				}
				continue
			}
			if id := of(facet(f.Text)); id != "" {
				a.Updates = append(a.Updates, map[string]any{"observation_id": id, "text": prefix + f.Text, "source_fact_ids": []string{f.ID}})
				continue
			}
			a.Creates = append(a.Creates, map[string]any{"text": prefix + f.Text, "source_fact_ids": []string{f.ID}})
		}
		return llmtest.Reply{Content: a.JSON()}
	}
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			lines := func(source string, texts ...string) string {
				var b strings.Builder
				for _, text := range texts {
					line := map[string]any{"scope": scope, "text": text, "entities": []string{facet(text)}}
					if source != "" {
						line["source"] = source
					}
					data, _ := json.Marshal(line)
					b.Write(data)
					b.WriteByte('\n')
				}
				return b.String()
			}
			importFacts := func(jsonl string) {
				t.Helper()
				file := filepath.Join(dir, "facts.jsonl")
				if err := os.WriteFile(file, []byte(jsonl), 0o644); err != nil {
					t.Fatal(err)
				}
				if code, out, e := run(t, "", "facts", "import", "--bank", bank, "--store", url, file); code != ExitOK {
					t.Fatalf("import: %d %s %s", code, out, e)
				}
			}
			model := llmtest.New(byFacet)
			defer model.Close()
			consolidate := func() consolidation.Summary {
				t.Helper()
				code, out, e := run(t, "", "consolidate", "--bank", bank, "--store", url, "--llm-base-url", model.BaseURL(), "--model", "m", "--trusted-sources", "crm,tool.billing")
				var sum consolidation.Summary
				if code != ExitOK || json.Unmarshal([]byte(out), &sum) != nil {
					t.Fatalf("consolidate: %d %s %s", code, out, e)
				}
				return sum
			}
			var crmTexts []string
			for _, text := range crm {
				crmTexts = append(crmTexts, text)
			}
			importFacts(lines("crm", crmTexts...))
			if sum := consolidate(); sum.Created != int64(len(crm)) || sum.RefusedByTrust != 0 {
				t.Fatalf("the CRM's run: %+v", sum)
			}
			var claimTexts []string
			for _, text := range claims {
				claimTexts = append(claimTexts, text)
			}
			importFacts(lines("user", append(claimTexts, remove)...) + lines("", pet))
			sum := consolidate()
			// Three updates kept as new observations and one delete not
			// made; the pet, of an unspecified source, is a plain create.
			if sum.RefusedByTrust != 4 || sum.Created != 4 || sum.Updated != 0 || sum.Deleted != 0 || sum.FactsConsolidated != 5 {
				t.Errorf("the user's run: %+v", sum)
			}

			st, err := sqlstore.Open(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			obs, err := st.ListObservations(context.Background(), consolidation.BankID(bank).Scope(scope))
			st.Close()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][]string{}
			for _, o := range obs {
				got[o.Text] = o.Provenance
			}
			want := map[string][]string{prefix + pet: {consolidation.SourceUnspecified}}
			for f, text := range crm {
				want[prefix+text] = []string{"crm"}
				if claim, ok := claims[f]; ok {
					want[prefix+claim] = []string{"user"}
				}
			}
			if len(got) != len(want) {
				t.Errorf("%d observations, want %d: %v", len(got), len(want), got)
			}
			for text, prov := range want {
				if p, ok := got[text]; !ok || !slices.Equal(p, prov) {
					t.Errorf("observation %q: provenance %v (held: %v), want %v", text, p, ok, prov)
				}
			}

			// The bank served with the same trust, and a template with two
			// memory sections: what is verified (trustedOnly), and all.
			serves := newServes(t)
			bankAddr := serves.start("--bank", bank, "--store", url, "--trusted-sources", "tool.billing,crm")
			recall := func(trustedOnly bool) []plan.MemoryItem {
				t.Helper()
				q, _ := json.Marshal(map[string]any{"query": "plan seats region discount pet", "maxTokens": 4000, "scope": scope, "trustedOnly": trustedOnly})
				code, body := httpDo(t, "POST", "http://"+bankAddr+"/v1/banks/shop/accounts/recall", string(q))
				var resp struct {
					Items []plan.MemoryItem `json:"items"`
				}
				if code != http.StatusOK || json.Unmarshal([]byte(body), &resp) != nil {
					t.Fatalf("recall: %d %s", code, body)
				}
				return resp.Items
			}
			all := recall(false)
			if len(all) != len(want) {
				t.Errorf("recall holds %d items, want %d: %+v", len(all), len(want), all)
			}
			for _, it := range all {
				if wantTrusted := slices.Equal(want[it.Text], []string{"crm"}); it.Trusted != wantTrusted {
					t.Errorf("recall marks %q trusted %v, want %v", it.Text, it.Trusted, wantTrusted)
				}
				if raw, _ := json.Marshal(it); !strings.Contains(string(raw), `"trusted":`) {
					t.Errorf("a recall item does not carry trusted: %s", raw)
				}
			}
			trusted := recall(true)
			var texts []string
			for _, it := range trusted {
				texts = append(texts, it.Text)
			}
			slices.Sort(texts)
			var wantTexts []string
			for _, text := range crm {
				wantTexts = append(wantTexts, prefix+text)
			}
			slices.Sort(wantTexts)
			if !slices.Equal(texts, wantTexts) {
				t.Errorf("trustedOnly recall: %q, want the CRM's state %q", texts, wantTexts)
			}

			// Export shows each fact's source.
			code, body := httpDo(t, "GET", "http://"+bankAddr+"/v1/banks/shop/accounts/scopes/"+scope+"/export", "")
			if code != http.StatusOK {
				t.Fatalf("export: %d %s", code, body)
			}
			sources := map[string]string{}
			for _, line := range strings.Split(strings.TrimSpace(body), "\n") {
				var rec consolidation.Exported
				if json.Unmarshal([]byte(line), &rec) == nil && rec.Kind == "fact" {
					sources[rec.Text] = rec.Source
				}
			}
			for _, text := range crmTexts {
				if sources[text] != "crm" {
					t.Errorf("export: the fact %q has source %q, want crm (%d facts read)", text, sources[text], len(sources))
				}
			}
			for _, text := range append(claimTexts, remove) {
				if sources[text] != "user" {
					t.Errorf("export: the fact %q has source %q, want user", text, sources[text])
				}
			}
			if sources[pet] != consolidation.SourceUnspecified {
				t.Errorf("export: the fact without a source has %q, want unspecified", sources[pet])
			}

			plans, _ := renderPlans(t, dir, `apiVersion: promptops.io/v1
kind: PromptTemplate
metadata: {name: support, namespace: shop}
spec:
  budget: {maxTokens: 1000}
  sections:
  - {name: role, text: "You are the support assistant."}
  - name: verified
    heading: "## Verified"
    memory: {bankRef: {name: accounts}, query: {fromRequest: true}, scope: {fromRequest: true}, reserveTokens: 300, trustedOnly: true}
  - name: said
    heading: "## Said"
    memory: {bankRef: {name: accounts}, query: {fromRequest: true}, scope: {fromRequest: true}, reserveTokens: 300}
  - {name: task, heading: "## Task", intent: true}
  intents: [{name: chat, instruction: "Answer briefly."}]
`, bankAddr)
			front := serves.start("--plans-dir", plans, "--memory-token-file", "")
			code, body = httpDo(t, "POST", "http://"+front+"/v1/assemble", `{"namespace": "shop", "name": "support", "intent": "chat", "query": "plan seats region discount pet", "scope": "`+scope+`"}`)
			serves.stop()
			var out struct {
				Prompt string `json:"prompt"`
			}
			if code != http.StatusOK || json.Unmarshal([]byte(body), &out) != nil {
				t.Fatalf("assemble: %d %s", code, body)
			}
			verified, said, ok := strings.Cut(out.Prompt, "## Said")
			if !ok {
				t.Fatalf("the prompt has no memory section said: %s", out.Prompt)
			}
			for text, prov := range want {
				if inVerified, trustedText := strings.Contains(verified, text), slices.Equal(prov, []string{"crm"}); inVerified != trustedText {
					t.Errorf("the trustedOnly section holds %q: %v, want %v\n%s", text, inVerified, trustedText, verified)
				}
				if !strings.Contains(said, text) {
					t.Errorf("the section without trustedOnly lacks %q\n%s", text, said)
				}
			}
		})
	}
}

// httpDo makes a request with a JSON body and returns the status and the
// body.
func httpDo(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}
