package controllers

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/assembler"
)

// The manager's memory grows with what it must hold, not with what exists:
// at 100 templates of about 20 KB each (and each rendered into a ConfigMap
// of about as much), its cache holds an outline of each template (under 1
// KiB) and never a ConfigMap's data. Counted in bytes the cache holds, not
// timed: a change that caches whole templates or ConfigMap data again
// fails here.
func TestManagerCacheHoldsOutlines(t *testing.T) {
	ns := newNamespace(t)
	const n = 100
	long := strings.Repeat("Answer in the customer's language, cite the source document and keep to the facts. ", 40) // ~3.4 KB
	// Someone else's ConfigMap, applied with kubectl: its metadata is
	// cached, its last-applied copy is not.
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "someone-elses",
		Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": long}, Labels: map[string]string{"team": "search"}},
		Data: map[string]string{"doc": long}}
	if err := k8sClient.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		pt := &promptopsv1.PromptTemplate{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("t%03d", i),
				Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": long}},
			Spec: promptopsv1.PromptTemplateSpec{
				Budget: promptopsv1.Budget{MaxTokens: 100000},
				Sections: []promptopsv1.Section{
					{Name: "role", Text: &long},
					{Name: "task", Intent: true},
				},
			},
		}
		for j := range 5 {
			text := fmt.Sprintf("%d: %s", j, long)
			pt.Spec.Intents = append(pt.Spec.Intents, promptopsv1.Intent{Name: fmt.Sprintf("intent-%d", j), Instruction: &text})
		}
		if err := k8sClient.Create(ctx, pt); err != nil {
			t.Fatal(err)
		}
	}
	// Many templates: the wait is longer than eventually's.
	waitLong(t, 3*time.Minute, func() error {
		var list promptopsv1.PromptTemplateList
		if err := k8sClient.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		ready := 0
		for i := range list.Items {
			c := meta.FindStatusCondition(list.Items[i].Status.Conditions, "Ready")
			if c != nil && c.Status == metav1.ConditionTrue && list.Items[i].Status.ObservedGeneration == list.Items[i].Generation {
				ready++
			}
		}
		if ready != n {
			return fmt.Errorf("%d of %d Ready", ready, n)
		}
		return nil
	})
	var full, cached promptopsv1.PromptTemplateList
	if err := k8sClient.List(ctx, &full, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if err := mgrCache.List(ctx, &cached, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	size := func(l *promptopsv1.PromptTemplateList) int {
		data, err := json.Marshal(l.Items)
		if err != nil {
			t.Fatal(err)
		}
		return len(data)
	}
	perFull, perCached := size(&full)/n, size(&cached)/len(cached.Items)
	t.Logf("%d templates: %d bytes each in the API, %d in the manager's cache", n, perFull, perCached)
	if len(cached.Items) != n || perCached > 1024 || perFull < 20*perCached {
		t.Errorf("the cache holds %d templates of %d bytes each (%d in the API): want outlines under 1 KiB", len(cached.Items), perCached, perFull)
	}
	var cms metav1.PartialObjectMetadataList
	cms.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
	if err := mgrCache.List(ctx, &cms, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	rendered, sawForeign := 0, false
	for _, m := range cms.Items {
		if m.Name == foreign.Name {
			sawForeign = true
			if len(m.Annotations) != 0 || len(m.Labels) != 0 {
				t.Errorf("the cache holds someone else's labels %v and %d annotations", m.Labels, len(m.Annotations))
			}
		} else if m.Annotations[promptopsv1.AnnotationRevision] != "" && m.Labels[labelRole] == roleLive {
			rendered++
		}
	}
	if !sawForeign || rendered != n {
		t.Errorf("cached ConfigMap metadata: foreign seen %v, %d rendered of %d", sawForeign, rendered, n)
	}
	writes.mu.Lock()
	reads, metaReads := append([]string(nil), writes.fullConfigMapReads...), writes.metaConfigMapReads
	writes.mu.Unlock()
	if metaReads == 0 {
		t.Errorf("no metadata-only list or watch of ConfigMaps seen: the check below sees nothing")
	}
	if len(reads) != 0 {
		t.Errorf("the manager listed or watched whole ConfigMaps (their data in its cache): %v", reads)
	}
}

// A template is an outline in the cache from its first event, before it
// is rendered: a burst of new templates waiting for a worker holds no
// texts. The outline keeps what the indexes and settled read.
func TestTemplateOutlineOfANewTemplate(t *testing.T) {
	text := strings.Repeat("x", 10000)
	limit := int32(3)
	pt := &promptopsv1.PromptTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "t", Generation: 1,
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": text, promptopsv1.AnnotationReconcileRequestedAt: "1"}},
		Spec: promptopsv1.PromptTemplateSpec{
			RevisionHistoryLimit: &limit,
			Variables:            map[string]string{"v": text},
			Sections: []promptopsv1.Section{
				{Name: "role", Text: &text},
				{Name: "docs", From: &promptopsv1.TextSource{ConfigMapKeyRef: promptopsv1.ConfigMapKeyRef{Name: "docs", Key: "k"}}},
				{Name: "memory", Memory: &promptopsv1.MemorySection{BankRef: promptopsv1.MemoryBankRef{Name: "bank"}, Query: promptopsv1.MemoryQuery{FromRuntime: "question"}}},
				{Name: "task", Intent: true},
			},
			Intents: []promptopsv1.Intent{
				{Name: "a", Instruction: &text},
				{Name: "b", From: &promptopsv1.TextSource{ConfigMapKeyRef: promptopsv1.ConfigMapKeyRef{Name: "intents", Key: "b"}}},
			},
		},
	}
	o, err := templateOutline(pt.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	out := o.(*promptopsv1.PromptTemplate)
	data, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "xxx") || len(data) > 1024 {
		t.Errorf("the outline of a new template holds its texts (%d bytes): %s", len(data), data)
	}
	if got, want := fmt.Sprint(assembler.References(&out.Spec)), fmt.Sprint(assembler.References(&pt.Spec)); got != want {
		t.Errorf("references: %s, want %s", got, want)
	}
	if got := assembler.MemoryBanks(&out.Spec); len(got) != 1 || got[0] != "bank" {
		t.Errorf("memory banks: %v", got)
	}
	if historyLimit(out) != 3 || out.Annotations[promptopsv1.AnnotationReconcileRequestedAt] != "1" || out.Generation != 1 {
		t.Errorf("the outline lost what settled reads: %s", data)
	}
}

// The cache keeps of a ConfigMap's metadata what the controllers read: a
// rendered ConfigMap's identity, controller, labels and revision, and
// nothing else of anyone's.
func TestConfigMapOutline(t *testing.T) {
	yes := true
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Namespace: "ns", Name: "t", UID: "u", ResourceVersion: "7",
		Labels: map[string]string{promptopsv1.LabelManagedBy: promptopsv1.LabelManagedByValue, promptopsv1.LabelPromptTemplate: "t",
			labelRole: roleHistory, "team": "search"},
		Annotations: map[string]string{promptopsv1.AnnotationRevision: "abc", "note": strings.Repeat("x", 1000)},
		OwnerReferences: []metav1.OwnerReference{{Name: "other", UID: "o"},
			{APIVersion: promptopsv1.GroupVersion.String(), Kind: "PromptTemplate", Name: "t", UID: "pt", Controller: &yes}},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
	}}
	m.SetGroupVersionKind(configMapMeta().GroupVersionKind())
	o, err := configMapOutline(m.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	out := o.(*metav1.PartialObjectMetadata)
	if out.Name != "t" || out.Namespace != "ns" || out.UID != "u" || out.ResourceVersion != "7" || out.GroupVersionKind() != m.GroupVersionKind() {
		t.Errorf("identity: %+v", out)
	}
	if !isControlledBy(out.OwnerReferences, "pt") || len(out.OwnerReferences) != 1 {
		t.Errorf("owner references: %+v", out.OwnerReferences)
	}
	if fmt.Sprint(historyOf(out)) != "[t]" || out.Annotations[promptopsv1.AnnotationRevision] != "abc" {
		t.Errorf("labels %v, annotations %v", out.Labels, out.Annotations)
	}
	if len(out.Labels) != 3 || len(out.Annotations) != 1 || out.ManagedFields != nil {
		t.Errorf("kept more than it reads: labels %v, annotations %d, managed fields %d", out.Labels, len(out.Annotations), len(out.ManagedFields))
	}
}
