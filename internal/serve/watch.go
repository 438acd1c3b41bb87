package serve

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// WatchSelector selects the live rendered ConfigMaps: the operator's, role
// rendered (not the immutable history copies).
const WatchSelector = "app.kubernetes.io/managed-by=promptops,promptops.io/role=rendered"

// Watch serves the plans of the rendered ConfigMaps the API server holds, in
// namespace or in every namespace when it is empty, until ctx ends. It
// returns once the informer has synced and the first snapshot is published;
// errors after that are logged by client-go and retried.
func (s *Server) Watch(ctx context.Context, cfg *rest.Config, namespace string) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 10*time.Minute,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = WatchSelector }))
	inf := factory.Core().V1().ConfigMaps()
	lister := inf.Lister()
	changed := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: poke, UpdateFunc: func(_, o any) { poke(o) }, DeleteFunc: poke,
	}); err != nil {
		return err
	}
	// The cache keeps only what a plan needs: no managed fields.
	if err := inf.Informer().SetTransform(func(o any) (any, error) {
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
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return fmt.Errorf("the ConfigMap watch did not sync: %w", ctx.Err())
	}
	publish := func() {
		cms, err := lister.List(labels.Everything())
		if err != nil {
			s.log.Error(err, "Listing rendered ConfigMaps")
			return
		}
		sources := make(map[string][]byte, len(cms))
		for _, cm := range cms {
			data, ok := cm.Data[PlanFile]
			if !ok {
				continue
			}
			sources["configmap "+cm.Namespace+"/"+cm.Name] = []byte(data)
		}
		s.loader.apply(sources)
	}
	publish()
	go func() {
		defer factory.Shutdown()
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
		s.loader.apply(sources)
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
				s.loader.apply(sources)
			}
		}
	}()
	return <-first
}
