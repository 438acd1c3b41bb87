package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime/debug"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/promptops/promptops/controllers"
	"github.com/promptops/promptops/internal/operator"
	"github.com/promptops/promptops/internal/telemetry"
	"github.com/promptops/promptops/internal/webhook"
)

func init() {
	register("manager", "run the controller manager (the operator)", runManager)
}

func runManager(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("manager", stdout, stderr)
	tokenizersDirFlag(fs)
	var (
		metricsAddr, probeAddr, pprofAddr, kubeconfig, jobImage            string
		webhookHost, webhookCertDir, webhookConfiguration, webhookDNSNames string
		leaderElect, secureMetrics, enableHTTP2                            bool
		enableWebhook, webhookSelfSigned                                   bool
		concurrency, burst, webhookPort                                    int
		qps                                                                float64
		watchSelector                                                      string
	)
	fs.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address (`HOST:PORT`) the metrics endpoint binds to; 0 disables it.")
	fs.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address (`HOST:PORT`) the health and readiness probes bind to.")
	fs.StringVar(&pprofAddr, "pprof-bind-address", "", "Address (`HOST:PORT`) a net/http/pprof endpoint binds to, for profiling the manager (loopback is advised: it is not authenticated); empty disables it.")
	fs.BoolVar(&leaderElect, "leader-elect", false, "Elect a leader so that only one manager of several replicas is active.")
	fs.BoolVar(&secureMetrics, "metrics-secure", false, "Serve metrics over HTTPS, only to callers the API server authenticates and authorizes for get on /metrics.")
	fs.BoolVar(&enableHTTP2, "enable-http2", false, "Allow HTTP/2 on the metrics and webhook servers (off by default: HTTP/2 rapid reset).")
	fs.BoolVar(&enableWebhook, "enable-webhook", false, "Serve the PromptTemplate validating webhook (budgets as warnings at kubectl apply).")
	fs.StringVar(&webhookHost, "webhook-host", "", "Address (`HOST`) the webhook server binds to; empty is every address.")
	fs.IntVar(&webhookPort, "webhook-port", 9443, "Port of the webhook server.")
	fs.StringVar(&webhookCertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs", "Directory (`DIR`) with the webhook server's tls.crt and tls.key.")
	fs.BoolVar(&webhookSelfSigned, "webhook-self-signed", false, "Keep a self-signed CA and serving certificate in --webhook-cert-dir (without cert-manager) and put the CA into --webhook-configuration's caBundle.")
	fs.StringVar(&webhookDNSNames, "webhook-cert-hosts", "promptops-webhook.promptops-system.svc", "Comma-separated DNS names or IP addresses (`NAMES`) of a self-signed certificate.")
	fs.StringVar(&webhookConfiguration, "webhook-configuration", "promptops-validating-webhook", "ValidatingWebhookConfiguration (`NAME`) whose caBundle a self-signed manager sets; empty leaves it alone.")
	fs.StringVar(&watchSelector, "watch-label-selector", "", "Reconcile only the PromptTemplates and MemoryBanks this label `SELECTOR` matches, to shard them across managers (as Flux's flag of the same name); empty reconciles all.")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "Path to a kubeconfig `FILE`; by default $KUBECONFIG, the in-cluster config, then ~/.kube/config.")
	envStringVar(fs, &jobImage, "job-image", "PROMPTOPS_JOB_IMAGE", "", "`IMAGE` of consolidation Jobs: the operator's own image ($PROMPTOPS_JOB_IMAGE).")
	fs.IntVar(&concurrency, "max-concurrent-reconciles", 12, "Reconciles run in parallel per controller: a reconcile mostly waits for the API server.")
	memoryCertIssuer := fs.String("memory-cert-issuer", "", "cert-manager issuer of served banks' certificates, `KIND/NAME`: ClusterIssuer/NAME or Issuer/NAME (an Issuer of that name in each bank's namespace): the manager writes a Certificate <bank>-memory. Empty: the manager issues each served bank a CA and certificate of its own (Secret <bank>-memory-tls, CA in ConfigMap <bank>-memory-ca).")
	perTemplate := fs.Bool("per-template-metrics", false, "Also publish series of each PromptTemplate (Ready) and intent (tokens, budget, overrun), about 20 a template; the counts per namespace are always published.")
	fs.Float64Var(&qps, "kube-api-qps", 100, "Requests per second the manager may send to the API server.")
	fs.IntVar(&burst, "kube-api-burst", 200, "Burst of requests above --kube-api-qps.")
	zapOpts := zap.Options{}
	bindLogFlags(fs, &zapOpts)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	var certIssuer *controllers.CertIssuer
	if *memoryCertIssuer != "" {
		var err error
		if certIssuer, err = controllers.ParseCertIssuer(*memoryCertIssuer); err != nil {
			fmt.Fprintf(stderr, "promptops manager: --memory-cert-issuer: %v\n", err)
			return ExitInvalid
		}
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")
	log.Info("Starting promptops manager", "version", Version(), "revision", revision())
	registerBuildInfo()
	// The Go heap within the container's memory limit as serve's is
	// (memoryLimit; GOMEMLIMIT, when set, wins): the collector works
	// harder near the limit instead of the kernel killing the manager.
	if limit, from := memoryLimit(os.Getenv, os.ReadFile); from != "" {
		if from != "GOMEMLIMIT" {
			debug.SetMemoryLimit(limit)
		}
		log.Info("Memory", "limit", limit, "from", from)
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(managerGCPercent)
	}

	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = config.GetConfig()
	}
	if err != nil {
		fmt.Fprintf(stderr, "promptops manager: no cluster configuration: %v\n", err)
		return ExitInvalid
	}

	cfg.QPS, cfg.Burst = float32(qps), burst

	watch, err := labels.Parse(watchSelector)
	if err != nil {
		fmt.Fprintf(stderr, "promptops manager: --watch-label-selector: %v\n", err)
		return ExitInvalid
	}
	opts := operator.Options{
		WatchSelector:  watch,
		MetricsAddr:    metricsAddr,
		SecureMetrics:  secureMetrics,
		EnableHTTP2:    enableHTTP2,
		ProbeAddr:      probeAddr,
		PprofAddr:      pprofAddr,
		LeaderElection: leaderElect,
	}
	if enableWebhook {
		opts.Webhook = &operator.WebhookServerOptions{Host: webhookHost, Port: webhookPort, CertDir: webhookCertDir}
		if webhookSelfSigned {
			opts.Webhook.SelfSigned = &webhook.SelfSigned{Hosts: splitList(webhookDNSNames)}
			opts.Webhook.ConfigurationName = webhookConfiguration
		}
	}
	mgr, err := operator.NewManager(cfg, opts)
	if err != nil {
		log.Error(err, "Unable to create the manager")
		return ExitFailed
	}
	stopTraces, err := telemetry.Setup(context.Background(), "promptops-manager")
	if err != nil {
		log.Error(err, "Unable to set up OpenTelemetry")
		return ExitInvalid
	}
	defer flushTraces(stopTraces)
	if err := controllers.Setup(mgr, controllers.Options{JobImage: jobImage, JobEnv: jobTelemetryEnv(), MaxConcurrentReconciles: concurrency, PerTemplateMetrics: *perTemplate, CertIssuer: certIssuer}); err != nil {
		log.Error(err, "Unable to set up the controllers")
		return ExitFailed
	}
	log.Info("Starting the manager", "webhook", enableWebhook, "secureMetrics", secureMetrics, "traces", telemetry.Enabled())
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "The manager stopped with an error")
		return ExitFailed
	}
	return ExitOK
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// jobTelemetryEnv is the manager's OpenTelemetry configuration for its
// consolidation Jobs, sorted by name, but for headers: they may hold a
// collector's credentials, which stay out of a Job's spec.
func jobTelemetryEnv() []corev1.EnvVar {
	env := telemetry.Env()
	out := make([]corev1.EnvVar, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if strings.HasSuffix(k, "_HEADERS") {
			continue
		}
		v := env[k]
		if k == "OTEL_SERVICE_NAME" {
			v = "promptops-consolidate"
		}
		out = append(out, corev1.EnvVar{Name: k, Value: v})
	}
	return out
}

// managerGCPercent is the manager's GOGC unless GOGC is set. Its live heap
// is small (outlines and metadata, about 3 KB a template, and the
// tokenizer's tables) and nearly all it allocates is decoded API answers,
// garbage at once: collecting when the heap has grown by half its live size
// rather than by all of it lowered the peak at 10,000 templates by 21 MiB,
// for a few percent more of the manager's CPU (bench/scale,
// docs/performance.md).
const managerGCPercent = 50
