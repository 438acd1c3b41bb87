package plan

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

const minimal = `{"apiVersion":"promptops.io/v1","kind":"PromptPlan","name":"t","encoding":"o200k_base","maxTokens":10,"separator":"\n\n",
"sections":[{"name":"ctx","kind":"runtime","policy":"Priority"},{"name":"task","kind":"intent","policy":"Never"}],
"intents":[{"name":"chat","instruction":"Hi."}]}`

func TestLoadRejectsWhatItCannotAssemble(t *testing.T) {
	if _, err := Load([]byte(minimal)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ from, to, want string }{
		{`"kind":"PromptPlan"`, `"kind":"Other"`, "not a promptops plan"},
		{`"o200k_base"`, `"p50k_base"`, "unsupported encoding"},
		{`"separator":"\n\n"`, `"separator":"\n"`, "separator"},
		{`"kind":"runtime"`, `"kind":"dynamic"`, "kind"},
		{`"policy":"Priority"`, `"policy":"Sometimes"`, "policy"},
		{`"name":"task"`, `"name":"ctx"`, "repeated"},
		{`"instruction":"Hi."}`, `"instruction":"Hi.","staticCuts":[{"section":"ctx","text":""}]}`, "not a static"},
		{`{"apiVersion"`, `[`, "not a promptops plan"},
	} {
		_, err := Load([]byte(strings.Replace(minimal, c.from, c.to, 1)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s -> %s: got %v, want %q", c.from, c.to, err, c.want)
		}
	}
	if _, err := Load([]byte(minimal + "{}")); err == nil {
		t.Error("trailing data accepted")
	}
}

// Load's errors are typed: data that is not a plan wraps ErrNotPlan, a
// plan that cannot be assembled is an *InvalidPlanError naming the plan
// and, when one is at fault, the section.
func TestLoadErrorsAreTyped(t *testing.T) {
	for _, data := range []string{`[`, minimal + "{}", strings.Replace(minimal, `"kind":"PromptPlan"`, `"kind":"Other"`, 1)} {
		var ip *InvalidPlanError
		if _, err := Load([]byte(data)); !errors.Is(err, ErrNotPlan) || errors.As(err, &ip) {
			t.Errorf("%.20s: got %v, want ErrNotPlan", data, err)
		}
	}
	for _, c := range []struct{ from, to, section string }{
		{`"policy":"Priority"`, `"policy":"Sometimes"`, "ctx"},
		{`"name":"task"`, `"name":"ctx"`, "ctx"},
		{`"maxTokens":10`, `"maxTokens":-1`, ""},
		{`"o200k_base"`, `"p50k_base"`, ""},
	} {
		_, err := Load([]byte(strings.Replace(minimal, c.from, c.to, 1)))
		var ip *InvalidPlanError
		if !errors.As(err, &ip) || errors.Is(err, ErrNotPlan) || ip.Name != "t" || ip.Section != c.section || ip.Reason == "" || err.Error() != "invalid plan /t: "+ip.Reason {
			t.Errorf("%s: got %v (%+v), want an *InvalidPlanError of section %q", c.to, err, ip, c.section)
		}
		if c.to == `"p50k_base"` && ip != nil && (ip.Err == nil || errors.Unwrap(err) != ip.Err) {
			t.Errorf("unknown encoding: Err %v", ip.Err)
		}
	}
}

func TestAssembleErrorsAreTyped(t *testing.T) {
	p, err := Load([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	var ui *UnknownIntentError
	if _, err := p.Assemble(context.Background(), "nope", nil); !errors.As(err, &ui) || ui.Intent != "nope" {
		t.Fatalf("got %v", err)
	}
	var us *UnknownSectionError
	if _, err := p.Assemble(context.Background(), "chat", map[string]string{"task": "x"}); !errors.As(err, &us) || us.Section != "task" {
		t.Fatalf("got %v", err)
	}
}

// The public package stays free of Kubernetes and of the operator: of
// promptops it uses the tokenizer, the count-and-cut engine and the scope
// name's rule only.
func TestImportsOnlyTokens(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	allowed := map[string]bool{
		"github.com/promptops/promptops/plan":               true,
		"github.com/promptops/promptops/internal/tokens":    true,
		"github.com/promptops/promptops/internal/memscope":  true,
		"github.com/promptops/promptops/internal/promptfit": true,
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, "k8s.io") || (strings.HasPrefix(dep, "github.com/promptops/promptops/") && !allowed[dep]) {
			t.Errorf("plan depends on %s", dep)
		}
	}
}
