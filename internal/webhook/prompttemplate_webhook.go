// Package webhook holds the opt-in validating admission webhook of
// PromptTemplate, which shows budgets at `kubectl apply` time, and the
// self-signed certificates it serves with when cert-manager is absent.
package webhook

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/controllers"
	"github.com/promptops/promptops/internal/assembler"
)

// readTimeout bounds the ConfigMap reads of one review: an apply waits for
// the answer, and the webhook's failurePolicy is Ignore, so a slow read only
// loses the warnings.
const readTimeout = 2 * time.Second

// failurePolicy=ignore: a down operator never blocks an apply.
// +kubebuilder:webhook:path=/validate-promptops-io-v1-prompttemplate,mutating=false,failurePolicy=ignore,sideEffects=None,groups=promptops.io,resources=prompttemplates,verbs=create;update,versions=v1,name=vprompttemplate.promptops.io,admissionReviewVersions=v1,timeoutSeconds=5

// PromptTemplateValidator renders a template as the reconciler would, with
// the referenced ConfigMaps it can read, and answers with warnings: one per
// intent over budget, one per cut, missing reference or fallback in use. It
// denies only content that can never render.
type PromptTemplateValidator struct {
	// Reader reads referenced ConfigMaps, directly from the API server (the
	// manager caches ConfigMaps as metadata only).
	Reader client.Reader
}

var _ admission.Validator[*promptopsv1.PromptTemplate] = &PromptTemplateValidator{}

// SetupWithManager registers the webhook on the manager's webhook server.
func SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &promptopsv1.PromptTemplate{}).
		WithValidator(&PromptTemplateValidator{Reader: mgr.GetAPIReader()}).
		Complete()
}

// ValidateCreate checks a new template.
func (v *PromptTemplateValidator) ValidateCreate(ctx context.Context, pt *promptopsv1.PromptTemplate) (admission.Warnings, error) {
	return v.Review(ctx, pt)
}

// ValidateUpdate checks a changed template. An update that leaves the spec
// alone (labels, annotations, a reconcile request) is never denied, so a
// template that does not render can still be annotated or deleted.
func (v *PromptTemplateValidator) ValidateUpdate(ctx context.Context, old, pt *promptopsv1.PromptTemplate) (admission.Warnings, error) {
	warnings, err := v.Review(ctx, pt)
	if err != nil && (equality.Semantic.DeepEqual(old.Spec, pt.Spec) || !pt.DeletionTimestamp.IsZero()) {
		return append(warnings, err.Error()), nil // Review's errors are sentences already
	}
	return warnings, err
}

// ValidateDelete allows every deletion.
func (v *PromptTemplateValidator) ValidateDelete(context.Context, *promptopsv1.PromptTemplate) (admission.Warnings, error) {
	return nil, nil
}

// Review renders pt and returns its warnings, and an error when the
// template can never render: the errors that make the reconciler mark it
// Stalled as invalid, with the message its Ready condition would show.
func (v *PromptTemplateValidator) Review(ctx context.Context, pt *promptopsv1.PromptTemplate) (admission.Warnings, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	// A ConfigMap it cannot read counts as missing and is named in a
	// warning.
	var warnings admission.Warnings
	sources, _ := controllers.ReadSources(ctx, v.Reader, pt, func(name string, err error) error {
		warnings = append(warnings, fmt.Sprintf("ConfigMap %s could not be read (%v); its keys count as missing here", name, err))
		return nil
	})
	res, err := assembler.RenderContext(ctx, assembler.Input{Namespace: pt.Namespace, Name: pt.Name, Spec: &pt.Spec, Sources: sources})
	if err != nil {
		msg := controllers.RenderErrorMessage(err)
		if neverRenders(err) {
			return warnings, errors.New(msg)
		}
		var missing *assembler.MissingReferenceError
		if errors.As(err, &missing) {
			msg += " Waiting for it."
		}
		return append(warnings, msg), nil
	}
	// As the reconciler: the ConfigMap's size matters only when it is
	// written (within budget, or over it under onExceed: Warn).
	if res.Applies() {
		if _, err := assembler.ConfigMapData(res); err != nil && neverRenders(err) {
			return warnings, errors.New(controllers.RenderErrorMessage(err))
		}
	}
	for _, a := range res.OverBudget() {
		warnings = append(warnings, a.Message())
	}
	for _, a := range res.Truncated() {
		warnings = append(warnings, fmt.Sprintf("intent %s: static sections cut to fit the budget: %s", a.Intent, strings.Join(a.Cut, ", ")))
	}
	if floor := int(pt.Spec.Budget.MinCacheableTokens); floor > 0 {
		for _, a := range res.Intents {
			if a.CacheableTokens < floor {
				warnings = append(warnings, fmt.Sprintf("intent %s: the prefix the same in every request is %d tokens, under spec.budget.minCacheableTokens %d: move runtime and memory sections after the static ones so that a prompt cache can reuse more", a.Intent, a.CacheableTokens, floor))
			}
		}
	}
	warnings = append(warnings, res.Notes...)
	return warnings, nil
}

// neverRenders is true for the errors no ConfigMap can heal.
func neverRenders(err error) bool {
	var (
		invalid  *assembler.InvalidSpecError
		unknown  *assembler.UnknownVariableError
		tooLarge *assembler.TooLargeError
	)
	return errors.As(err, &invalid) || errors.As(err, &unknown) || errors.As(err, &tooLarge)
}
