package serve

import (
	"context"
	"fmt"
	"sync"
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

	"github.com/promptops/promptops/plan"
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
	held := &heldPlans{by: map[string]heldPlan{}}
	s.held = held
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
		// The cache keeps only what a plan needs: no managed fields, and
		// not plan.json itself (nor a rollout's canary.plan.json and
		// rollout.json), which is held apart until it is loaded.
		if err := cms.Informer().SetTransform(func(o any) (any, error) {
			if cm, ok := o.(*corev1.ConfigMap); ok {
				cm.ManagedFields = nil
				if _, done := cm.Data[heldKey]; done {
					// Transformed already: client-go may call this again
					// on an object it has.
					return o, nil
				}
				if _, ok := cm.Data[PlanFile]; ok {
					held.hold(cm.Namespace+"/"+cm.Name, cm.ResourceVersion, heldFiles(cm.Data))
					cm.Data = hasPlan
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
		keys := map[string]string{}
		for _, sc := range scopes {
			cms, err := sc.configMaps.List(labels.Everything())
			if err != nil {
				s.log.Error(err, "Listing rendered ConfigMaps")
				return
			}
			for _, cm := range cms {
				if _, ok := cm.Data[heldKey]; !ok {
					continue
				}
				key := cm.Namespace + "/" + cm.Name
				src := renderedSource(cm, sc.templates)
				src.version = cm.ResourceVersion
				if files, ok := held.get(key, cm.ResourceVersion); ok {
					// Views of the held strings, not copies: the loader
					// only reads them (a digest, and a parse when they
					// changed).
					src.data, src.canary, src.rollout = view(files.plan), view(files.canary), view(files.rollout)
				} else {
					// Released once loaded; read again only if the loader
					// needs it at the same version (its owner came back).
					src.fetch = fetchPlan(ctx, cs, cm.Namespace, cm.Name)
				}
				id := "configmap " + key
				sources[id], keys[id] = src, key
			}
		}
		s.loader.load(sources)
		current := make(map[string]bool, len(keys))
		for id, key := range keys {
			current[key] = true
			if s.loader.parsed(id, sources[id].version) {
				held.release(key, sources[id].version)
			}
		}
		held.prune(current)
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

// hasPlan is the data a cached rendered ConfigMap keeps: that it has a
// plan.json, held apart (heldPlans). Its key has a slash, which no key of
// a ConfigMap can: a ConfigMap with it has been transformed.
var hasPlan = map[string]string{heldKey: ""}

const heldKey = "plan.json/held"

// fetchPlan reads a ConfigMap's plan.json, canary.plan.json and
// rollout.json from the API server, as one version.
func fetchPlan(ctx context.Context, cs kubernetes.Interface, namespace, name string) func() (planFiles, error) {
	return func() (planFiles, error) {
		ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
		defer cancel()
		cm, err := cs.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return planFiles{}, fmt.Errorf("reading the ConfigMap again: %w", err)
		}
		f := heldFiles(cm.Data)
		return planFiles{plan: []byte(f.plan), canary: present(f.canary), rollout: present(f.rollout)}, nil
	}
}

// heldFiles are the plan files of a ConfigMap's data; a canary or rollout
// key that is absent or empty is "".
func heldFiles(data map[string]string) heldPlan {
	return heldPlan{plan: data[PlanFile], canary: data[plan.CanaryPlanFile], rollout: data[plan.RolloutFile]}
}

// view is a held string as bytes, without a copy; nil for "" (a canary or
// rollout key that is absent).
func view(s string) []byte {
	if s == "" {
		return nil
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// present is s as bytes, nil for "".
func present(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

// fetchTimeout bounds a read of a ConfigMap's plan.json.
const fetchTimeout = 30 * time.Second

// heldPlans keeps each rendered ConfigMap's plan.json from when the watch
// brings a version of it (the informer's transform) until the loader has
// read it: the informer's cache keeps the ConfigMap without it, so the
// bytes are not held for as long as the parsed plan is (at 10,000
// templates, they were most of serve's memory).
type heldPlans struct {
	mu sync.Mutex
	by map[string]heldPlan // by "namespace/name"
}

// heldPlan is what is held of one ConfigMap at a version: its plan.json,
// and during a rollout its canary.plan.json and rollout.json ("" when
// absent).
type heldPlan struct{ version, plan, canary, rollout string }

func (h *heldPlans) hold(key, version string, files heldPlan) {
	files.version = version
	h.mu.Lock()
	h.by[key] = files
	h.mu.Unlock()
}

// get is what is held for key at version.
func (h *heldPlans) get(key, version string) (heldPlan, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p, ok := h.by[key]
	return p, ok && p.version == version
}

// release drops the plan.json of key once read at version (a newer one,
// held since, stays).
func (h *heldPlans) release(key, version string) {
	h.mu.Lock()
	if h.by[key].version == version {
		delete(h.by, key)
	}
	h.mu.Unlock()
}

// prune drops what is held of ConfigMaps not listed (deleted; or so new
// that the lister has not got them yet: fetched then).
func (h *heldPlans) prune(current map[string]bool) {
	h.mu.Lock()
	for key := range h.by {
		if !current[key] {
			delete(h.by, key)
		}
	}
	h.mu.Unlock()
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
