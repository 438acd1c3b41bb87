package serve

import (
	"context"
	"fmt"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// WatchSelector selects the live rendered ConfigMaps: the operator's, role
// rendered (not the immutable history copies).
const WatchSelector = "app.kubernetes.io/managed-by=promptops,promptops.io/role=rendered"

// The owner a rendered ConfigMap must have.
const (
	ownerAPIVersion = "promptops.io/v1"
	ownerKind       = "PromptTemplate"
	renderedSuffix  = "-prompts"
)

var promptTemplates = schema.GroupVersionResource{Group: "promptops.io", Version: "v1", Resource: "prompttemplates"}

// Watch serves the plans of the rendered ConfigMaps the API server holds,
// in the given namespaces or in every namespace when there are none, until
// ctx ends. It returns once the informers have synced and the first
// snapshot is published; errors after that are logged by client-go and
// retried.
//
// A ConfigMap counts only when the operator rendered it: it is named
// <name>-prompts and controlled by the PromptTemplate <name> of its own
// namespace, one that exists with the UID of the owner reference. Its
// template is that namespace and name, whatever its plan says; a plan that
// claims another is refused (see loader). Whoever may create ConfigMaps in
// a namespace can copy the labels, even the owner reference of a template
// of that namespace, but can never name a template of another namespace.
func (s *Server) Watch(ctx context.Context, cfg *rest.Config, namespaces []string) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	changed := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	onConfigMap := cache.ResourceEventHandlerFuncs{AddFunc: poke, UpdateFunc: func(_, o any) { poke(o) }, DeleteFunc: poke}
	// A template's name and UID never change: its status updates (many)
	// cannot change what a ConfigMap names.
	onTemplate := cache.ResourceEventHandlerFuncs{AddFunc: poke, DeleteFunc: poke}
	type scope struct {
		configMaps corelisters.ConfigMapLister
		templates  cache.GenericLister
	}
	var (
		scopes  []scope
		synced  []cache.InformerSynced
		started []interface{ Shutdown() }
	)
	shutdown := func() {
		for _, f := range started {
			f.Shutdown()
		}
	}
	for _, ns := range namespaces {
		factory := informers.NewSharedInformerFactoryWithOptions(cs, 10*time.Minute,
			informers.WithNamespace(ns),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = WatchSelector }))
		cms := factory.Core().V1().ConfigMaps()
		// Only metadata of PromptTemplates: name and UID are what ownership needs.
		mfactory := metadatainformer.NewFilteredSharedInformerFactory(mc, 10*time.Minute, ns, nil)
		pts := mfactory.ForResource(promptTemplates)
		if _, err := cms.Informer().AddEventHandler(onConfigMap); err != nil {
			return err
		}
		if _, err := pts.Informer().AddEventHandler(onTemplate); err != nil {
			return err
		}
		synced = append(synced, cms.Informer().HasSynced, pts.Informer().HasSynced)
		// The cache keeps only what a plan needs: no managed fields.
		if err := cms.Informer().SetTransform(func(o any) (any, error) {
			if cm, ok := o.(*corev1.ConfigMap); ok {
				cm.ManagedFields = nil
				if p, ok := cm.Data[PlanFile]; ok {
					cm.Data = map[string]string{PlanFile: p}
				} else {
					cm.Data = nil
				}
			}
			return o, nil
		}); err != nil {
			return err
		}
		if err := pts.Informer().SetTransform(func(o any) (any, error) {
			if m, ok := o.(*metav1.PartialObjectMetadata); ok {
				m.ManagedFields = nil
				m.Annotations = nil
			}
			return o, nil
		}); err != nil {
			return err
		}
		factory.Start(ctx.Done())
		mfactory.Start(ctx.Done())
		started = append(started, factory, mfactory)
		scopes = append(scopes, scope{configMaps: cms.Lister(), templates: pts.Lister()})
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		shutdown()
		return fmt.Errorf("the ConfigMap and PromptTemplate watches did not sync: %w", ctx.Err())
	}
	publish := func() {
		sources := map[string]source{}
		for _, sc := range scopes {
			cms, err := sc.configMaps.List(labels.Everything())
			if err != nil {
				s.log.Error(err, "Listing rendered ConfigMaps")
				return
			}
			for _, cm := range cms {
				data, ok := cm.Data[PlanFile]
				if !ok {
					continue
				}
				src := renderedSource(cm, sc.templates)
				// A view of the cached string, not a copy: the loader
				// only reads it (a digest, and a parse when it changed).
				src.data = unsafe.Slice(unsafe.StringData(data), len(data))
				src.version = cm.ResourceVersion
				sources["configmap "+cm.Namespace+"/"+cm.Name] = src
			}
		}
		s.loader.load(sources)
	}
	publish()
	go func() {
		defer shutdown()
		for {
			select {
			case <-ctx.Done():
				return
			case <-changed:
				publish()
			}
		}
	}()
	return nil
}

// renderedSource names the template of a rendered ConfigMap from the
// cluster, or says why it names none.
func renderedSource(cm *corev1.ConfigMap, templates cache.GenericLister) source {
	ref := metav1.GetControllerOfNoCopy(cm)
	if ref == nil || ref.APIVersion != ownerAPIVersion || ref.Kind != ownerKind {
		return source{refused: "not controlled by a " + ownerAPIVersion + " " + ownerKind}
	}
	want := Key{cm.Namespace, ref.Name}
	if cm.Name != ref.Name+renderedSuffix {
		return source{refused: "its name is not that of its owner " + ref.Name + " with " + renderedSuffix}
	}
	o, err := templates.ByNamespace(cm.Namespace).Get(ref.Name)
	if err != nil {
		return source{refused: "its owner PromptTemplate " + want.String() + " does not exist"}
	}
	if m, ok := o.(metav1.Object); !ok || m.GetUID() != ref.UID {
		return source{refused: "its owner reference does not match the PromptTemplate " + want.String()}
	}
	return source{want: want}
}

// WatchDir serves the plans under dir, polling every interval until ctx
// ends. It returns after the first load, or its error.
func (s *Server) WatchDir(ctx context.Context, dir string, interval time.Duration) error {
	first := make(chan error, 1)
	go func() {
		sources, err := readDir(dir)
		if err != nil {
			first <- err
			return
		}
		s.loader.load(sources)
		first <- nil
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				sources, err := readDir(dir)
				if err != nil {
					s.log.Error(err, "Reading the plans directory", "dir", dir)
					continue
				}
				s.loader.load(sources)
			}
		}
	}()
	return <-first
}
