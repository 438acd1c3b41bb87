// Package controllers holds the reconcilers of PromptTemplate and MemoryBank.
// They are glue: the logic lives in internal/assembler, internal/rollout and
// internal/consolidation.
package controllers

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	promptopsv1 "github.com/promptops/promptops/api/v1"
)

// NewScheme knows the built-in kinds and promptops.io/v1.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(promptopsv1.AddToScheme(s))
	return s
}

// FieldOwner is the server-side apply field manager of everything the
// operator writes.
const FieldOwner = "promptops"

// Options configure the controllers.
type Options struct {
	// JobImage is the image consolidation Jobs run: the operator's own.
	JobImage string
	// JobEnv is set in every consolidation Job besides its own variables:
	// the manager's OpenTelemetry configuration (TelemetryEnv), so that
	// runs are traced where the manager is.
	JobEnv []corev1.EnvVar
	// CertIssuer is the cert-manager issuer of served banks' certificates;
	// nil: the manager issues them itself (memorybank_tls.go).
	CertIssuer *CertIssuer
	// MaxConcurrentReconciles per controller.
	MaxConcurrentReconciles int
	// PerTemplateMetrics publishes series of each PromptTemplate and
	// intent besides the counts per namespace.
	PerTemplateMetrics bool
	// Clock tells the time for schedules; nil is the real clock. Tests
	// inject their own.
	Clock Clock
	// TokenizerRetry is how often a template whose encoding's vocabulary
	// is not supplied looks for it again; zero is DefaultTokenizerRetry.
	TokenizerRetry time.Duration
}

// DefaultTokenizerRetry is how often a template whose vocabulary is not
// supplied looks for it again: the tokenizers directory is a mounted
// volume, which no watch reports.
const DefaultTokenizerRetry = 30 * time.Second

// Clock tells the time.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// CacheOptions limits what the manager caches, so that its memory does not
// grow with unrelated objects in the cluster: managed fields are dropped,
// ConfigMaps are cached as metadata only (their content is read directly
// when needed), and Jobs and Pods only when they belong to a MemoryBank.
//
// watch, when not nil, limits the PromptTemplates and MemoryBanks this
// manager sees to those it selects (Flux's --watch-label-selector, for
// sharding objects across managers); nil sees all.
func CacheOptions(watch labels.Selector) cache.Options {
	by := byObjectCache()
	templates := cache.ByObject{Transform: templateOutline}
	if watch != nil && !watch.Empty() {
		templates.Label = watch
		by[&promptopsv1.MemoryBank{}] = cache.ByObject{Label: watch}
	}
	by[&promptopsv1.PromptTemplate{}] = templates
	by[&corev1.ConfigMap{}] = cache.ByObject{Transform: configMapOutline}
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject:         by,
	}
}

// templateOutline is what the cache keeps of a PromptTemplate: its
// metadata (without managed fields and kubectl's last-applied copy), the
// references of its sections and intents (the index functions read them),
// its revisionHistoryLimit, and what settled reads of its status (the
// observed generation, revision, last handled request and the Ready
// condition without its message). Texts, which are most of a template's
// bytes, are never cached: a reconcile that has work to do reads the whole
// template from the API server. So the manager's memory grows by well under
// a kilobyte per template, also while a burst of new templates waits to be
// rendered.
func templateOutline(o any) (any, error) {
	pt, ok := o.(*promptopsv1.PromptTemplate)
	if !ok {
		return o, nil
	}
	pt.ManagedFields = nil
	delete(pt.Annotations, corev1.LastAppliedConfigAnnotation)
	out := &promptopsv1.PromptTemplate{TypeMeta: pt.TypeMeta, ObjectMeta: pt.ObjectMeta}
	out.Spec.RevisionHistoryLimit = pt.Spec.RevisionHistoryLimit
	for _, s := range pt.Spec.Sections {
		if s.From == nil && s.Memory == nil {
			continue
		}
		ref := promptopsv1.Section{Name: s.Name, From: s.From}
		if s.Memory != nil {
			ref.Memory = &promptopsv1.MemorySection{BankRef: s.Memory.BankRef}
		}
		out.Spec.Sections = append(out.Spec.Sections, ref)
	}
	for _, in := range pt.Spec.Intents {
		if in.From != nil {
			out.Spec.Intents = append(out.Spec.Intents, promptopsv1.Intent{Name: in.Name, From: in.From})
		}
	}
	st := &out.Status
	st.ObservedGeneration, st.Revision, st.LastHandledReconcileAt = pt.Status.ObservedGeneration, pt.Status.Revision, pt.Status.LastHandledReconcileAt
	if ready := meta.FindStatusCondition(pt.Status.Conditions, promptopsv1.ConditionReady); ready != nil {
		c := *ready
		c.Message = ""
		st.Conditions = []metav1.Condition{c}
	}
	return out, nil
}

// configMapOutline is what the cache keeps of a ConfigMap's metadata (it
// caches no ConfigMap's data): its identity, creation and deletion times,
// its controller reference, the labels of ours that say whose and what it
// is, and our revision annotation. Any ConfigMap may be a template's
// source, so the metadata of every ConfigMap the manager may read is
// cached; the rest of their labels and annotations stays out (a kubectl
// last-applied annotation holds a whole ConfigMap), and the label keys and
// the values that repeat are the constants' strings, not a copy each.
func configMapOutline(o any) (any, error) {
	m, ok := o.(*metav1.PartialObjectMetadata)
	if !ok {
		return o, nil
	}
	out := &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		CreationTimestamp: m.CreationTimestamp, DeletionTimestamp: m.DeletionTimestamp,
	}}
	for _, ref := range m.OwnerReferences {
		if ref.Controller != nil && *ref.Controller {
			out.OwnerReferences = []metav1.OwnerReference{ref}
			break
		}
	}
	for _, k := range []string{promptopsv1.LabelManagedBy, promptopsv1.LabelPromptTemplate, promptopsv1.LabelMemoryBank, labelRole} {
		v, ok := m.Labels[k]
		if !ok {
			continue
		}
		if out.Labels == nil {
			out.Labels = map[string]string{}
		}
		for _, c := range []string{promptopsv1.LabelManagedByValue, roleLive, roleHistory} {
			if v == c {
				v = c
			}
		}
		out.Labels[k] = v
	}
	if v, ok := m.Annotations[promptopsv1.AnnotationRevision]; ok {
		out.Annotations = map[string]string{promptopsv1.AnnotationRevision: v}
	}
	return out, nil
}

// ctrlLog is the reconcile's logger.
func ctrlLog(ctx context.Context) logr.Logger { return ctrl.LoggerFrom(ctx) }

// The manager reads and watches its own kinds and writes their status.
// +kubebuilder:rbac:groups=promptops.io,resources=prompttemplates;memorybanks,verbs=get;list;watch
// +kubebuilder:rbac:groups=promptops.io,resources=prompttemplates/status;memorybanks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=promptops.io,resources=prompttemplates/finalizers;memorybanks/finalizers,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Setup registers every controller with the manager.
func Setup(mgr ctrl.Manager, opts Options) error {
	copts := controller.Options{MaxConcurrentReconciles: max(1, opts.MaxConcurrentReconciles)}
	pt := &PromptTemplateReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("promptops-prompttemplate"),

		PerTemplateMetrics: opts.PerTemplateMetrics,
		TokenizerRetry:     cmp.Or(opts.TokenizerRetry, DefaultTokenizerRetry),
	}
	if err := pt.SetupWithManager(mgr, copts); err != nil {
		return fmt.Errorf("setting up the PromptTemplate controller: %w", err)
	}
	clock := opts.Clock
	if clock == nil {
		clock = realClock{}
	}
	mb := &MemoryBankReconciler{
		Client:     mgr.GetClient(),
		APIReader:  mgr.GetAPIReader(),
		Recorder:   mgr.GetEventRecorder("promptops-memorybank"),
		Clock:      clock,
		JobImage:   opts.JobImage,
		JobEnv:     opts.JobEnv,
		CertIssuer: opts.CertIssuer,
	}
	if err := mb.SetupWithManager(mgr, copts); err != nil {
		return fmt.Errorf("setting up the MemoryBank controller: %w", err)
	}
	return nil
}

// byObjectCache restricts the cache of the kinds the operator writes for
// banks (Jobs, Pods, the memory server's objects) to its own, by label.
func byObjectCache() map[client.Object]cache.ByObject {
	own := labels.SelectorFromSet(labels.Set{promptopsv1.LabelManagedBy: promptopsv1.LabelManagedByValue})
	return map[client.Object]cache.ByObject{
		&batchv1.Job{}:                  {Label: own},
		&corev1.Pod{}:                   {Label: own},
		&appsv1.Deployment{}:            {Label: own},
		&corev1.Service{}:               {Label: own},
		&corev1.ServiceAccount{}:        {Label: own},
		&policyv1.PodDisruptionBudget{}: {Label: own},
		&rbacv1.ClusterRoleBinding{}:    {Label: own},
	}
}
