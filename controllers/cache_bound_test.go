package controllers

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	promptopsv1 "github.com/promptops/promptops/api/v1"
)

// The manager's memory grows with what it must hold, not with what exists:
// at 100 templates of about 20 KB each (and each rendered into a ConfigMap
// of about as much), its cache holds an outline of each template (under 2
// KiB) and never a ConfigMap's data. Counted in bytes the cache holds, not
// timed: a change that caches whole templates or ConfigMap data again
// fails here.
func TestManagerCacheHoldsOutlines(t *testing.T) {
	ns := newNamespace(t)
	const n = 100
	long := strings.Repeat("Answer in the customer's language, cite the source document and keep to the facts. ", 40) // ~3.4 KB
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
	if len(cached.Items) != n || perCached > 2048 || perFull < 10*perCached {
		t.Errorf("the cache holds %d templates of %d bytes each (%d in the API): want outlines under 2 KiB", len(cached.Items), perCached, perFull)
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
