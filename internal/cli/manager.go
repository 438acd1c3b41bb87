package cli

import (
	"crypto/tls"
	"fmt"
	"io"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/promptops/promptops/controllers"
)

func init() {
	register("manager", "run the controller manager (the operator)", runManager)
}

func runManager(args []string, _ io.Reader, _, stderr io.Writer) int {
	fs := newFlagSet("manager", stderr)
	var (
		metricsAddr, probeAddr, kubeconfig, jobImage string
		leaderElect, secureMetrics, enableHTTP2      bool
		concurrency, burst                           int
		qps                                          float64
	)
	fs.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address the metrics endpoint binds to; 0 disables it.")
	fs.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the health and readiness probes bind to.")
	fs.BoolVar(&leaderElect, "leader-elect", false, "Elect a leader so that only one manager of several replicas is active.")
	fs.BoolVar(&secureMetrics, "metrics-secure", false, "Serve metrics over HTTPS with authentication and authorization.")
	fs.BoolVar(&enableHTTP2, "enable-http2", false, "Allow HTTP/2 on the metrics server (off by default: HTTP/2 rapid reset).")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "Path to a kubeconfig; by default $KUBECONFIG, the in-cluster config, then ~/.kube/config.")
	fs.StringVar(&jobImage, "job-image", envDefault(lookupEnv, "PROMPTOPS_JOB_IMAGE", ""), "Image of consolidation Jobs: the operator's own image ($PROMPTOPS_JOB_IMAGE).")
	fs.IntVar(&concurrency, "max-concurrent-reconciles", 4, "Reconciles run in parallel per controller.")
	fs.Float64Var(&qps, "kube-api-qps", 100, "Requests per second the manager may send to the API server.")
	fs.IntVar(&burst, "kube-api-burst", 200, "Burst of requests above --kube-api-qps.")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")

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

	var tlsOpts []func(*tls.Config)
	if !enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: controllers.NewScheme(),
		Metrics: metricsserver.Options{
			BindAddress:   metricsAddr,
			SecureServing: secureMetrics,
			TLSOpts:       tlsOpts,
		},
		HealthProbeBindAddress:        probeAddr,
		LeaderElection:                leaderElect,
		LeaderElectionID:              "promptops.promptops.io",
		LeaderElectionReleaseOnCancel: true,
		Cache:                         controllers.CacheOptions(),
	})
	if err != nil {
		log.Error(err, "Unable to create the manager")
		return ExitFailed
	}
	if err := controllers.Setup(mgr, controllers.Options{JobImage: jobImage, MaxConcurrentReconciles: concurrency}); err != nil {
		log.Error(err, "Unable to set up the controllers")
		return ExitFailed
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "Unable to set up the health check")
		return ExitFailed
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		log.Error(err, "Unable to set up the readiness check")
		return ExitFailed
	}
	log.Info("Starting the manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "The manager stopped with an error")
		return ExitFailed
	}
	return ExitOK
}
