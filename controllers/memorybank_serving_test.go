package controllers

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	promptopsv1 "github.com/promptops/promptops/api/v1"
)

// servedBankYAML is a bank in PostgreSQL with embeddings whose key is in a
// Secret, served by replicas memory servers.
func servedBankYAML(name string, replicas int) string {
	return fmt.Sprintf(`
apiVersion: promptops.io/v1
kind: MemoryBank
metadata: {name: %s}
spec:
  store:
    postgres: {dsnSecretRef: {name: bank-db, key: dsn}}
  llm: {baseURL: "http://llm.local:8000/v1", model: m, encoding: cl100k_base}
  embeddings:
    baseURL: "http://tei.local:8080/v1"
    model: e5
    apiKeySecretRef: {name: tei, key: token}
  serving: {replicas: %d}
`, name, replicas)
}

func getObj(t *testing.T, ns, name string, obj client.Object) error {
	t.Helper()
	return k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, obj)
}

// waitObj waits until the object exists and returns it.
func waitObj[T client.Object](t *testing.T, ns, name string, obj T) T {
	t.Helper()
	eventually(t, func() error { return getObj(t, ns, name, obj) })
	return obj
}

// waitGone waits until the object is not found.
func waitGone(t *testing.T, ns, name string, obj client.Object) {
	t.Helper()
	eventually(t, func() error {
		err := getObj(t, ns, name, obj)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("%T %s still there (%v)", obj, name, err)
	})
}

// rollOut plays the Deployment controller and the kubelet: every replica
// of the current generation updated, ready and available.
func rollOut(t *testing.T, ns, name string) {
	t.Helper()
	eventually(t, func() error {
		d := &appsv1.Deployment{}
		if err := getObj(t, ns, name, d); err != nil {
			return err
		}
		n := *d.Spec.Replicas
		d.Status = appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
			Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable",
				LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
		}
		return k8sClient.Status().Update(ctx, d)
	})
}

func controlledBy(t *testing.T, obj client.Object, mb *promptopsv1.MemoryBank) {
	t.Helper()
	if !isControlledBy(obj.GetOwnerReferences(), mb.UID) {
		t.Errorf("%T %s is not controlled by the bank: %+v", obj, obj.GetName(), obj.GetOwnerReferences())
	}
}

func servingIs(endpoint string, replicas, ready int32) func(*promptopsv1.MemoryBank) error {
	return func(mb *promptopsv1.MemoryBank) error {
		s := mb.Status.Serving
		if s == nil || s.Endpoint != endpoint || s.Replicas != replicas || s.ReadyReplicas != ready {
			return fmt.Errorf("status.serving %+v, want %s %d/%d", s, endpoint, ready, replicas)
		}
		return nil
	}
}

func both(fs ...func(*promptopsv1.MemoryBank) error) func(*promptopsv1.MemoryBank) error {
	return func(mb *promptopsv1.MemoryBank) error {
		for _, f := range fs {
			if err := f(mb); err != nil {
				return err
			}
		}
		return nil
	}
}

// TestServedBankShapes: spec.serving makes a Restricted Deployment running
// `promptops serve --bank` with the store's Secret by reference, a Service
// on port 8089, a ServiceAccount bound to the memory server role, no PDB at
// one replica; the bank is Reconciling until the Deployment is available,
// then Ready (kstatus InProgress, then Current); a settled bank is not
// written again.
func TestServedBankShapes(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, servedBankYAML("served", 1))
	name := "served-memory"
	endpoint := "https://served-memory." + ns + ".svc:8089"

	mb := waitMB(t, ns, "served", both(
		servingIs(endpoint, 1, 0),
		hasCondition(promptopsv1.ConditionReady, metav1.ConditionFalse, promptopsv1.ReasonServingNotAvailable),
		hasCondition(promptopsv1.ConditionReconciling, metav1.ConditionTrue, promptopsv1.ReasonServingNotAvailable)))
	waitKstatus(t, "MemoryBank", ns, "served", status.InProgressStatus, "Memory server Deployment served-memory")

	d := waitObj(t, ns, name, &appsv1.Deployment{})
	controlledBy(t, d, mb)
	if *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
		t.Errorf("replicas %d, strategy %s", *d.Spec.Replicas, d.Spec.Strategy.Type)
	}
	pod := d.Spec.Template
	if pod.Spec.ServiceAccountName != name || pod.Spec.AutomountServiceAccountToken == nil || !*pod.Spec.AutomountServiceAccountToken {
		t.Errorf("service account %q, automount %v", pod.Spec.ServiceAccountName, pod.Spec.AutomountServiceAccountToken)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("containers %d", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	wantArgs := []string{"serve", "--bank", ns + "/served", "--auth=kubernetes", "--listen=:8089",
		"--tls-cert-file=/var/run/promptops/tls/tls.crt", "--tls-key-file=/var/run/promptops/tls/tls.key"}
	if c.Image != "promptops:test" || !slices.Equal(c.Args, wantArgs) {
		t.Errorf("image %q args %q, want %q", c.Image, c.Args, wantArgs)
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "https" || c.Ports[0].ContainerPort != 8089 {
		t.Errorf("ports %+v", c.Ports)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.StrVal != "https" || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
		t.Errorf("readiness probe %+v", p)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.StrVal != "https" || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
		t.Errorf("liveness probe %+v", p)
	}
	if got, want := c.Resources.Requests.Memory().String(), "64Mi"; got != want {
		t.Errorf("default memory request %s, want %s", got, want)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	for name, ref := range map[string][2]string{"PROMPTOPS_STORE": {"bank-db", "dsn"}, "PROMPTOPS_EMBEDDINGS_API_KEY": {"tei", "token"}} {
		e := env[name]
		if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != ref[0] || e.ValueFrom.SecretKeyRef.Key != ref[1] {
			t.Errorf("%s is not a reference to Secret %s key %s: %+v", name, ref[0], ref[1], e)
		}
	}
	if env["PROMPTOPS_ENCODING"].Value != "cl100k_base" || env["PROMPTOPS_EMBEDDINGS_MODEL"].Value != "e5" || env["PROMPTOPS_EMBEDDINGS_BASE_URL"].Value != "http://tei.local:8080/v1" {
		t.Errorf("encoding or embeddings not passed on: %+v", c.Env)
	}
	if _, ok := env["OPENAI_API_KEY"]; ok {
		t.Error("the memory server gets the LLM key, which only consolidation needs")
	}

	// Restricted, as the Pod Security admission checks it.
	eval, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range eval.EvaluatePod(psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}, &pod.ObjectMeta, &pod.Spec) {
		if !r.Allowed {
			t.Errorf("not Restricted: %s: %s", r.ForbiddenReason, r.ForbiddenDetail)
		}
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("root file system is writable: %+v", sc)
	}

	svc := waitObj(t, ns, name, &corev1.Service{})
	controlledBy(t, svc, mb)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "https" || svc.Spec.Ports[0].Port != 8089 || svc.Spec.Ports[0].TargetPort.StrVal != "https" {
		t.Errorf("service ports %+v", svc.Spec.Ports)
	}
	for k, v := range svc.Spec.Selector {
		if pod.Labels[k] != v {
			t.Errorf("service selector %v does not select the pods %v", svc.Spec.Selector, pod.Labels)
		}
	}
	if svc.Spec.Selector[labelComponent] == "" {
		t.Errorf("service selector %v would select the bank's Job pods too", svc.Spec.Selector)
	}
	sa := waitObj(t, ns, name, &corev1.ServiceAccount{})
	controlledBy(t, sa, mb)
	crb := waitObj(t, "", "promptops-memory:"+ns+":served", &rbacv1.ClusterRoleBinding{})
	if crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != MemoryServerClusterRole ||
		len(crb.Subjects) != 1 || crb.Subjects[0].Kind != rbacv1.ServiceAccountKind || crb.Subjects[0].Name != name || crb.Subjects[0].Namespace != ns {
		t.Errorf("binding %+v %+v", crb.RoleRef, crb.Subjects)
	}
	if !slices.Contains(getMB(t, ns, "served").Finalizers, finalizerServing) {
		t.Error("a served bank has no finalizer for its ClusterRoleBinding")
	}
	if err := getObj(t, ns, name, &policyv1.PodDisruptionBudget{}); !apierrors.IsNotFound(err) {
		t.Errorf("a PodDisruptionBudget at one replica: %v", err)
	}

	rollOut(t, ns, name)
	waitMB(t, ns, "served", both(servingIs(endpoint, 1, 1), hasCondition(promptopsv1.ConditionReady, metav1.ConditionTrue, promptopsv1.ReasonSucceeded)))
	waitKstatus(t, "MemoryBank", ns, "served", status.CurrentStatus, "")
	if msg := conditionMessage(getMB(t, ns, "served").Status.Conditions, promptopsv1.ConditionReady); !strings.Contains(msg, endpoint) {
		t.Errorf("Ready message %q does not name the endpoint", msg)
	}

	// Settled: a forced reconcile writes none of the children.
	versions := func() map[string]string {
		out := map[string]string{}
		for k, o := range map[string]client.Object{"deployment": &appsv1.Deployment{}, "service": &corev1.Service{}, "serviceaccount": &corev1.ServiceAccount{}} {
			if err := getObj(t, ns, name, o); err != nil {
				t.Fatal(err)
			}
			out[k] = o.GetResourceVersion()
		}
		b := &rbacv1.ClusterRoleBinding{}
		if err := getObj(t, "", crb.Name, b); err != nil {
			t.Fatal(err)
		}
		out["binding"] = b.ResourceVersion
		return out
	}
	before := versions()
	writesBefore := writes.matching(ns+"/deployments") + writes.matching(ns+"/services") + writes.matching(ns+"/serviceaccounts") + writes.matching("clusterrolebindings")
	poke(t, ns, "served")
	poke(t, ns, "served")
	if after := versions(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("children written with nothing changed: %v, then %v", before, after)
	}
	if n := writes.matching(ns+"/deployments") + writes.matching(ns+"/services") + writes.matching(ns+"/serviceaccounts") + writes.matching("clusterrolebindings"); n != writesBefore {
		t.Errorf("%d writes of children with nothing changed", n-writesBefore)
	}

	// Deleting the bank removes its ClusterRoleBinding (the namespaced
	// children go by their owner references).
	if err := k8sClient.Delete(ctx, getMB(t, ns, "served")); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "", crb.Name, &rbacv1.ClusterRoleBinding{})
	waitGone(t, ns, "served", &promptopsv1.MemoryBank{})
}

// TestServingReplicasAndRemoval: a PodDisruptionBudget exists exactly while
// replicas > 1; a new generation is not Ready until its rollout; removing
// spec.serving deletes the memory server, its binding and the finalizer.
func TestServingReplicasAndRemoval(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, servedBankYAML("scaled", 1))
	name := "scaled-memory"
	endpoint := "https://scaled-memory." + ns + ".svc:8089"
	waitObj(t, ns, name, &appsv1.Deployment{})
	rollOut(t, ns, name)
	waitMB(t, ns, "scaled", hasCondition(promptopsv1.ConditionReady, metav1.ConditionTrue, promptopsv1.ReasonSucceeded))

	setReplicas := func(n int32) {
		mb := &promptopsv1.MemoryBank{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "scaled"}}
		update(t, mb, func() { mb.Spec.Serving.Replicas = n })
	}
	setReplicas(2)
	mb := waitMB(t, ns, "scaled", both(servingIs(endpoint, 2, 1),
		hasCondition(promptopsv1.ConditionReady, metav1.ConditionFalse, promptopsv1.ReasonServingNotAvailable)))
	waitKstatus(t, "MemoryBank", ns, "scaled", status.InProgressStatus, "")
	pdb := waitObj(t, ns, name, &policyv1.PodDisruptionBudget{})
	controlledBy(t, pdb, mb)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.Selector == nil || pdb.Spec.Selector.MatchLabels[labelComponent] != componentMemory {
		t.Errorf("PodDisruptionBudget spec %+v", pdb.Spec)
	}
	eventually(t, func() error {
		d := &appsv1.Deployment{}
		if err := getObj(t, ns, name, d); err != nil {
			return err
		}
		if *d.Spec.Replicas != 2 {
			return fmt.Errorf("replicas %d", *d.Spec.Replicas)
		}
		return nil
	})
	rollOut(t, ns, name)
	waitMB(t, ns, "scaled", both(servingIs(endpoint, 2, 2), hasCondition(promptopsv1.ConditionReady, metav1.ConditionTrue, promptopsv1.ReasonSucceeded)))
	waitKstatus(t, "MemoryBank", ns, "scaled", status.CurrentStatus, "")

	setReplicas(1)
	waitGone(t, ns, name, &policyv1.PodDisruptionBudget{})
	rollOut(t, ns, name)
	waitMB(t, ns, "scaled", both(servingIs(endpoint, 1, 1), hasCondition(promptopsv1.ConditionReady, metav1.ConditionTrue, promptopsv1.ReasonSucceeded)))

	// Unserved: everything goes, the bank is Ready without serving status.
	mb = &promptopsv1.MemoryBank{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "scaled"}}
	update(t, mb, func() { mb.Spec.Serving = nil })
	waitGone(t, ns, name, &appsv1.Deployment{})
	waitGone(t, ns, name, &corev1.Service{})
	waitGone(t, ns, name, &corev1.ServiceAccount{})
	waitGone(t, "", "promptops-memory:"+ns+":scaled", &rbacv1.ClusterRoleBinding{})
	mb = waitMB(t, ns, "scaled", func(mb *promptopsv1.MemoryBank) error {
		if mb.Status.Serving != nil || slices.Contains(mb.Finalizers, finalizerServing) {
			return fmt.Errorf("status.serving %+v, finalizers %v", mb.Status.Serving, mb.Finalizers)
		}
		return hasCondition(promptopsv1.ConditionReady, metav1.ConditionTrue, promptopsv1.ReasonSucceeded)(mb)
	})
	waitKstatus(t, "MemoryBank", ns, "scaled", status.CurrentStatus, "")
}

// TestServedSQLiteBank: a bank in SQLite is served from its claim, mounted
// where the file is, and replaced rather than rolled (one writer).
func TestServedSQLiteBank(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, `
apiVersion: promptops.io/v1
kind: MemoryBank
metadata: {name: litepvc}
spec:
  store: {sqlite: {path: /data/bank.db, persistentVolumeClaimName: bank-data}}
  llm: {baseURL: "http://llm.local:8000/v1", model: m}
  serving: {resources: {requests: {cpu: 10m, memory: 32Mi}}}
`)
	d := waitObj(t, ns, "litepvc-memory", &appsv1.Deployment{})
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("strategy %s, want Recreate", d.Spec.Strategy.Type)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if got := c.Resources.Requests.Memory().String(); got != "32Mi" || c.Resources.Limits != nil {
		t.Errorf("resources %+v, want the spec's", c.Resources)
	}
	var mounted bool
	for _, m := range c.VolumeMounts {
		if m.MountPath == "/data" {
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.Name == m.Name && v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "bank-data" {
					mounted = true
				}
			}
		}
	}
	if !mounted {
		t.Errorf("claim bank-data not mounted at /data: %+v %+v", c.VolumeMounts, d.Spec.Template.Spec.Volumes)
	}
}

// TestServingWithoutImageStalls: a manager without an image cannot run the
// memory server; the bank says so and is Stalled (kstatus Failed).
func TestServingWithoutImageStalls(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, strings.Replace(servedBankYAML("noimage", 1), "metadata: {name: noimage}", "metadata: {name: noimage, labels: {"+unmanagedLabel+": \"true\"}}", 1))
	err := reconcileWithoutImage(t, ns, "noimage")
	if err == nil || !strings.Contains(err.Error(), "No image for the memory server") {
		t.Fatalf("reconcile: %v", err)
	}
	mb := getMB(t, ns, "noimage")
	if err := hasCondition(promptopsv1.ConditionStalled, metav1.ConditionTrue, promptopsv1.ReasonNoJobImage)(mb); err != nil {
		t.Fatal(err)
	}
	waitKstatus(t, "MemoryBank", ns, "noimage", status.FailedStatus, "--job-image")
	if err := getObj(t, ns, "noimage-memory", &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a Deployment without an image: %v", err)
	}
}
