// Command conformance writes testdata/conformance: request-time assembly
// cases (a plan, an intent, runtime contents) and what promptops answers
// for them, for implementations in other languages. Run from the repository
// root: go run ./hack/conformance. Review the diff before committing.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/assembler"
	"github.com/promptops/promptops/plan"
)

// Case is one file of testdata/conformance/cases.
type Case struct {
	Name        string            `json:"name"`
	Description string            `json:"description"`
	Plan        json.RawMessage   `json:"plan"`
	Intent      string            `json:"intent"`
	Runtime     map[string]string `json:"runtime"`
	Expected    Expected          `json:"expected"`
}

// Expected is the assembly.
type Expected struct {
	Prompt       string    `json:"prompt"`
	Tokens       int       `json:"tokens"`
	MaxTokens    int       `json:"maxTokens"`
	WithinBudget bool      `json:"withinBudget"`
	Cut          []string  `json:"cut"`
	Sections     []Section `json:"sections"`
}

// Section is one section's share.
type Section struct {
	Name            string `json:"name"`
	Tokens          int    `json:"tokens"`
	TruncatedTokens int    `json:"truncatedTokens"`
}

var templates = map[string]string{
	"en-support": `
encoding: cl100k_base
budget: {maxTokens: 120, onExceed: Warn}
sections:
- {name: role, text: "You are the support assistant of Acme Cloud. Be brief and exact.", truncation: {policy: Never}}
- {name: knowledge, heading: "## Knowledge", runtime: {reserveTokens: 40}, truncation: {priority: 10, minTokens: 20}}
- {name: history, heading: "## History", runtime: {reserveTokens: 30}, truncation: {priority: 5}}
- {name: task, heading: "## Task", intent: true}
intents:
- {name: chat, instruction: "Answer the customer's question directly."}
- {name: troubleshoot, instruction: "Find the cause step by step; ask for logs when needed."}
`,
	"zh-ssa": `
encoding: o200k_base
budget: {maxTokens: 300, onExceed: Warn}
sections:
- {name: base_system, text: "你是 SSA-Pro 智能统计分析助手。你的职责是规划、解释和沟通，而非计算。", truncation: {policy: Never}}
- {name: data_context, heading: "## 数据上下文", runtime: {reserveTokens: 60}, truncation: {priority: 2, minTokens: 10}}
- {name: variable_dictionary, heading: "## 变量字典", runtime: {reserveTokens: 60}, truncation: {priority: 4, minTokens: 10}}
- {name: tool_outputs, heading: "## 工具执行结果", runtime: {reserveTokens: 60}, truncation: {priority: 5}}
- {name: intent_instruction, heading: "## 当前任务指令", intent: true}
intents:
- {name: analyze, instruction: "你正在协助用户进行分析规划。"}
- {name: chat, instruction: "请基于统计知识直接回答。"}
`,
	"ties": `
encoding: o200k_base
budget: {maxTokens: 60, onExceed: Warn}
sections:
- {name: role, text: "Summarise the notes.", truncation: {policy: Never}}
- {name: a, heading: "# A", runtime: {}, truncation: {priority: 5}}
- {name: b, heading: "# B", runtime: {}, truncation: {priority: 5}}
- {name: c, heading: "# C", runtime: {}, truncation: {priority: 5}}
- {name: task, intent: true}
intents: [{name: sum, instruction: "Three bullet points."}]
`,
	"never-runtime": `
encoding: cl100k_base
budget: {maxTokens: 50, onExceed: Warn}
sections:
- {name: role, text: "You are a careful assistant.", truncation: {policy: Never}}
- {name: customer, heading: "## Customer", runtime: {reserveTokens: 10}, truncation: {policy: Never}}
- {name: notes, heading: "## Notes", runtime: {reserveTokens: 10}, truncation: {priority: 1}}
- {name: task, intent: true}
intents: [{name: chat, instruction: "Reply."}]
`,
	"static-truncate": `
encoding: cl100k_base
budget: {maxTokens: 60, onExceed: Truncate}
sections:
- {name: role, text: "You are an assistant.", truncation: {policy: Never}}
- {name: manual, heading: "## Manual", text: "Step one: open the console. Step two: choose the project. Step three: open billing. Step four: download the invoice. Step five: check the totals. Step six: contact support if they differ.", truncation: {priority: 9, minTokens: 5}}
- {name: ctx, heading: "## Context", runtime: {reserveTokens: 10}, truncation: {priority: 3}}
- {name: task, intent: true}
intents: [{name: chat, instruction: "Answer from the manual."}]
`,
	"intent-truncate": `
encoding: o200k_base
budget: {maxTokens: 30, onExceed: Truncate}
sections:
- {name: role, text: "You are terse.", truncation: {policy: Never}}
- {name: ctx, runtime: {reserveTokens: 5}, truncation: {priority: 1}}
- {name: task, heading: "## Task", intent: true, truncation: {priority: 2, minTokens: 3}}
intents: [{name: long, instruction: "Read every line of the report, then list the findings, then rank them by severity, then explain each in one sentence."}]
`,
	"over-budget": `
encoding: o200k_base
budget: {maxTokens: 20, onExceed: Warn}
sections:
- {name: role, text: "You are the assistant of a large company with a long list of rules that never change and cannot be cut.", truncation: {policy: Never}}
- {name: ctx, heading: "## Context", runtime: {}, truncation: {priority: 1}}
- {name: task, intent: true}
intents: [{name: chat, instruction: "Reply."}]
`,
	"emoji": `
encoding: cl100k_base
budget: {maxTokens: 25, onExceed: Warn}
sections:
- {name: role, text: "Mirror the mood.", truncation: {policy: Never}}
- {name: messages, runtime: {}, truncation: {priority: 1}}
- {name: task, intent: true}
intents: [{name: chat, instruction: "Reply."}]
`,
	"emoji-o200k": `
encoding: o200k_base
budget: {maxTokens: 25, onExceed: Warn}
sections:
- {name: role, text: "Mirror the mood.", truncation: {policy: Never}}
- {name: messages, runtime: {}, truncation: {priority: 1}}
- {name: task, intent: true}
intents: [{name: chat, instruction: "Reply."}]
`,
	"min-tokens": `
encoding: o200k_base
budget: {maxTokens: 70, onExceed: Warn}
sections:
- {name: role, text: "You answer from the sources.", truncation: {policy: Never}}
- {name: primary, heading: "## Primary", runtime: {}, truncation: {priority: 9, minTokens: 30}}
- {name: secondary, heading: "## Secondary", runtime: {}, truncation: {priority: 1, minTokens: 5}}
- {name: task, intent: true}
intents: [{name: chat, instruction: "Cite the source."}]
`,
	"bare": `
encoding: o200k_base
budget: {maxTokens: 40, onExceed: Warn}
sections:
- {name: role, text: "Keep the text exact.", truncation: {policy: Never}}
- {name: raw, runtime: {}, truncation: {priority: 2}}
- {name: extra, heading: "## Extra", runtime: {}, truncation: {priority: 1}}
- {name: task, intent: true}
intents: [{name: chat, instruction: "Reply."}]
`,
}

type input struct {
	name, template, intent, description string
	runtime                             map[string]string
}

func rep(s string, n int) string { return strings.Repeat(s, n) }

var inputs = []input{
	{"en-missing-runtime", "en-support", "chat", "no runtime contents: runtime sections are left out, headings included", nil},
	{"en-empty-runtime", "en-support", "chat", "empty strings are the same as missing", map[string]string{"knowledge": "", "history": ""}},
	{"en-fits", "en-support", "troubleshoot", "everything fits: nothing is cut", map[string]string{"knowledge": "Restart the agent after an upgrade.", "history": "User asked about upgrades."}},
	{"en-cut-highest-priority", "en-support", "chat", "knowledge (priority 10) is cut before history (5)", map[string]string{"knowledge": rep("Article: resetting a password takes two steps. ", 12), "history": "User asked about passwords."}},
	{"en-cut-to-min-then-next", "en-support", "chat", "knowledge is cut to its minTokens (20), then history is cut", map[string]string{"knowledge": rep("Article: invoices are emailed monthly. ", 12), "history": rep("User asked about invoices again. ", 12)}},
	{"en-special-token-text", "en-support", "chat", "special-token strings count as plain text", map[string]string{"knowledge": "<|endoftext|> is not a control token here. <|im_start|>", "history": ""}},
	{"en-only-history", "en-support", "troubleshoot", "one section missing, the other cut", map[string]string{"history": rep("The user pasted a stack trace line. ", 20)}},
	{"zh-fits", "zh-ssa", "analyze", "Chinese contents within budget", map[string]string{"data_context": "数据概览：共 200 行，12 个变量。", "variable_dictionary": "age：年龄，数值型。", "tool_outputs": "描述性统计：均值 45.2。"}},
	{"zh-cut-tool-outputs", "zh-ssa", "analyze", "tool_outputs (priority 5) is cut first, at a character boundary", map[string]string{"data_context": "数据概览：共 200 行。", "variable_dictionary": "age：年龄。", "tool_outputs": rep("描述性统计结果：均值、标准差、四分位数。", 30)}},
	{"zh-cut-two-sections", "zh-ssa", "analyze", "tool_outputs cut away, then variable_dictionary down to its minimum or less", map[string]string{"data_context": "数据概览：共 200 行。", "variable_dictionary": rep("变量 age：年龄，数值型。", 30), "tool_outputs": rep("结果：显著。", 40)}},
	{"zh-cut-all-three", "zh-ssa", "chat", "all three runtime sections cut, data_context last", map[string]string{"data_context": rep("数据概览：共 200 行，12 个变量。", 20), "variable_dictionary": rep("变量 age：年龄，数值型。", 20), "tool_outputs": rep("结果：显著。", 40)}},
	{"zh-lines", "zh-ssa", "analyze", "many lines, some starting with punctuation", map[string]string{"tool_outputs": rep("结果一：均值。\n。标注\n- 项目\n", 25)}},
	{"zh-one-long-line", "zh-ssa", "chat", "a long Chinese text without a line break", map[string]string{"variable_dictionary": rep("变量说明没有换行", 80)}},
	{"ties-later-first", "ties", "sum", "equal priorities: the later section is cut first", map[string]string{"a": rep("alpha notes. ", 10), "b": rep("beta notes. ", 10), "c": rep("gamma notes. ", 10)}},
	{"ties-one-empty", "ties", "sum", "equal priorities with the last one empty: b is cut first", map[string]string{"a": rep("alpha notes. ", 10), "b": rep("beta notes. ", 10), "c": ""}},
	{"ties-all-cut", "ties", "sum", "equal priorities: c and b cut away, a cut", map[string]string{"a": rep("alpha notes. ", 30), "b": rep("beta notes. ", 30), "c": rep("gamma notes. ", 30)}},
	{"never-runtime-kept", "never-runtime", "chat", "a Never runtime section is not cut; notes are", map[string]string{"customer": "Jane Doe, premium plan.", "notes": rep("Note about the account. ", 10)}},
	{"never-runtime-over", "never-runtime", "chat", "a Never runtime section alone is over budget: over budget after cutting notes", map[string]string{"customer": rep("Jane Doe, premium plan, region eu-west. ", 8), "notes": "short"}},
	{"static-cut-used", "static-truncate", "chat", "the render-time static cut (staticCuts) replaces the manual's text", map[string]string{}},
	{"static-cut-and-runtime-cut", "static-truncate", "chat", "static cut plus a runtime cut", map[string]string{"ctx": rep("Customer context line. ", 10)}},
	{"intent-cut-at-render", "intent-truncate", "long", "the intent instruction was cut at render time (its section has a truncation)", map[string]string{"ctx": "x"}},
	{"over-budget-static", "over-budget", "chat", "static Never text over budget: withinBudget false, nothing to cut", nil},
	{"over-budget-after-cut", "over-budget", "chat", "runtime cut away entirely, still over budget", map[string]string{"ctx": rep("context ", 30)}},
	{"emoji-cut", "emoji", "chat", "emoji cut at a character boundary, never inside one", map[string]string{"messages": rep("🎉😀👍🏽🚀", 10)}},
	{"emoji-zwj-cut", "emoji", "chat", "ZWJ sequences cut at a code point boundary", map[string]string{"messages": rep("👩‍💻👨‍👩‍👧‍👦", 10)}},
	{"emoji-o200k-cut", "emoji-o200k", "chat", "emoji in o200k_base", map[string]string{"messages": rep("好的🎉😀 ", 20)}},
	{"min-tokens-stop", "min-tokens", "chat", "primary stops at minTokens 30; secondary is cut next", map[string]string{"primary": rep("Source A says the rate is 4%. ", 20), "secondary": rep("Source B agrees. ", 20)}},
	{"min-tokens-above-content", "min-tokens", "chat", "primary is under its minTokens: not cut; secondary is", map[string]string{"primary": "Source A: 4%.", "secondary": rep("Source B agrees with A. ", 30)}},
	{"bare-leading-space", "bare", "chat", "content without a heading starting with white space", map[string]string{"raw": rep("  spaced words ", 20)}},
	{"bare-leading-newlines", "bare", "chat", "content starting and ending with line feeds", map[string]string{"raw": "\n\n" + rep("line\n", 30) + "\n\n", "extra": "x"}},
	{"bare-crlf", "bare", "chat", "CRLF line ends and tabs", map[string]string{"raw": rep("col1\tcol2\r\n", 30)}},
	{"en-trailing-space-kept", "en-support", "chat", "a kept section ending in spaces and a line feed before the next; the earlier, higher-priority section is cut", map[string]string{"knowledge": rep("Article: quotas reset daily. ", 20), "history": "value   \n"}},
	{"bare-punctuation-lines", "bare", "chat", "lines starting with punctuation and slashes", map[string]string{"raw": rep("./run\n/path\n- item\n", 15)}},
}

func main() {
	dir := filepath.Join("testdata", "conformance", "cases")
	if err := os.RemoveAll(dir); err != nil {
		fail(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fail(err)
	}
	plans := map[string][]byte{}
	for name, y := range templates {
		spec := &promptopsv1.PromptTemplateSpec{}
		if err := yaml.UnmarshalStrict([]byte(y), spec); err != nil {
			fail(fmt.Errorf("%s: %w", name, err))
		}
		res, err := assembler.Render(assembler.Input{Namespace: "conformance", Name: name, Spec: spec})
		if err != nil {
			fail(fmt.Errorf("%s: %w", name, err))
		}
		data, err := assembler.ConfigMapData(res)
		if err != nil {
			fail(err)
		}
		plans[name] = []byte(data[assembler.PlanKey])
	}
	for i, in := range inputs {
		p, err := plan.Load(plans[in.template])
		if err != nil {
			fail(err)
		}
		a, err := p.Assemble(in.intent, in.runtime)
		if err != nil {
			fail(fmt.Errorf("%s: %w", in.name, err))
		}
		c := Case{Name: in.name, Description: in.description, Plan: json.RawMessage(plans[in.template]), Intent: in.intent, Runtime: in.runtime,
			Expected: Expected{Prompt: a.Text, Tokens: a.Tokens, MaxTokens: a.MaxTokens, WithinBudget: a.WithinBudget, Cut: a.Cut}}
		if c.Runtime == nil {
			c.Runtime = map[string]string{}
		}
		if c.Expected.Cut == nil {
			c.Expected.Cut = []string{}
		}
		for _, s := range a.Sections {
			c.Expected.Sections = append(c.Expected.Sections, Section{s.Name, s.Tokens, s.TruncatedTokens})
		}
		out, err := json.MarshalIndent(&c, "", "  ")
		if err != nil {
			fail(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%03d-%s.json", i+1, in.name)), append(out, '\n'), 0o644); err != nil {
			fail(err)
		}
	}
	fmt.Printf("wrote %d cases to %s\n", len(inputs), dir)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "conformance:", err)
	os.Exit(1)
}
