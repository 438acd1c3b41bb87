// Package operator builds the controller manager that `promptops manager`
// runs: metrics, probes, leader election and the optional admission webhook.
// The CLI and the tests build it through the same functions.
package operator

import (
	"crypto/tls"
	"fmt"
	"k8s.io/apimachinery/pkg/labels"
	"net/http"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/promptops/promptops/controllers"
	"github.com/promptops/promptops/internal/webhook"
)

// The metrics filter asks the API server who a scraper is and whether it may
// get /metrics.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Options are what the manager verb's flags set.
type Options struct {
	MetricsAddr   string
	SecureMetrics bool
	EnableHTTP2   bool
	ProbeAddr     string
	// PprofAddr serves net/http/pprof when not empty.
	PprofAddr      string
	LeaderElection bool
	// WatchSelector, when not nil, limits the objects this manager
	// reconciles to those it selects (sharding).
	WatchSelector labels.Selector
	// Webhook, when non-nil, runs the admission webhook server.
	Webhook *WebhookServerOptions
}

// WebhookServerOptions place the webhook server and say where its
// certificate comes from.
type WebhookServerOptions struct {
	Host    string
	Port    int
	CertDir string
	// SelfSigned, when set, makes the manager keep its own CA and serving
	// certificate in CertDir (no cert-manager) and write the CA into the
	// caBundle of ConfigurationName.
	SelfSigned *webhook.SelfSigned
	// ConfigurationName is the ValidatingWebhookConfiguration whose
	// caBundle a self-signed manager keeps current; empty leaves it alone.
	ConfigurationName string
}

// tlsOptions turns HTTP/2 off unless asked for (HTTP/2 rapid reset,
// CVE-2023-44487).
func tlsOptions(enableHTTP2 bool) []func(*tls.Config) {
	if enableHTTP2 {
		return nil
	}
	return []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
}

// MetricsOptions serve metrics on addr. Secure serves HTTPS and lets only
// callers the API server authenticates (TokenReview) and authorizes
// (SubjectAccessReview for get on /metrics) scrape.
func MetricsOptions(addr string, secure, enableHTTP2 bool) metricsserver.Options {
	o := metricsserver.Options{
		BindAddress:   addr,
		SecureServing: secure,
		TLSOpts:       tlsOptions(enableHTTP2),
	}
	if secure {
		o.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return o
}

// ManagerOptions are the controller-runtime options of the manager.
func ManagerOptions(o Options) ctrl.Options {
	opts := ctrl.Options{
		Scheme:                        controllers.NewScheme(),
		Metrics:                       MetricsOptions(o.MetricsAddr, o.SecureMetrics, o.EnableHTTP2),
		HealthProbeBindAddress:        o.ProbeAddr,
		PprofBindAddress:              o.PprofAddr,
		LeaderElection:                o.LeaderElection,
		LeaderElectionID:              "promptops.promptops.io",
		LeaderElectionReleaseOnCancel: true,
		Cache:                         controllers.CacheOptions(o.WatchSelector),
	}
	if o.Webhook != nil {
		opts.WebhookServer = crwebhook.NewServer(crwebhook.Options{
			Host:    o.Webhook.Host,
			Port:    o.Webhook.Port,
			CertDir: o.Webhook.CertDir,
			TLSOpts: tlsOptions(o.EnableHTTP2),
		})
	}
	return opts
}

// NewManager builds the manager with its health and readiness checks; the
// readiness check includes the webhook server when it runs, so that no
// Service sends admission requests to a replica that cannot answer.
func NewManager(cfg *rest.Config, o Options) (ctrl.Manager, error) {
	var certs *certKeeper
	if o.Webhook != nil && o.Webhook.SelfSigned != nil {
		// Before the manager: the webhook server reads the files when it
		// starts.
		ss := *o.Webhook.SelfSigned
		ss.Dir = o.Webhook.CertDir
		ca, _, err := ss.Ensure()
		if err != nil {
			return nil, fmt.Errorf("writing the webhook's self-signed certificate: %w", err)
		}
		certs = &certKeeper{certs: &ss, ca: ca, configuration: o.Webhook.ConfigurationName}
	}
	mgr, err := ctrl.NewManager(cfg, ManagerOptions(o))
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	if o.Webhook != nil {
		if err := webhook.SetupWithManager(mgr); err != nil {
			return nil, fmt.Errorf("setting up the webhook: %w", err)
		}
	}
	if certs != nil {
		if certs.client, err = client.New(cfg, client.Options{Scheme: mgr.GetScheme()}); err != nil {
			return nil, err
		}
		if err := mgr.Add(certs); err != nil {
			return nil, err
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	ready := healthz.Ping
	if o.Webhook != nil {
		ready = func(req *http.Request) error { return mgr.GetWebhookServer().StartedChecker()(req) }
	}
	if err := mgr.AddReadyzCheck("readyz", ready); err != nil {
		return nil, err
	}
	return mgr, nil
}
