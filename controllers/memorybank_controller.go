package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/tokens"
)

// MemoryBankReconciler renders a bank's consolidation prompt and runs its
// consolidation Jobs on schedule and on demand.
type MemoryBankReconciler struct {
	client.Client
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     Clock
	// JobImage is the operator's own image.
	JobImage string
	// JobEnv is set in every Job (Options.JobEnv).
	JobEnv []corev1.EnvVar
	// CertIssuer issues served banks' certificates; nil: the manager does.
	CertIssuer *CertIssuer

	cms *configMapWriter
	// deferred holds, per bank UID, the request value whose RunDeferred
	// event was emitted, so that a waiting request is announced once (once
	// more after a manager restart), not at every reconcile.
	deferred sync.Map
}

// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// SetupWithManager registers the controller.
func (r *MemoryBankReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	r.init()
	return ctrl.NewControllerManagedBy(mgr).
		For(&promptopsv1.MemoryBank{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Owns(&corev1.ConfigMap{}, builder.OnlyMetadata).
		Owns(&batchv1.Job{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}, builder.OnlyMetadata).
		Owns(&corev1.ServiceAccount{}, builder.OnlyMetadata).
		Owns(&policyv1.PodDisruptionBudget{}, builder.OnlyMetadata).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			name := o.GetLabels()[promptopsv1.LabelMemoryBank]
			if name == "" {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
		})).
		WithOptions(opts).
		Named("memorybank").
		Complete(r)
}

func (r *MemoryBankReconciler) init() {
	if r.cms == nil {
		r.cms = &configMapWriter{Client: r.Client, APIReader: r.APIReader}
	}
	if r.Clock == nil {
		r.Clock = realClock{}
	}
}

// bankScope is what one reconcile of a bank works on, phase to phase.
type bankScope struct {
	mb *promptopsv1.MemoryBank
	// orig is the bank as read, from which the status patch is computed.
	orig        *promptopsv1.MemoryBank
	now         time.Time
	missionHash string
	// active is the running Job, if any.
	active *batchv1.Job
	// sched is the parsed schedule; nil runs on demand only.
	sched cron.Schedule
	// noImage: the manager has no Job image and the bank names none.
	noImage bool
	// servingAvailable: the memory server of spec.serving has its replicas
	// updated and available; servingMessage says how far it is.
	servingAvailable bool
	servingMessage   string
}

// Reconcile handles one bank in phases: render the consolidation ConfigMap,
// observe Jobs, check the schedule and image, start a due run; the status
// is written once, at the end, errors included, by the deferred finish,
// which also decides what is returned.
func (r *MemoryBankReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	r.init()
	mb := &promptopsv1.MemoryBank{}
	if err := r.Get(ctx, req.NamespacedName, mb); err != nil {
		if apierrors.IsNotFound(err) {
			forgetBankMetrics(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !mb.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.finalizeBank(ctx, mb)
	}
	orig := mb.DeepCopy()
	scope := &bankScope{mb: mb, orig: orig, now: r.Clock.Now().UTC()}
	var res phaseResult
	defer func() {
		result, retErr = r.statusWriter().finish(ctx, mb, bankStatus(orig), bankStatus(mb), res, retErr)
		recordBankMetrics(mb)
	}()
	handleReconcileRequest(mb.Annotations, &mb.Status.LastHandledReconcileAt)

	if res, retErr = runPhases(ctx, scope,
		r.reconcileConfigMap,
		r.reconcileServing,
		r.reconcileJobs,
		r.reconcileSchedule,
		r.reconcileRuns,
	); retErr != nil {
		return ctrl.Result{}, retErr
	}
	r.setStatus(mb, scope)
	return ctrl.Result{}, nil
}

// bankStatus points the status finish at a bank's.
func bankStatus(mb *promptopsv1.MemoryBank) statusOf {
	return statusOf{status: &mb.Status, conditions: &mb.Status.Conditions, observedGeneration: &mb.Status.ObservedGeneration}
}

func (r *MemoryBankReconciler) statusWriter() statusWriter {
	return statusWriter{client: r.Client, recorder: r.Recorder, action: "Reconcile"}
}

func (r *MemoryBankReconciler) reconcileConfigMap(ctx context.Context, s *bankScope) (phaseResult, error) {
	hash, err := r.renderConfigMap(ctx, s.mb)
	s.missionHash = hash
	return phaseResult{}, err
}

// The keys of the consolidation ConfigMap.
const (
	missionKey  = "mission.txt"
	promptKey   = "prompt.txt"
	settingsKey = "settings.json"
)

func consolidationName(mb *promptopsv1.MemoryBank) string { return mb.Name + "-consolidation" }

func bankOwner(mb *promptopsv1.MemoryBank) owner {
	return owner{kind: "MemoryBank", name: mb.Name, ns: mb.Namespace, uid: mb.UID, ownerLabel: promptopsv1.LabelMemoryBank}
}

// contentHash identifies a ConfigMap's data.
func contentHash(data map[string]string) string {
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%d:%s%d:%s", len(k), k, len(data[k]), data[k])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// renderConfigMap writes <name>-consolidation and sets the prompt figures.
func (r *MemoryBankReconciler) renderConfigMap(ctx context.Context, mb *promptopsv1.MemoryBank) (string, error) {
	mission := strings.TrimSpace(mb.Spec.Mission)
	if mission == "" {
		mission = consolidation.DefaultMission
	}
	prompt := consolidation.SystemPrompt(mission)
	hash := consolidation.MissionHash(mission)
	enc, err := tokens.Get(string(orDefault(mb.Spec.LLM.Encoding, promptopsv1.DefaultEncoding)))
	if err != nil {
		return "", err
	}
	maxPrompt := int(orDefault(mb.Spec.LLM.MaxPromptTokens, promptopsv1.DefaultMaxPromptTokens))
	settings, _ := json.MarshalIndent(map[string]any{
		"bank":                    mb.Namespace + "/" + mb.Name,
		"missionHash":             hash,
		"model":                   mb.Spec.LLM.Model,
		"baseURL":                 mb.Spec.LLM.BaseURL,
		"encoding":                string(orDefault(mb.Spec.LLM.Encoding, promptopsv1.DefaultEncoding)),
		"maxPromptTokens":         maxPrompt,
		"maxObservations":         mb.Spec.MaxObservations,
		"maxObservationsPerScope": mb.Spec.MaxObservationsPerScope,
		"parallelism":             orDefault(mb.Spec.Consolidation.Parallelism, promptopsv1.DefaultParallelism),
		"batchSize":               orDefault(mb.Spec.Consolidation.BatchSize, promptopsv1.DefaultBatchSize),
		"maxFactsPerRun":          orDefault(mb.Spec.Consolidation.MaxFactsPerRun, promptopsv1.DefaultMaxFactsPerRun),
		"maxAttempts":             orDefault(mb.Spec.Consolidation.MaxAttempts, promptopsv1.DefaultMaxAttempts),
		"maxTokensPerRun":         orDefault(mb.Spec.Consolidation.MaxTokensPerRun, promptopsv1.DefaultMaxTokensPerRun),
		"schedule":                mb.Spec.Consolidation.Schedule,
		"note":                    "The capacity note is added per run: it depends on the bank's current count of observations.",
	}, "", "  ")
	data := map[string]string{missionKey: mission, promptKey: prompt, settingsKey: string(settings) + "\n"}
	rev := contentHash(data)
	if err := r.cms.ensure(ctx, bankOwner(mb), consolidationName(mb), roleLive, data, rev, map[string]string{promptopsv1.AnnotationMissionHash: hash}); err != nil {
		return "", err
	}
	n := enc.Count(prompt)
	mb.Status.ConfigMapName = consolidationName(mb)
	mb.Status.MissionHash = hash
	mb.Status.Recall = promptopsv1.RecallLexical
	if mb.Spec.Embeddings != nil {
		mb.Status.Recall = promptopsv1.RecallHybrid
	}
	mb.Status.PromptTokens = int32(n)
	gen := mb.Generation
	if left := maxPrompt - n; left*4 < maxPrompt {
		setCondition(&mb.Status.Conditions, gen, promptopsv1.ConditionBudgetExceeded, metav1.ConditionTrue, promptopsv1.ReasonBudgetExceeded,
			fmt.Sprintf("The fixed consolidation prompt takes %d of llm.maxPromptTokens %d, leaving %d for facts and observations, less than a quarter; shorten the mission or raise maxPromptTokens.", n, maxPrompt, left))
	} else {
		setCondition(&mb.Status.Conditions, gen, promptopsv1.ConditionBudgetExceeded, metav1.ConditionFalse, promptopsv1.ReasonWithinBudget,
			fmt.Sprintf("The fixed consolidation prompt takes %d of %d tokens.", n, maxPrompt))
	}
	return hash, nil
}
