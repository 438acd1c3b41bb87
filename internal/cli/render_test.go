package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func samplesDir() string { return filepath.Join("..", "..", "config", "samples") }

func run(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = Main(args, strings.NewReader(stdin), &o, &e)
	return code, o.String(), e.String()
}

func TestRenderSamplesJSON(t *testing.T) {
	code, out, errOut := run(t, "", "render", "-f", samplesDir(), "-o", "json")
	if code != ExitFailed {
		t.Fatalf("exit %d, want 1 because of the over-budget sample; stderr: %s", code, errOut)
	}
	var got renderOutput
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	want := map[string]int{"ssa-pro": 6, "support-assistant": 5, "over-budget-demo": 2}
	over := map[string]bool{}
	for _, tpl := range got.Templates {
		if n, ok := want[tpl.Name]; !ok || n != len(tpl.Intents) {
			t.Errorf("template %s: %d intents, want %d", tpl.Name, len(tpl.Intents), want[tpl.Name])
		}
		delete(want, tpl.Name)
		for _, in := range tpl.Intents {
			if in.Tokens != in.FixedTokens+in.ReservedTokens || in.Tokens <= 0 || len(in.Sections) == 0 {
				t.Errorf("%s/%s: bad figures %+v", tpl.Name, in.Name, in)
			}
			if !in.WithinBudget {
				over[tpl.Name] = true
			}
		}
		if tpl.Encoding == "" || tpl.MaxTokens == 0 {
			t.Errorf("%s: encoding and maxTokens must be reported", tpl.Name)
		}
	}
	if len(want) != 0 {
		t.Errorf("templates missing from the report: %v", want)
	}
	if !over["over-budget-demo"] || len(over) != 1 {
		t.Errorf("only over-budget-demo should be over budget, got %v", over)
	}
	// The JSON keys are the documented contract.
	for _, key := range []string{`"templates"`, `"namespace"`, `"name"`, `"encoding"`, `"maxTokens"`, `"intents"`, `"tokens"`, `"withinBudget"`, `"sections"`, `"truncatedTokens"`} {
		if !strings.Contains(out, key) {
			t.Errorf("JSON lacks key %s", key)
		}
	}
}

func TestRenderWithoutOverBudgetSampleExitsZero(t *testing.T) {
	dir := t.TempDir()
	files, _ := filepath.Glob(filepath.Join(samplesDir(), "*.yaml"))
	for _, f := range files {
		if strings.Contains(f, "overbudget") {
			continue
		}
		data, _ := os.ReadFile(f)
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := run(t, "", "render", "-f", dir)
	if code != ExitOK {
		t.Fatalf("exit %d, want 0\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "ssa-pro") || !strings.Contains(out, "support-assistant") {
		t.Fatalf("table lacks templates:\n%s", out)
	}
}

func TestRenderInvalidInputNamesFileAndObject(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := map[string]struct{ body, want string }{
		"unknown-var.yaml": {`apiVersion: promptops.io/v1
kind: PromptTemplate
metadata: {name: bad-var, namespace: team}
spec:
  budget: {maxTokens: 100}
  sections: [{name: role, text: "Hi {{ nobody }}"}, {name: task, intent: true}]
  intents: [{name: chat, instruction: x}]
`, "unknown-var.yaml: PromptTemplate team/bad-var: section role uses the variable {{ nobody }}"},
		"typo.yaml": {`apiVersion: promptops.io/v1
kind: PromptTemplate
metadata: {name: typo}
spec:
  budget: {maxTokens: 100, onExeed: Warn}
  sections: [{name: task, intent: true}, {name: role, txt: Hi}]
  intents: [{name: chat, instruction: x}]
`, `typo.yaml: document 1: PromptTemplate default/typo: unknown field "spec.budget.onExeed"; unknown field "spec.sections[1].txt"`},
		"repeated.yaml": {`apiVersion: promptops.io/v1
kind: PromptTemplate
metadata: {name: twice, namespace: team}
spec:
  budget: {maxTokens: 100}
  sections: [{name: task, intent: true}]
  intents: [{name: chat, instruction: x, instruction: y}]
`, `repeated.yaml: document 1: PromptTemplate team/twice: `},
		"no-intent.yaml": {`apiVersion: promptops.io/v1
kind: PromptTemplate
metadata: {name: no-intent}
spec:
  budget: {maxTokens: 100}
  sections: [{name: task, text: x}]
  intents: [{name: chat, instruction: x}]
`, "exactly one section must have intent: true"},
	}
	for name, c := range cases {
		p := write(name, c.body)
		code, _, errOut := run(t, "", "render", "-f", p)
		if code != ExitInvalid || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: exit %d stderr %q, want 2 and %q", name, code, errOut, c.want)
		}
	}
	if code, _, _ := run(t, "", "render", "-f", filepath.Join(dir, "absent.yaml")); code != ExitInvalid {
		t.Errorf("a missing file should exit 2, got %d", code)
	}
}

func TestRenderIntentFilterAndOutDir(t *testing.T) {
	out := t.TempDir()
	code, stdout, _ := run(t, "", "render", "-f", samplesDir(), "--intent", "analyze", "-o", "json", "--out-dir", out)
	if code != ExitOK {
		t.Fatalf("only ssa-pro has analyze and it fits: exit %d", code)
	}
	var got renderOutput
	_ = json.Unmarshal([]byte(stdout), &got)
	if len(got.Templates) != 1 || got.Templates[0].Name != "ssa-pro" || len(got.Templates[0].Intents) != 1 {
		t.Fatalf("got %+v", got)
	}
	if _, err := os.Stat(filepath.Join(out, "default", "ssa-pro", "plan.json")); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := run(t, "", "render", "-f", samplesDir(), "--intent", "nonexistent"); code != ExitInvalid {
		t.Fatalf("an intent no template has should exit 2, got %d", code)
	}
}

// renderPlan writes the plan of one sample and returns its path.
func renderPlan(t *testing.T, name string) string {
	t.Helper()
	out := t.TempDir()
	if code, _, e := run(t, "", "render", "-f", samplesDir(), "--out-dir", out); code == ExitInvalid {
		t.Fatalf("render: %s", e)
	}
	return filepath.Join(out, "default", name, "plan.json")
}

func TestAssembleChineseCutsToolOutputsFirst(t *testing.T) {
	plan := renderPlan(t, "ssa-pro")
	in, _ := json.Marshal(map[string]string{
		"data_context":        "数据概览：共 200 行，12 个变量，其中 3 个分类变量。",
		"variable_dictionary": strings.Repeat("变量 age：年龄（岁），数值型，缺失 2%。", 20),
		"tool_outputs":        strings.Repeat("描述性统计：均值 45.2，标准差 12.1，中位数 44。", 400),
	})
	code, prompt, report := run(t, string(in), "assemble", "--plan", plan, "--intent", "analyze")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, report)
	}
	if !strings.Contains(report, "cut tool_outputs -") || strings.Contains(report, "variable_dictionary") {
		t.Fatalf("only tool_outputs should be cut: %s", report)
	}
	if !strings.HasPrefix(prompt, "你是 SSA-Pro 智能统计分析助手。") || !strings.HasSuffix(prompt, "不能自行填充结果。") {
		t.Fatalf("Never sections cut:\n%s", prompt[len(prompt)-200:])
	}
	if !strings.Contains(report, "tokens of 4000") {
		t.Fatalf("report: %s", report)
	}
}

func TestAssembleEnglishCutsKnowledgeFirst(t *testing.T) {
	plan := renderPlan(t, "support-assistant")
	profile := "Jane Doe, premium plan since 2021, region eu-west-1, two open tickets."
	in, _ := json.Marshal(map[string]string{
		"customer_profile":     profile,
		"knowledge":            strings.Repeat("Article 42: to reset a password, open Settings, then Security, then Reset. ", 200),
		"conversation_summary": "The customer cannot log in since this morning.",
	})
	code, prompt, report := run(t, string(in), "assemble", "--plan", plan, "--intent", "troubleshoot")
	if code != ExitOK || !strings.Contains(report, "cut knowledge -") || strings.Contains(report, "conversation_summary -") {
		t.Fatalf("exit %d report %s", code, report)
	}
	if !strings.Contains(prompt, "## Customer\n"+profile) || !strings.Contains(prompt, "You are the support assistant of Acme Cloud.") {
		t.Fatal("profile and role must be whole")
	}
	// Bad input exits 2.
	if code, _, e := run(t, `{"knowlege": "typo"}`, "assemble", "--plan", plan, "--intent", "chat"); code != ExitInvalid || !strings.Contains(e, `no runtime section "knowlege"`) {
		t.Fatalf("typo: exit %d %s", code, e)
	}
	if code, _, _ := run(t, `not json`, "assemble", "--plan", plan, "--intent", "chat"); code != ExitInvalid {
		t.Fatalf("garbage stdin: exit %d", code)
	}
	// A deadline that has passed before the assembly starts stops it.
	if code, _, e := run(t, string(in), "assemble", "--plan", plan, "--intent", "troubleshoot", "--timeout", "1ns"); code != ExitInvalid || !strings.Contains(e, "context deadline exceeded") {
		t.Fatalf("timeout: exit %d %s", code, e)
	}
}

// TestRenderGivesTheAPIServersVerdict: what the API server would refuse
// (its CRD limits, a ConfigMap over 1 MiB) exits 2 naming the field, and
// variables cannot multiply a text past the limit.
func TestRenderGivesTheAPIServersVerdict(t *testing.T) {
	dir := t.TempDir()
	long := func(n int) string { return strings.Repeat("x", n) }
	tmpl := func(name, extra, sections, intents string) string {
		return fmt.Sprintf("apiVersion: promptops.io/v1\nkind: PromptTemplate\nmetadata: {name: %s}\nspec:\n  budget: {maxTokens: 2000000, onExceed: Warn}\n%s  sections: %s\n  intents: %s\n", name, extra, sections, intents)
	}
	task := `[{name: task, intent: true}]`
	chat := `[{name: chat, instruction: x}]`
	vars := "  variables:\n"
	for i := 0; i < 65; i++ {
		vars += fmt.Sprintf("    v%d: x\n", i)
	}
	var many []string
	for i := 0; i < 20; i++ {
		many = append(many, fmt.Sprintf("{name: i%d, instruction: %q}", i, long(60000)))
	}
	for _, tc := range []struct{ name, body, want string }{
		{"heading", tmpl("h", "", `[{name: task, intent: true, heading: "`+long(1025)+`"}]`, chat), "spec.sections[0].heading: is 1025 characters, at most 1024"},
		{"text", tmpl("t", "", `[{name: role, text: "`+long(65537)+`"}, {name: task, intent: true}]`, chat), "spec.sections[0].text: is 65537 characters, at most 65536"},
		{"instruction", tmpl("i", "", task, `[{name: chat, instruction: "`+long(65537)+`"}]`), "spec.intents[0].instruction: is 65537 characters, at most 65536"},
		{"variables", tmpl("v", vars, task, chat), "spec.variables: has 65 variables, at most 64"},
		{"name", tmpl(long(64), "", task, chat), "metadata.name: must be 1 to 63 characters, is 64"},
		{"multiplied", tmpl("m", "  variables: {v: \""+long(12000)+"\"}\n", `[{name: role, text: "{{v}}{{v}}{{v}}{{v}}{{v}}{{v}}"}, {name: task, intent: true}]`, chat),
			"section role with its variables substituted is 72000 characters, over the limit of 65536"},
		{"configmap", tmpl("big", "", task, "["+strings.Join(many, ", ")+"]"), "the rendered ConfigMap (plan.json and one file per intent) is"},
	} {
		p := filepath.Join(dir, tc.name+".yaml")
		if err := os.WriteFile(p, []byte(tc.body), 0o644); err != nil {
			t.Fatal(err)
		}
		code, _, errOut := run(t, "", "render", "-f", p)
		if code != ExitInvalid || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d stderr %.300q, want 2 and %q", tc.name, code, errOut, tc.want)
		}
	}
}

// TestRenderNamespaceMakesTheClustersRevision: the plan's revision includes
// the namespace; render takes it from -n (default "default") when the
// manifest names none, as kubectl apply does.
func TestRenderNamespaceMakesTheClustersRevision(t *testing.T) {
	dir := t.TempDir()
	body := "apiVersion: promptops.io/v1\nkind: PromptTemplate\nmetadata: {name: ns-test%s}\nspec:\n  budget: {maxTokens: 100}\n  sections: [{name: task, intent: true}]\n  intents: [{name: chat, instruction: x}]\n"
	plain := filepath.Join(dir, "plain.yaml")
	_ = os.WriteFile(plain, []byte(fmt.Sprintf(body, "")), 0o644)
	named := filepath.Join(dir, "named", "named.yaml")
	_ = os.MkdirAll(filepath.Dir(named), 0o755)
	_ = os.WriteFile(named, []byte(fmt.Sprintf(body, ", namespace: team")), 0o644)
	revision := func(args ...string) string {
		code, out, errOut := run(t, "", append([]string{"render", "-o", "json"}, args...)...)
		var ro renderOutput
		if code != ExitOK || json.Unmarshal([]byte(out), &ro) != nil || len(ro.Templates) != 1 {
			t.Fatalf("%d %s %s", code, out, errOut)
		}
		return ro.Templates[0].Namespace + " " + ro.Templates[0].Revision
	}
	withN, inManifest := revision("-n", "team", "-f", plain), revision("-f", named)
	if withN != inManifest || !strings.HasPrefix(withN, "team sha256:") {
		t.Fatalf("-n team gives %q, metadata.namespace team gives %q", withN, inManifest)
	}
	if def := revision("-f", plain); !strings.HasPrefix(def, "default ") || def == withN {
		t.Fatalf("without -n: %q", def)
	}
}

// render --out-dir writes what the operator would: no plan for a template it
// would not render, so that serve cannot serve one.
func TestRenderOutDirSkipsRejectedTemplates(t *testing.T) {
	out := t.TempDir()
	code, _, errOut := run(t, "", "render", "-f", samplesDir(), "--out-dir", out)
	if code != ExitFailed {
		t.Fatalf("the over-budget sample should exit 1, got %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "PromptTemplate default/over-budget-demo not written to "+out+": intent ") || !strings.Contains(errOut, "onExceed is Reject") {
		t.Errorf("stderr does not say why over-budget-demo was not written: %s", errOut)
	}
	entries, err := os.ReadDir(filepath.Join(out, "default"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "ssa-pro,support-assistant" {
		t.Fatalf("written: %v, want ssa-pro and support-assistant only", names)
	}

	// Over budget under Warn: the operator renders it, so render writes it.
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join(samplesDir(), "promptops_v1_prompttemplate_overbudget.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	warn := strings.Replace(string(data), "    onExceed: Reject", "    onExceed: Warn", 1)
	if err := os.WriteFile(filepath.Join(dir, "warn.yaml"), []byte(warn), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := run(t, "", "render", "-f", dir, "--out-dir", out); code != ExitFailed || strings.Contains(errOut, "not written") {
		t.Fatalf("Warn: exit %d, %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(out, "default", "over-budget-demo", "plan.json")); err != nil {
		t.Fatal(err)
	}
}

// TestRenderGivesTheOperatorsReferenceVerdict: a ConfigMap not among the
// inputs does not exist, as in a cluster without it: ReferenceNotFound,
// exit 1, naming the template, the ConfigMap and the key, whether or not
// the section has a fallback text; the other templates are still reported.
// The fallback stands in only for a key missing from a ConfigMap among the
// inputs. (TestRenderAgreesWithTheOperator holds the operator to the same.)
func TestRenderGivesTheOperatorsReferenceVerdict(t *testing.T) {
	ssa := filepath.Join(samplesDir(), "promptops_v1_prompttemplate_ssa.yaml")
	cm := filepath.Join(samplesDir(), "ssa-prompts-configmap.yaml")
	support := filepath.Join(samplesDir(), "promptops_v1_prompttemplate_support.yaml")
	const want = `PromptTemplate default/ssa-pro: ReferenceNotFound: section base_system reads key "SSA_BASE_SYSTEM" of ConfigMap "ssa-prompts", which does not exist`

	code, out, errOut := run(t, "", "render", "-f", ssa, "-f", support)
	if code != ExitFailed || !strings.Contains(errOut, ssa+": "+want) {
		t.Fatalf("exit %d, stderr %q; want 1 and %q", code, errOut, want)
	}
	if !regexp.MustCompile(`(?m)^default/ssa-pro +- +- +- +- +- +4000 +ReferenceNotFound$`).MatchString(out) || !strings.Contains(out, "default/support-assistant  chat") {
		t.Fatalf("table:\n%s", out)
	}
	code, out, _ = run(t, "", "render", "-f", ssa, "-o", "json")
	var got renderOutput
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != ExitFailed || len(got.Templates) != 1 {
		t.Fatalf("exit %d: %v\n%s", code, err, out)
	}
	if tpl := got.Templates[0]; tpl.Reason != "ReferenceNotFound" || !strings.HasPrefix(tpl.Message, `Section base_system reads key "SSA_BASE_SYSTEM" of ConfigMap "ssa-prompts"`) ||
		len(tpl.Intents) != 0 || tpl.MaxTokens != 4000 || tpl.Encoding != "o200k_base" || tpl.OnExceed != "Reject" {
		t.Fatalf("JSON: %+v", tpl)
	}
	if code, _, _ := run(t, "", "render", "-f", ssa, "--out-dir", t.TempDir()); code != ExitFailed {
		t.Fatalf("--out-dir: exit %d", code)
	}

	// With the ConfigMap among the inputs: its texts, no note.
	code, out, errOut = run(t, "", "render", "-f", ssa, "-f", cm, "-o", "json")
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != ExitOK || len(got.Templates) != 1 || len(got.Templates[0].Notes) != 0 {
		t.Fatalf("exit %d %s: %v\n%s", code, errOut, err, out)
	}
	if analyze := got.Templates[0].Intents[3]; analyze.Name != "analyze" || analyze.Tokens != 2731 {
		t.Fatalf("analyze: %+v", analyze)
	}

	// A key the ConfigMap lacks: the fallback, with a note; with no
	// fallback, ReferenceNotFound naming the key.
	dir := t.TempDir()
	data, err := os.ReadFile(cm)
	if err != nil {
		t.Fatal(err)
	}
	lacking := regexp.MustCompile(`(?ms)^  SSA_BASE_SYSTEM: .*?^  SSA_`).ReplaceAllString(string(data), "  SSA_")
	if lacking == string(data) {
		t.Fatal("the sample ConfigMap no longer has SSA_BASE_SYSTEM first")
	}
	lackingCM := filepath.Join(dir, "cm.yaml")
	if err := os.WriteFile(lackingCM, []byte(lacking), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = run(t, "", "render", "-f", ssa, "-f", lackingCM)
	if code != ExitOK || !strings.Contains(out, `note: default/ssa-pro: section base_system: key "SSA_BASE_SYSTEM" of ConfigMap "ssa-prompts" is missing; using the fallback text`) {
		t.Fatalf("exit %d, %s%s", code, out, errOut)
	}
	body := `apiVersion: promptops.io/v1
kind: PromptTemplate
metadata: {name: bad-ref}
spec:
  budget: {maxTokens: 100}
  sections: [{name: role, from: {configMapKeyRef: {name: ssa-prompts, key: K}}}, {name: task, intent: true}]
  intents: [{name: chat, instruction: x}]
`
	noFallback := filepath.Join(dir, "no-fallback.yaml")
	if err := os.WriteFile(noFallback, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = run(t, "", "render", "-f", noFallback, "-f", lackingCM)
	if want := `PromptTemplate default/bad-ref: ReferenceNotFound: section role reads key "K", which ConfigMap "ssa-prompts" lacks, and has no fallback text`; code != ExitFailed || !strings.Contains(errOut, want) {
		t.Fatalf("exit %d, stderr %q, want 1 and %q", code, errOut, want)
	}

	// A ConfigMap defined twice is refused, as a template is: no cluster
	// holds both.
	if code, _, errOut := run(t, "", "render", "-f", ssa, "-f", cm, "-f", lackingCM); code != ExitInvalid || !strings.Contains(errOut, "ConfigMap default/ssa-prompts is also defined in") {
		t.Fatalf("twice: exit %d, %s", code, errOut)
	}
}
