package controllers

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	promptopsv1 "github.com/promptops/promptops/api/v1"
)

// kstatusOf is what Flux's health checks and `kstatus` compute for an
// object, read from the real API server.
func kstatusOf(t *testing.T, kind, ns, name string) *status.Result {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: promptopsv1.GroupVersion.Group, Version: promptopsv1.GroupVersion.Version, Kind: kind})
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		t.Fatal(err)
	}
	res, err := status.Compute(u)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// waitKstatus waits until kstatus reads want, with a message containing
// msg (kstatus says only "Resource is Ready" for Current), and returns the
// result.
func waitKstatus(t *testing.T, kind, ns, name string, want status.Status, msg string) *status.Result {
	t.Helper()
	var res *status.Result
	eventually(t, func() error {
		// kstatus reads an object no controller has seen yet as Current:
		// only a state the controller wrote counts (its Ready condition
		// of this generation; status.observedGeneration follows only a
		// finished reconcile).
		var u unstructured.Unstructured
		u.SetGroupVersionKind(schema.GroupVersionKind{Group: promptopsv1.GroupVersion.Group, Version: promptopsv1.GroupVersion.Version, Kind: kind})
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &u); err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		if !slices.ContainsFunc(conds, func(c any) bool {
			m, _ := c.(map[string]any)
			og, _ := m["observedGeneration"].(int64)
			return m["type"] == "Ready" && og == u.GetGeneration()
		}) {
			return fmt.Errorf("%s %s: generation %d has no Ready condition yet", kind, name, u.GetGeneration())
		}
		res = kstatusOf(t, kind, ns, name)
		if res.Status != want || !strings.Contains(res.Message, msg) {
			return fmt.Errorf("%s %s: kstatus %s %q, want %s with %q", kind, name, res.Status, res.Message, want, msg)
		}
		return nil
	})
	dumpState(t, kind, ns, name, res)
	return res
}

// dumpState writes the object as the API server has it in this state to
// $PROMPTOPS_DUMP_STATES/<kind>/<name>.yaml (the n-th time a name is seen,
// <name>-<n>.yaml), for the Argo CD health checks' test inputs
// (make argocd-testdata); nothing without the variable.
func dumpState(t *testing.T, kind, ns, name string, res *status.Result) {
	dir := os.Getenv("PROMPTOPS_DUMP_STATES")
	if dir == "" {
		return
	}
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: promptopsv1.GroupVersion.Group, Version: promptopsv1.GroupVersion.Version, Kind: kind})
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		t.Fatal(err)
	}
	// What is the cluster's and not the state's goes.
	for _, f := range []string{"managedFields", "uid", "resourceVersion", "creationTimestamp", "namespace"} {
		unstructured.RemoveNestedField(u.Object, "metadata", f)
	}
	data, err := yaml.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, kind, name+".yaml")
	for n := 2; ; n++ {
		if _, err := os.Stat(file); err != nil {
			break
		}
		file = filepath.Join(dir, kind, fmt.Sprintf("%s-%d.yaml", name, n))
	}
	head := fmt.Sprintf("# %s %s as the API server had it, kstatus %s; written by\n# PROMPTOPS_DUMP_STATES=... go test ./controllers -run TestKstatusConformance\n", kind, name, res.Status)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, append([]byte(head), data...), 0o644); err != nil {
		t.Fatal(err)
	}
}

const conformanceTemplate = `
apiVersion: promptops.io/v1
kind: PromptTemplate
metadata: {name: %s}
spec:
  budget: {maxTokens: %d, onExceed: %s}
%s  sections:
  - {name: role, %s}
  - {name: background, text: "%s"}
  - {name: task, intent: true}
  intents: [{name: chat, instruction: Answer the question.}]
`

// TestKstatusConformance asserts, with the real cli-utils kstatus library,
// what GitOps tools read for every state of both kinds: Current when
// reconciled (background work included), InProgress while waiting for
// something that will come, Failed when nothing changes until the user
// changes something.
func TestKstatusConformance(t *testing.T) {
	ns := newNamespace(t)
	long := strings.Repeat("Background about the product. ", 60)
	tmpl := func(name string, maxTokens int, onExceed, extra, role string) string {
		return fmt.Sprintf(conformanceTemplate, name, maxTokens, onExceed, extra, role, long)
	}
	role := `text: "You are the assistant."`

	t.Run("PromptTemplate", func(t *testing.T) {
		createYAML(t, ns, tmpl("fits", 4000, "Reject", "", role))
		waitKstatus(t, "PromptTemplate", ns, "fits", status.CurrentStatus, "")

		createYAML(t, ns, tmpl("warn", 100, "Warn", "", role))
		waitKstatus(t, "PromptTemplate", ns, "warn", status.CurrentStatus, "")

		createYAML(t, ns, tmpl("truncate", 100, "Truncate", "", role))
		waitKstatus(t, "PromptTemplate", ns, "truncate", status.CurrentStatus, "")

		// Over budget under Reject: Failed with the budget message, not
		// InProgress forever.
		createYAML(t, ns, tmpl("reject", 100, "Reject", "", role))
		waitKstatus(t, "PromptTemplate", ns, "reject", status.FailedStatus, "Intent chat needs")

		createYAML(t, ns, tmpl("invalid", 4000, "Reject", "", `text: "Hello {{ nobody }}"`))
		waitKstatus(t, "PromptTemplate", ns, "invalid", status.FailedStatus, "{{ nobody }}")

		// Applied before its ConfigMap: InProgress until it appears.
		createYAML(t, ns, tmpl("early", 4000, "Reject", "", `from: {configMapKeyRef: {name: late, key: ROLE}}`))
		waitKstatus(t, "PromptTemplate", ns, "early", status.InProgressStatus, `ConfigMap "late"`)
		createYAML(t, ns, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: late}\ndata: {ROLE: You are here.}\n")
		waitKstatus(t, "PromptTemplate", ns, "early", status.CurrentStatus, "")

		// A variable multiplied past the bound of a text.
		createYAML(t, ns, tmpl("multiplied", 4000, "Reject", "  variables: {v: \""+strings.Repeat("x", 12000)+"\"}\n", `text: "{{v}}{{v}}{{v}}{{v}}{{v}}{{v}}"`))
		waitKstatus(t, "PromptTemplate", ns, "multiplied", status.FailedStatus, "Section role with its variables substituted is 72000 characters")

		// The API server refuses the rendered ConfigMap (an admission
		// policy here; RBAC, quota or size elsewhere): the status carries
		// the server's message instead of staying empty.
		refuseConfigMap(t, ns, "refused-prompts")
		createYAML(t, ns, tmpl("refused", 4000, "Reject", "", role))
		res := waitKstatus(t, "PromptTemplate", ns, "refused", status.FailedStatus, "promptops-test-refuse")
		if !strings.Contains(res.Message, "rendered ConfigMaps are refused here") {
			t.Fatalf("the server's own words are missing: %q", res.Message)
		}
	})

	t.Run("MemoryBank", func(t *testing.T) {
		createYAML(t, ns, bankYAML("ready", ""))
		waitKstatus(t, "MemoryBank", ns, "ready", status.CurrentStatus, "")

		// Suspended: nothing to wait for, Current (Argo CD's Suspended).
		createYAML(t, ns, bankYAML("suspended", "  consolidation: {suspend: true}"))
		waitKstatus(t, "MemoryBank", ns, "suspended", status.CurrentStatus, "")

		createYAML(t, ns, bankYAML("badcron", "  consolidation: {schedule: \"every day at noon\"}"))
		waitKstatus(t, "MemoryBank", ns, "badcron", status.FailedStatus, "does not parse")

		createYAML(t, ns, bankYAML("never", "  consolidation: {schedule: \"0 0 30 2 *\"}"))
		waitKstatus(t, "MemoryBank", ns, "never", status.FailedStatus, "never fires")

		// A running Job is background work: Current, shown as
		// Consolidating and status.activeJob.
		createYAML(t, ns, bankYAML("running", ""))
		waitKstatus(t, "MemoryBank", ns, "running", status.CurrentStatus, "")
		request(t, ns, "running", "1")
		job := waitJobs(t, ns, 1)[0]
		mb := waitMB(t, ns, "running", hasCondition(promptopsv1.ConditionConsolidating, metav1.ConditionTrue, promptopsv1.ReasonJobRunning))
		if mb.Status.ActiveJob != job.Name {
			t.Fatalf("activeJob %q", mb.Status.ActiveJob)
		}
		waitKstatus(t, "MemoryBank", ns, "running", status.CurrentStatus, "")

		// A failed run: still Current (the bank's desired state is met),
		// LastRunFailed=True says so.
		finishJob(t, &job, false, `{"factsConsolidated":0,"error":"llm: chat completions answered 401: bad key","missionHash":"sha256:x"}`)
		waitMB(t, ns, "running", hasCondition(promptopsv1.ConditionLastRunFailed, metav1.ConditionTrue, promptopsv1.ReasonJobFailed))
		waitKstatus(t, "MemoryBank", ns, "running", status.CurrentStatus, "")

		// A served bank: InProgress until its memory server's replicas
		// are available, then Current.
		createYAML(t, ns, servedBankYAML("served", 2))
		waitKstatus(t, "MemoryBank", ns, "served", status.InProgressStatus, "Memory server Deployment served-memory")
		rollOut(t, ns, "served-memory")
		waitKstatus(t, "MemoryBank", ns, "served", status.CurrentStatus, "")

		// A Job the API server refuses for good: Failed with its words.
		createYAML(t, ns, bankYAML("refusedjob", `  consolidation: {nodeSelector: {pool: "not a label!"}}`))
		waitKstatus(t, "MemoryBank", ns, "refusedjob", status.CurrentStatus, "")
		request(t, ns, "refusedjob", "1")
		waitKstatus(t, "MemoryBank", ns, "refusedjob", status.FailedStatus, "is invalid")
	})
}

// refuseConfigMap installs an admission policy that refuses ConfigMap name
// in namespace ns, as a cluster's own policy might.
func refuseConfigMap(t *testing.T, ns, name string) {
	t.Helper()
	policyName := "promptops-test-refuse-" + ns
	fail := admissionregistrationv1.Fail
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: policyName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
					},
				}},
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf("object.metadata.namespace != %q || object.metadata.name != %q", ns, name),
				Message:    "rendered ConfigMaps are refused here",
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policyName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policyName,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	for _, o := range []client.Object{policy, binding} {
		if err := k8sClient.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8sClient.Delete(ctx, o) })
	}
	// The policy takes effect asynchronously: wait until it refuses.
	eventually(t, func() error {
		probe := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"namespace": ns, "name": name}}}
		err := k8sClient.Create(ctx, probe, client.DryRunAll)
		if err == nil {
			return fmt.Errorf("the policy does not refuse yet")
		}
		return nil
	})
}
