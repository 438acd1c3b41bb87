package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/assembler"
)

const (
	// labelRole tells a template's live ConfigMap from its history copies.
	labelRole   = "promptops.io/role"
	roleLive    = "rendered"
	roleHistory = "history"
)

func renderedName(pt *promptopsv1.PromptTemplate) string { return pt.Name + "-prompts" }

func historyName(pt *promptopsv1.PromptTemplate, revision string) string {
	return fmt.Sprintf("%s-prompts-%s", pt.Name, revisionHash8(revision))
}

func revisionHash8(revision string) string {
	const prefix = "sha256:"
	if len(revision) >= len(prefix)+8 {
		return revision[len(prefix) : len(prefix)+8]
	}
	return revision
}

// owner is the object that controls a child.
type owner struct {
	kind       string
	name, ns   string
	uid        types.UID
	ownerLabel string // label naming the owner on its children
}

func templateOwner(pt *promptopsv1.PromptTemplate) owner {
	return owner{kind: "PromptTemplate", name: pt.Name, ns: pt.Namespace, uid: pt.UID, ownerLabel: promptopsv1.LabelPromptTemplate}
}

func (o owner) labels(role string) map[string]string {
	return map[string]string{promptopsv1.LabelManagedBy: promptopsv1.LabelManagedByValue, o.ownerLabel: o.name, labelRole: role}
}

func (o owner) ref() *metav1ac.OwnerReferenceApplyConfiguration {
	return metav1ac.OwnerReference().WithAPIVersion(promptopsv1.GroupVersion.String()).WithKind(o.kind).
		WithName(o.name).WithUID(o.uid).WithController(true).WithBlockOwnerDeletion(true)
}

// desiredConfigMap is a child ConfigMap as an apply configuration.
func desiredConfigMap(o owner, name, role string, data map[string]string, revision string, extra map[string]string) *corev1ac.ConfigMapApplyConfiguration {
	annotations := map[string]string{promptopsv1.AnnotationRevision: revision}
	maps.Copy(annotations, extra)
	ac := corev1ac.ConfigMap(name, o.ns).WithLabels(o.labels(role)).WithAnnotations(annotations).WithOwnerReferences(o.ref()).WithData(data)
	if role == roleHistory {
		ac.WithImmutable(true)
	}
	return ac
}

// configMapWriter writes child ConfigMaps only when their content changed.
type configMapWriter struct {
	client.Client
	// APIReader reads ConfigMap content directly: the cache holds ConfigMap
	// metadata only.
	APIReader client.Reader
	// verified remembers, per ConfigMap, the verifiedAs whose content
	// is known to match its revision annotation, so that a settled object
	// needs no read and no write.
	verified sync.Map
}

// applyConfigMaps writes the live ConfigMap (data, under the stable
// revision rev) and, with revisionHistoryLimit, the immutable copy of the
// stable revision (its own keys, stable). Each is written only when its
// content differs from what the cluster holds.
func (r *PromptTemplateReconciler) applyConfigMaps(ctx context.Context, pt *promptopsv1.PromptTemplate, data map[string]string, rev string, stable map[string]string) error {
	if err := r.cms.ensure(ctx, templateOwner(pt), renderedName(pt), roleLive, data, rev, nil); err != nil {
		return err
	}
	if historyLimit(pt) > 0 {
		return r.cms.ensure(ctx, templateOwner(pt), historyName(pt, rev), roleHistory, stable, rev, nil)
	}
	return nil
}

func historyLimit(pt *promptopsv1.PromptTemplate) int {
	if pt.Spec.RevisionHistoryLimit == nil {
		return 0
	}
	return int(*pt.Spec.RevisionHistoryLimit)
}

func (r *configMapWriter) ensure(ctx context.Context, o owner, name, role string, data map[string]string, rev string, annotations map[string]string) error {
	key := types.NamespacedName{Namespace: o.ns, Name: name}
	upToDate, err := r.upToDate(ctx, o.uid, key, role, data, rev)
	if err != nil || upToDate {
		return err
	}
	if role == roleHistory {
		// An immutable copy of another revision under this name (a hash8
		// collision) cannot be changed; leave it.
		existing := &metav1.PartialObjectMetadata{}
		existing.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
		if err := r.Get(ctx, key, existing); err == nil {
			return nil
		}
	}
	ac := desiredConfigMap(o, name, role, data, rev, annotations)
	if err := r.Apply(ctx, ac, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying ConfigMap %s: %w", key, err)
	}
	// The answer is the whole object: keys someone else added survive an
	// apply, and go now.
	if err := r.dropForeignKeys(ctx, key, ac, data); err != nil {
		return err
	}
	if ac.ResourceVersion != nil {
		r.verified.Store(key, verifiedAs{resourceVersion: *ac.ResourceVersion, rollout: data[assembler.RolloutKey]})
	}
	ctrlLog(ctx).Info("Rendered ConfigMap", "configMap", name, "revision", rev)
	return nil
}

// upToDate tells whether the ConfigMap already holds this revision. It
// compares the cached metadata first; the content is read from the API only
// when the object changed since it was last checked (a hand edit, or a
// restart of the operator).
func (r *configMapWriter) upToDate(ctx context.Context, uid types.UID, key types.NamespacedName, role string, data map[string]string, rev string) (bool, error) {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	if err := r.Get(ctx, key, m); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	if m.Annotations[promptopsv1.AnnotationRevision] != rev || m.Labels[labelRole] != role || !isControlledBy(m.OwnerReferences, uid) {
		return false, nil
	}
	if v, ok := r.verified.Load(key); ok && v == (verifiedAs{resourceVersion: m.ResourceVersion, rollout: data[assembler.RolloutKey]}) {
		return true, nil
	}
	cm := &corev1.ConfigMap{}
	if err := r.APIReader.Get(ctx, key, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	if !maps.Equal(cm.Data, data) || len(cm.BinaryData) > 0 {
		return false, nil
	}
	r.verified.Store(key, verifiedAs{resourceVersion: cm.ResourceVersion, rollout: data[assembler.RolloutKey]})
	return true, nil
}

// verifiedAs is what a ConfigMap's content was verified to be: the
// revision of its annotation (at that resourceVersion) and, during a
// rollout, the canary's and its weight (rollout.json, "" outside one).
// Revisions and weight determine the content.
type verifiedAs struct {
	resourceVersion string
	rollout         string
}

// verifiedAt tells, from the cache and without reading the API, that the
// ConfigMap holds revision rev, and no rollout, as this process last
// verified or wrote it.
func (r *configMapWriter) verifiedAt(ctx context.Context, uid types.UID, key types.NamespacedName, role, rev string) bool {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	if err := r.Get(ctx, key, m); err != nil {
		return false
	}
	if m.Annotations[promptopsv1.AnnotationRevision] != rev || m.Labels[labelRole] != role || !isControlledBy(m.OwnerReferences, uid) {
		return false
	}
	v, ok := r.verified.Load(key)
	return ok && v == verifiedAs{resourceVersion: m.ResourceVersion}
}

// dropForeignKeys removes the keys someone else added (data or binaryData)
// to a ConfigMap the operator owns, as the answer to its apply (live)
// shows them: server-side apply removes only keys its own field manager
// set, and applications must see exactly what was rendered. It reads
// nothing and writes only when there are such keys; live's resourceVersion
// becomes the patched object's.
func (r *configMapWriter) dropForeignKeys(ctx context.Context, key types.NamespacedName, live *corev1ac.ConfigMapApplyConfiguration, data map[string]string) error {
	if live.Immutable != nil && *live.Immutable {
		return nil
	}
	patch := map[string]any{}
	drop := map[string]any{}
	for k := range live.Data {
		if _, ok := data[k]; !ok {
			drop[k] = nil
		}
	}
	if len(drop) > 0 {
		patch["data"] = drop
	}
	if len(live.BinaryData) > 0 {
		patch["binaryData"] = nil
	}
	if len(patch) == 0 {
		return nil
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	if err := r.Patch(ctx, cm, client.RawPatch(types.MergePatchType, body)); err != nil {
		return fmt.Errorf("removing keys added to ConfigMap %s by hand: %w", key, err)
	}
	live.ResourceVersion = &cm.ResourceVersion
	return nil
}

func isControlledBy(refs []metav1.OwnerReference, uid types.UID) bool {
	for _, ref := range refs {
		if ref.UID == uid && ref.Controller != nil && *ref.Controller {
			return true
		}
	}
	return false
}

// pruneHistory deletes history copies beyond revisionHistoryLimit, oldest
// first, and never the copy of the current revision while the limit keeps any.
func (r *PromptTemplateReconciler) pruneHistory(ctx context.Context, pt *promptopsv1.PromptTemplate) error {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
	// By index: a label selector would scan every ConfigMap of the
	// namespace, each reconcile (quadratic in the templates of a namespace).
	if err := r.List(ctx, list, client.InNamespace(pt.Namespace), client.MatchingFields{historyOfIndex: pt.Name}); err != nil {
		return err
	}
	var copies []metav1.PartialObjectMetadata
	current := ""
	if pt.Status.Revision != "" && historyLimit(pt) > 0 {
		current = historyName(pt, pt.Status.Revision)
	}
	for _, item := range list.Items {
		if isControlledBy(item.OwnerReferences, pt.UID) && item.Name != current {
			copies = append(copies, item)
		}
	}
	keep := historyLimit(pt)
	if current != "" {
		keep-- // the current revision's copy counts towards the limit
	}
	if len(copies) <= keep {
		return nil
	}
	sort.Slice(copies, func(i, j int) bool {
		ti, tj := copies[i].CreationTimestamp, copies[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return tj.Before(&ti)
		}
		return copies[i].Name > copies[j].Name
	})
	for _, old := range copies[keep:] {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: old.Namespace, Name: old.Name}}
		if err := r.Delete(ctx, cm, client.Preconditions{UID: &old.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("pruning ConfigMap %s: %w", old.Name, err)
		}
	}
	return nil
}

// historyOfIndex indexes the cached ConfigMap metadata of history copies by
// the name of their template.
const historyOfIndex = "promptops.io/history-of"

// configMapMeta is the cache's metadata-only ConfigMap.
func configMapMeta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	return m
}

// historyOf is historyOfIndex's function: a history copy's template.
func historyOf(o client.Object) []string {
	l := o.GetLabels()
	if l[labelRole] != roleHistory || l[promptopsv1.LabelPromptTemplate] == "" {
		return nil
	}
	return []string{l[promptopsv1.LabelPromptTemplate]}
}
