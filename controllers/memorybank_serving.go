package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	promptopsv1 "github.com/promptops/promptops/api/v1"
)

const (
	// ServingPort is the memory server's port, in the pod and the Service.
	ServingPort = 8089
	// MemoryServerClusterRole is the ClusterRole (shipped in config/rbac and
	// the chart) a memory server's ServiceAccount is bound to: create on
	// tokenreviews and subjectaccessreviews, nothing else.
	MemoryServerClusterRole = "promptops-memory-server"
	// finalizerServing removes a served bank's ClusterRoleBinding, which,
	// cluster-scoped, cannot be owned by the namespaced bank.
	finalizerServing = "promptops.io/memory-server"
	// annotationAppliedHash on a serving child is the hash of the apply
	// configuration last written, so that an unchanged child is not written.
	annotationAppliedHash = "promptops.io/applied-hash"
	// labelComponent tells the memory server's pods from the Jobs' pods,
	// which carry the same bank label.
	labelComponent  = "app.kubernetes.io/component"
	componentMemory = "memory-server"
	// labelBankNamespace names the bank's namespace on its cluster-scoped
	// ClusterRoleBinding.
	labelBankNamespace = "promptops.io/memorybank-namespace"
)

// The manager writes the memory server's children, and binds the server's
// ServiceAccount to MemoryServerClusterRole (cluster-scoped reviews need a
// ClusterRoleBinding); `bind` on that one role is what lets it do so without
// holding the role's permissions for that purpose.
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=services;serviceaccounts,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterrolebindings,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=promptops-memory-server
// +kubebuilder:rbac:groups=promptops.io,resources=memorybanks,verbs=patch

func servingName(mb *promptopsv1.MemoryBank) string { return mb.Name + "-memory" }

// servingBindingName is unique per bank across namespaces; ':' cannot be in
// a namespace or bank name, so no two banks share it.
func servingBindingName(mb *promptopsv1.MemoryBank) string {
	return "promptops-memory:" + mb.Namespace + ":" + mb.Name
}

// ServingEndpoint is the URL of a served bank's HTTP API in the cluster,
// over HTTPS (memorybank_tls.go).
func ServingEndpoint(mb *promptopsv1.MemoryBank) string {
	return fmt.Sprintf("https://%s.%s.svc:%d", servingName(mb), mb.Namespace, ServingPort)
}

func servingReplicas(mb *promptopsv1.MemoryBank) int32 {
	return orDefault(mb.Spec.Serving.Replicas, promptopsv1.DefaultServingReplicas)
}

func servingSelector(mb *promptopsv1.MemoryBank) map[string]string {
	return map[string]string{promptopsv1.LabelMemoryBank: mb.Name, labelComponent: componentMemory}
}

func servingLabels(mb *promptopsv1.MemoryBank) map[string]string {
	l := servingSelector(mb)
	l[promptopsv1.LabelManagedBy] = promptopsv1.LabelManagedByValue
	return l
}

// servingChildren are the objects that serve one bank, as apply
// configurations; pdb is nil at one replica.
type servingChildren struct {
	serviceAccount *corev1ac.ServiceAccountApplyConfiguration
	binding        *rbacv1ac.ClusterRoleBindingApplyConfiguration
	deployment     *appsv1ac.DeploymentApplyConfiguration
	service        *corev1ac.ServiceApplyConfiguration
	pdb            *policyv1ac.PodDisruptionBudgetApplyConfiguration
}

// desiredServing computes a served bank's children: `promptops serve
// --bank` in the operator's image (or spec.consolidation.image), with the
// store, encoding and embeddings of the bank, secrets only by secretKeyRef,
// under the Restricted Pod Security profile.
func desiredServing(mb *promptopsv1.MemoryBank, image string) (*servingChildren, error) {
	if mb.Spec.Consolidation.Image != "" {
		image = mb.Spec.Consolidation.Image
	}
	name, ns := servingName(mb), mb.Namespace
	labels := servingLabels(mb)
	ref := bankOwner(mb).ref()
	replicas := servingReplicas(mb)

	env := []corev1.EnvVar{{Name: "PROMPTOPS_ENCODING", Value: string(orDefault(mb.Spec.LLM.Encoding, promptopsv1.DefaultEncoding))}}
	env = append(env, embeddingsEnv(mb)...)
	storeVar, volumes, mounts := storePod(mb)
	env = append(env, storeVar)
	resources := promptopsv1.DefaultServingResources()
	if r := mb.Spec.Serving.Resources; r != nil {
		resources = *r
	}
	probe := func(path string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("https"), Scheme: corev1.URISchemeHTTPS}}}
	}
	// The certificate's Secret, which serve reloads when it changes.
	volumes = append(volumes, corev1.Volume{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: ServingTLSSecret(mb), DefaultMode: ptrTo(int32(0o440))}}})
	mounts = append(mounts, corev1.VolumeMount{Name: "tls", MountPath: servingTLSDir, ReadOnly: true})
	pod := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{
			ServiceAccountName: name,
			// The server reviews callers' tokens with its own.
			AutomountServiceAccountToken: ptrTo(true),
			EnableServiceLinks:           ptrTo(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptrTo(true),
				RunAsUser:      ptrTo(jobUID),
				RunAsGroup:     ptrTo(jobUID),
				FSGroup:        ptrTo(jobUID),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:  "serve",
				Image: image,
				Args: slices.Concat([]string{"serve", "--bank", mb.Namespace + "/" + mb.Name, "--auth=kubernetes",
					fmt.Sprintf("--listen=:%d", ServingPort), "--tls-cert-file=" + servingTLSDir + "/" + corev1.TLSCertKey, "--tls-key-file=" + servingTLSDir + "/" + corev1.TLSPrivateKeyKey},
					redactionArgs(mb), trustArgs(mb)),
				Ports:           []corev1.ContainerPort{{Name: "https", ContainerPort: ServingPort, Protocol: corev1.ProtocolTCP}},
				Env:             env,
				VolumeMounts:    mounts,
				Resources:       resources,
				ReadinessProbe:  probe("/readyz"),
				LivenessProbe:   probe("/healthz"),
				SecurityContext: restrictedContainer(),
			}},
			Volumes: volumes,
		},
	}
	podAC := &corev1ac.PodTemplateSpecApplyConfiguration{}
	if err := convertJSON(pod, podAC); err != nil {
		return nil, err
	}
	strategy := appsv1ac.DeploymentStrategy().WithType(appsv1.RollingUpdateDeploymentStrategyType)
	if mb.Spec.Store.SQLite != nil {
		// A new pod could not open a claim the old one holds on another
		// node, nor should two servers write one SQLite file.
		strategy = appsv1ac.DeploymentStrategy().WithType(appsv1.RecreateDeploymentStrategyType)
	}
	c := &servingChildren{
		serviceAccount: corev1ac.ServiceAccount(name, ns).WithLabels(labels).WithOwnerReferences(ref),
		binding: rbacv1ac.ClusterRoleBinding(servingBindingName(mb)).
			WithLabels(map[string]string{promptopsv1.LabelManagedBy: promptopsv1.LabelManagedByValue, promptopsv1.LabelMemoryBank: mb.Name, labelBankNamespace: ns}).
			WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("ClusterRole").WithName(MemoryServerClusterRole)).
			WithSubjects(rbacv1ac.Subject().WithKind(rbacv1.ServiceAccountKind).WithName(name).WithNamespace(ns)),
		deployment: appsv1ac.Deployment(name, ns).WithLabels(labels).WithOwnerReferences(ref).
			WithSpec(appsv1ac.DeploymentSpec().
				WithReplicas(replicas).
				WithSelector(metav1ac.LabelSelector().WithMatchLabels(servingSelector(mb))).
				WithStrategy(strategy).
				WithTemplate(podAC)),
		service: corev1ac.Service(name, ns).WithLabels(labels).WithOwnerReferences(ref).
			WithSpec(corev1ac.ServiceSpec().
				WithType(corev1.ServiceTypeClusterIP).
				WithSelector(servingSelector(mb)).
				WithPorts(corev1ac.ServicePort().WithName("https").WithPort(ServingPort).WithTargetPort(intstr.FromString("https")).WithProtocol(corev1.ProtocolTCP))),
	}
	if replicas > 1 {
		c.pdb = policyv1ac.PodDisruptionBudget(name, ns).WithLabels(labels).WithOwnerReferences(ref).
			WithSpec(policyv1ac.PodDisruptionBudgetSpec().
				WithMaxUnavailable(intstr.FromInt32(1)).
				WithSelector(metav1ac.LabelSelector().WithMatchLabels(servingSelector(mb))))
	}
	return c, nil
}

// convertJSON copies a typed object into its apply configuration, which
// has the same JSON form.
func convertJSON(from, to any) error {
	data, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, to)
}

// reconcileServing runs the memory server of a bank with spec.serving, and
// removes it from a bank without; it sets status.serving and whether the
// server is available for the Ready condition.
func (r *MemoryBankReconciler) reconcileServing(ctx context.Context, s *bankScope) (phaseResult, error) {
	mb := s.mb
	if mb.Spec.Serving == nil {
		if err := r.removeServing(ctx, mb, s.orig); err != nil {
			return phaseResult{}, err
		}
		mb.Status.Serving = nil
		return phaseResult{}, nil
	}
	if r.JobImage == "" && mb.Spec.Consolidation.Image == "" {
		return phaseResult{}, &stallingError{reason: promptopsv1.ReasonNoJobImage,
			message: "No image for the memory server: start the manager with --job-image (or $PROMPTOPS_JOB_IMAGE), or set spec.consolidation.image."}
	}
	if !controllerutil.ContainsFinalizer(mb, finalizerServing) {
		if err := r.patchFinalizers(ctx, mb, s.orig, func() { controllerutil.AddFinalizer(mb, finalizerServing) }); err != nil {
			return phaseResult{}, err
		}
	}
	want, err := desiredServing(mb, r.JobImage)
	if err != nil {
		return phaseResult{}, err
	}
	// The certificate before the Deployment that mounts it.
	result, err := r.reconcileServingCert(ctx, mb)
	if err != nil {
		return phaseResult{}, err
	}
	applied := false
	for _, c := range []struct {
		obj client.Object
		ac  appliable
	}{
		{&corev1.ServiceAccount{}, want.serviceAccount},
		{&rbacv1.ClusterRoleBinding{}, want.binding},
		{&appsv1.Deployment{}, want.deployment},
		{&corev1.Service{}, want.service},
	} {
		did, err := r.applyChild(ctx, mb, c.obj, c.ac)
		if err != nil {
			return phaseResult{}, err
		}
		if _, ok := c.obj.(*appsv1.Deployment); ok {
			applied = did
		}
	}
	if want.pdb != nil {
		if _, err := r.applyChild(ctx, mb, &policyv1.PodDisruptionBudget{}, want.pdb); err != nil {
			return phaseResult{}, err
		}
	} else if err := r.deleteChild(ctx, mb, &policyv1.PodDisruptionBudget{}, types.NamespacedName{Namespace: mb.Namespace, Name: servingName(mb)}); err != nil {
		return phaseResult{}, err
	}

	dep := &appsv1.Deployment{}
	replicas := servingReplicas(mb)
	st := &promptopsv1.ServingStatus{Endpoint: ServingEndpoint(mb), Replicas: replicas}
	if err := r.Get(ctx, types.NamespacedName{Namespace: mb.Namespace, Name: servingName(mb)}, dep); client.IgnoreNotFound(err) != nil {
		return phaseResult{}, err
	} else if err == nil {
		st.ReadyReplicas = dep.Status.ReadyReplicas
	}
	mb.Status.Serving = st
	// A Deployment written now is judged by its next status, which the
	// watch brings.
	s.servingAvailable = !applied && dep.UID != "" && deploymentAvailable(dep, replicas)
	s.servingMessage = servingMessage(mb, dep, applied)
	return result, nil
}

// deploymentAvailable tells whether a Deployment rolled out its current
// generation with every replica available, as kstatus reads a Deployment.
func deploymentAvailable(d *appsv1.Deployment, replicas int32) bool {
	return d.Status.ObservedGeneration >= d.Generation &&
		d.Status.UpdatedReplicas == replicas &&
		d.Status.Replicas == replicas &&
		d.Status.AvailableReplicas >= replicas
}

func servingMessage(mb *promptopsv1.MemoryBank, d *appsv1.Deployment, applied bool) string {
	name := servingName(mb)
	if applied || d.UID == "" {
		return fmt.Sprintf("Memory server Deployment %s was written; waiting for its rollout.", name)
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse {
			return fmt.Sprintf("Memory server Deployment %s has %d of %d replicas available and does not progress (%s): %s See its pods' events and logs.",
				name, d.Status.AvailableReplicas, servingReplicas(mb), c.Reason, c.Message)
		}
	}
	return fmt.Sprintf("Memory server Deployment %s has %d of %d replicas updated and available.", name, min(d.Status.AvailableReplicas, d.Status.UpdatedReplicas), servingReplicas(mb))
}

// appliable is an apply configuration whose annotations can be set.
type appliable interface {
	runtime.ApplyConfiguration
	GetName() *string
}

// applyChild writes a child by server-side apply unless the cluster holds
// what was last applied (the hash annotation) on an object that is ours.
// It tells whether it wrote.
func (r *MemoryBankReconciler) applyChild(ctx context.Context, mb *promptopsv1.MemoryBank, obj client.Object, ac appliable) (bool, error) {
	data, err := json.Marshal(ac)
	if err != nil {
		return false, err
	}
	sum := sha256.Sum256(data)
	hash := hex.EncodeToString(sum[:16])
	gvk, err := r.GroupVersionKindFor(obj)
	if err != nil {
		return false, err
	}
	key := types.NamespacedName{Name: *ac.GetName()}
	if _, ok := obj.(*rbacv1.ClusterRoleBinding); !ok {
		key.Namespace = mb.Namespace
	}
	m := cached(obj, gvk)
	if err := r.Get(ctx, key, m); client.IgnoreNotFound(err) != nil {
		return false, err
	} else if err == nil && m.GetAnnotations()[annotationAppliedHash] == hash && m.GetDeletionTimestamp().IsZero() &&
		(key.Namespace == "" || isControlledBy(m.GetOwnerReferences(), mb.UID)) {
		return false, nil
	}
	switch a := ac.(type) {
	case *corev1ac.ServiceAccountApplyConfiguration:
		a.WithAnnotations(map[string]string{annotationAppliedHash: hash})
	case *rbacv1ac.ClusterRoleBindingApplyConfiguration:
		a.WithAnnotations(map[string]string{annotationAppliedHash: hash})
	case *appsv1ac.DeploymentApplyConfiguration:
		a.WithAnnotations(map[string]string{annotationAppliedHash: hash})
	case *corev1ac.ServiceApplyConfiguration:
		a.WithAnnotations(map[string]string{annotationAppliedHash: hash})
	case *policyv1ac.PodDisruptionBudgetApplyConfiguration:
		a.WithAnnotations(map[string]string{annotationAppliedHash: hash})
	default:
		return false, fmt.Errorf("no hash annotation for %T", ac)
	}
	if err := r.Apply(ctx, ac, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return false, fmt.Errorf("applying %s %s: %w", gvk.Kind, key, err)
	}
	ctrlLog(ctx).Info("Applied memory server object", "kind", gvk.Kind, "name", key.Name)
	return true, nil
}

// cached is what the cache holds of a child: the Deployment whole (its
// status is read), the others as metadata.
func cached(obj client.Object, gvk schema.GroupVersionKind) client.Object {
	if d, ok := obj.(*appsv1.Deployment); ok {
		return d
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	return m
}

// deleteChild deletes a namespaced child if it exists and is ours.
func (r *MemoryBankReconciler) deleteChild(ctx context.Context, mb *promptopsv1.MemoryBank, obj client.Object, key types.NamespacedName) error {
	gvk, err := r.GroupVersionKindFor(obj)
	if err != nil {
		return err
	}
	m := cached(obj, gvk)
	if err := r.Get(ctx, key, m); err != nil {
		return client.IgnoreNotFound(err)
	}
	labels := m.GetLabels()
	if !m.GetDeletionTimestamp().IsZero() || (key.Namespace != "" && !isControlledBy(m.GetOwnerReferences(), mb.UID)) ||
		(key.Namespace == "" && (labels[labelBankNamespace] != mb.Namespace || labels[promptopsv1.LabelMemoryBank] != mb.Name)) {
		return nil
	}
	uid := m.GetUID()
	if err := r.Delete(ctx, m, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting %s %s: %w", gvk.Kind, key, err)
	}
	ctrlLog(ctx).Info("Deleted memory server object", "kind", gvk.Kind, "name", key.Name)
	return nil
}

// removeServing deletes a bank's memory server and its binding, and then
// its finalizer.
func (r *MemoryBankReconciler) removeServing(ctx context.Context, mb, orig *promptopsv1.MemoryBank) error {
	key := types.NamespacedName{Namespace: mb.Namespace, Name: servingName(mb)}
	for _, obj := range []client.Object{&policyv1.PodDisruptionBudget{}, &corev1.Service{}, &appsv1.Deployment{}, &corev1.ServiceAccount{}} {
		if err := r.deleteChild(ctx, mb, obj, key); err != nil {
			return err
		}
	}
	return r.removeBinding(ctx, mb, orig)
}

// removeBinding deletes the bank's ClusterRoleBinding; the finalizer goes
// once it is gone.
func (r *MemoryBankReconciler) removeBinding(ctx context.Context, mb, orig *promptopsv1.MemoryBank) error {
	if err := r.deleteChild(ctx, mb, &rbacv1.ClusterRoleBinding{}, types.NamespacedName{Name: servingBindingName(mb)}); err != nil {
		return err
	}
	if !controllerutil.ContainsFinalizer(mb, finalizerServing) {
		return nil
	}
	return r.patchFinalizers(ctx, mb, orig, func() { controllerutil.RemoveFinalizer(mb, finalizerServing) })
}

// patchFinalizers changes the bank's finalizers; orig, the reconcile's
// copy to compute the status patch from, follows, so that the status
// patch's optimistic lock holds.
func (r *MemoryBankReconciler) patchFinalizers(ctx context.Context, mb, orig *promptopsv1.MemoryBank, change func()) error {
	before := mb.DeepCopy()
	change()
	if err := r.Patch(ctx, mb, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("updating the finalizers of MemoryBank %s: %w", mb.Name, err)
	}
	if orig != nil {
		orig.ResourceVersion = mb.ResourceVersion
		orig.Finalizers = mb.Finalizers
	}
	return nil
}

// finalizeBank removes what a deleted bank leaves outside its namespace.
func (r *MemoryBankReconciler) finalizeBank(ctx context.Context, mb *promptopsv1.MemoryBank) error {
	if !controllerutil.ContainsFinalizer(mb, finalizerServing) {
		return nil
	}
	return client.IgnoreNotFound(r.removeBinding(ctx, mb, nil))
}
