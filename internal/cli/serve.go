package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/redact"
	"github.com/promptops/promptops/internal/serve"
	"github.com/promptops/promptops/internal/telemetry"
	"github.com/promptops/promptops/internal/tokens"
	"github.com/promptops/promptops/plan"
)

func init() {
	register("serve", "answer POST /v1/assemble from rendered plans (a mounted ConfigMap, a directory, or the API)", runServe)
}

// serveTimeouts are the HTTP server's; a var so that tests can shorten the
// shutdown grace.
var serveTimeouts = struct {
	readHeader, read, write, idle, shutdown time.Duration
}{readHeader: 5 * time.Second, read: 30 * time.Second, write: 30 * time.Second, idle: 120 * time.Second, shutdown: 20 * time.Second}

// serveReady, when set by a test, receives the listener's address.
var serveReady func(addr string)

func runServe(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("serve", stdout, stderr)
	tokenizersDirFlag(fs)
	listen := fs.String("listen", "127.0.0.1:8089", "Address to listen on, `HOST:PORT` (the default suits a sidecar; use :8089 with --tls-cert-file and --tls-key-file for a shared Deployment).")
	tlsCert := fs.String("tls-cert-file", "", "PEM certificate (and chain) `FILE` to serve HTTPS with, TLS 1.2 or later; with --tls-key-file. Both files are reloaded when they change. Without them serve speaks plain HTTP, on a loopback --listen only.")
	tlsKey := fs.String("tls-key-file", "", "PEM private key `FILE` of --tls-cert-file.")
	plainHTTP := fs.Bool("plain-http", false, "Serve plain HTTP on a --listen that is not loopback: only behind a proxy in the same pod that terminates TLS (a service mesh's sidecar). Callers' tokens cross the pod's network in clear text otherwise.")
	plansDir := fs.String("plans-dir", "", "Directory of plans (`DIR`): a mounted <name>-prompts ConfigMap, a tree of them, or what render --out-dir writes. Reloaded when its files change.")
	watch := fs.Bool("watch", false, "Read the rendered ConfigMaps from the API server instead of --plans-dir.")
	namespace := fs.String("namespace", "", "With --watch, the namespaces to watch, comma-separated (`NS,...`); all namespaces when empty.")
	auth := fs.String("auth", authNone, "Who may call /v1/* (`MODE`): none (only when --listen is a loopback address), or kubernetes (a ServiceAccount token allowed get on the PromptTemplate, checked with TokenReview and SubjectAccessReview; /metrics needs get on the URL /metrics).")
	maxBody := fs.Int64("max-body-bytes", serve.DefaultMaxBodyBytes, "Largest request body accepted; larger ones get 413.")
	maxInflight := fs.Int64("max-inflight-bytes", serve.DefaultMaxInflightBytes, "Request body bytes buffered at once by all requests in flight, each held until its answer; a request that would go over it gets 503 with Retry-After. One over 256 KiB may use three quarters of it.")
	timeout := fs.Duration("request-timeout", serve.DefaultRequestTimeout, "Longest a request may take, body included; a body not in by then gets 408.")
	poll := fs.Duration("poll-interval", time.Second, "How often --plans-dir is re-read.")
	// The bank API: the same store, encoding and embeddings flags as
	// consolidate.
	var (
		sf       storeFlags
		encoding string
		emb      embeddingsFlags
		rf       redactionFlags
		trusted  string
		envErrs  []error
	)
	sf.register(fs)
	rf.register(fs)
	trustedSourcesFlag(fs, &trusted)
	encodingFlag(fs, &encoding)
	emb.register(fs, &envErrs)
	maxFacts := fs.Int("max-facts-per-request", serve.DefaultMaxFactsPerRequest, "With --bank, the most facts one POST .../facts may carry; more get 413.")
	maxMessages := fs.Int("max-messages-per-request", serve.DefaultMaxMessagesPerRequest, "With --bank, the most messages one POST .../messages may carry; more get 413.")
	maxRetain := fs.Int64("max-retain-bytes", serve.DefaultMaxRetainBytes, "With --bank, the largest body of POST .../facts and of POST .../messages; larger ones get 413.")
	indexCache := fs.Int64("index-cache-bytes", serve.DefaultIndexCacheBytes, "With --bank, the most bytes of scopes' indexes held in memory beside the shared scope's; the least recently used scope's are dropped and loaded from the store again when asked.")
	memTokenFile := fs.String("memory-token-file", "", "`FILE` holding the bearer token sent to the memory banks that fill memory sections (re-read when it changes); default: the pod's ServiceAccount token ("+serve.DefaultServiceAccountTokenFile+") when it exists, else none.")
	memCAFile := fs.String("memory-ca-file", "", "`FILE` of PEM certificates of the CAs that sign the memory banks' certificates, to verify an https bank endpoint against (re-read when it changes): a served bank's ConfigMap <bank>-memory-ca (ca.crt) or the cert-manager issuer's CA, several in one file for several banks; default: the system's roots.")
	memTimeout := fs.Duration("memory-timeout", plan.DefaultMemoryTimeout, "Longest a memory section's recall may take; a slower or failed recall leaves the section empty and the answer says so.")
	zapOpts := zap.Options{}
	bindLogFlags(fs, &zapOpts)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: promptops serve (--plans-dir DIR | --watch [--namespace NS,...] | --bank NS/NAME) [--listen HOST:PORT [--tls-cert-file FILE --tls-key-file FILE]] [--auth none|kubernetes]

POST /v1/assemble {"namespace", "name", "intent", "runtime": {"<section>": "<text>"}, "query"?, "scope"?, "assignmentKey"?}
answers the prompt as 'promptops assemble' would; GET /v1/templates lists the plans.
With --bank (the store's URL in $PROMPTOPS_STORE):
POST /v1/banks/NS/NAME/facts {"facts": [{"id"?, "scope"?, "text", "source"?, "entities", "tags", "occurredStart", "occurredEnd", "mentionedAt"}]} retains facts,
POST /v1/banks/NS/NAME/messages {"scope"?, "conversation", "messages": [{"id"?, "role", "content", "at"}]} retains a conversation's messages,
POST /v1/banks/NS/NAME/recall {"query", "maxTokens", "maxItems"?, "minScorePerMille"?, "tags"?, "includePending"?, "scope"?, "includeShared"?, "trustedOnly"?} recalls,
DELETE /v1/banks/NS/NAME/scopes/SCOPE and .../facts/ID[?scope=SCOPE] erase, GET /v1/banks/NS/NAME/scopes/SCOPE/export exports.
/healthz, /readyz (after the first load) and /metrics are on the same address.

Flags:
`)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if err := errors.Join(envErrs...); err != nil {
		fmt.Fprintln(stderr, "promptops serve:", err)
		return ExitInvalid
	}
	trust, err := trustedSources(trusted)
	if err != nil {
		fmt.Fprintln(stderr, "promptops serve:", err)
		return ExitInvalid
	}
	if (*plansDir != "" && *watch) || (*plansDir == "" && !*watch && sf.bank == "") || *poll <= 0 {
		fmt.Fprintln(stderr, "promptops serve: give one of --plans-dir and --watch, or --bank, or --bank with one of them")
		fs.Usage()
		return ExitInvalid
	}
	if *namespace != "" && !*watch {
		fmt.Fprintln(stderr, "promptops serve: --namespace needs --watch")
		return ExitInvalid
	}
	namespaces, err := splitNamespaces(*namespace)
	if err != nil {
		fmt.Fprintln(stderr, "promptops serve: --namespace:", err)
		return ExitInvalid
	}
	switch *auth {
	case authKubernetes:
	case authNone:
		if !loopback(*listen) {
			fmt.Fprintf(stderr, "promptops serve: --auth=none serves every plan to anyone who can reach %s; listen on a loopback address (127.0.0.1:8089) or use --auth=kubernetes\n", *listen)
			return ExitInvalid
		}
	default:
		fmt.Fprintf(stderr, "promptops serve: --auth is none or kubernetes, not %q\n", *auth)
		return ExitInvalid
	}
	if err := checkTLSFlags(*tlsCert, *tlsKey, *plainHTTP, *listen); err != nil {
		fmt.Fprintln(stderr, "promptops serve:", err)
		return ExitInvalid
	}
	if *maxBody <= 0 {
		*maxBody = serve.DefaultMaxBodyBytes
	}
	if *memTimeout <= 0 {
		fmt.Fprintln(stderr, "promptops serve: --memory-timeout must be positive")
		return ExitInvalid
	}
	if *memTokenFile == "" {
		if _, err := os.Stat(serve.DefaultServiceAccountTokenFile); err == nil {
			*memTokenFile = serve.DefaultServiceAccountTokenFile
		}
	}
	if *maxInflight/4*3 < max(*maxBody, *maxRetain) || *timeout <= 0 || *maxFacts < 1 || *maxMessages < 1 || *maxRetain < 1 {
		fmt.Fprintln(stderr, "promptops serve: --max-inflight-bytes must be at least 4/3 of --max-body-bytes and of --max-retain-bytes; --request-timeout, --max-facts-per-request, --max-messages-per-request and --max-retain-bytes positive")
		return ExitInvalid
	}
	log := zap.New(zap.UseFlagOptions(&zapOpts), zap.WriteTo(stderr)).WithName("serve")
	limit, from := memoryLimit(os.Getenv, os.ReadFile)
	if from != "" && from != "GOMEMLIMIT" {
		debug.SetMemoryLimit(limit)
	}
	// A server holds a few MB of plans and allocates per request; collecting
	// less often buys throughput and tail latency, and under a memory limit
	// the limit, not GOGC, decides how far the heap grows. Without one, Go's
	// default stands: 400 let the heap grow to five times what is live.
	if _, set := os.LookupEnv("GOGC"); !set && from != "" {
		debug.SetGCPercent(400)
	}
	gogc := debug.SetGCPercent(-1) // reads it, and turns collection off until the next line
	debug.SetGCPercent(gogc)
	log.Info("Memory", "limit", limit, "from", from, "GOGC", gogc)
	recaller := serve.NewHTTPRecaller(*memTokenFile)
	recaller.CAFile = *memCAFile
	opts := serve.Options{MaxBodyBytes: *maxBody, MaxInflightBytes: *maxInflight, RequestTimeout: *timeout, Log: log,
		MemoryRecaller: recaller, MemoryTimeout: *memTimeout}
	var cfg *rest.Config
	if *watch || *auth == authKubernetes {
		if cfg, err = ctrl.GetConfig(); err != nil {
			fmt.Fprintln(stderr, "promptops serve:", err)
			return ExitInvalid
		}
	}
	if *auth == authKubernetes {
		if opts.Auth, err = serve.NewKubernetesAuth(cfg); err != nil {
			fmt.Fprintln(stderr, "promptops serve:", err)
			return ExitInvalid
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The pair is read before the bank is loaded: a wrong file fails fast.
	var tlsConfig *tls.Config
	if *tlsCert != "" {
		// certwatcher logs through controller-runtime's logger.
		ctrl.SetLogger(log)
		if tlsConfig, err = watchedTLS(ctx, *tlsCert, *tlsKey, log); err != nil {
			fmt.Fprintln(stderr, "promptops serve:", err)
			return ExitInvalid
		}
	}
	stopTraces, err := telemetry.Setup(ctx, "promptops-serve")
	if err != nil {
		fmt.Fprintln(stderr, "promptops serve: OpenTelemetry:", err)
		return ExitInvalid
	}
	defer flushTraces(stopTraces)
	if sf.bank != "" {
		red, err := rf.redactor()
		if err != nil {
			fmt.Fprintln(stderr, "promptops serve:", err)
			return ExitInvalid
		}
		bank, closeBank, err := openBank(ctx, sf, bankOptions{encoding: encoding, emb: &emb, redactor: red, trust: trust}, log)
		if err != nil {
			fmt.Fprintln(stderr, "promptops serve:", err)
			return ExitInvalid
		}
		defer closeBank()
		if *indexCache < 1 {
			fmt.Fprintln(stderr, "promptops serve: --index-cache-bytes must be at least 1")
			return ExitInvalid
		}
		bank.IndexCacheBytes = *indexCache
		opts.Banks = []*serve.Bank{bank}
		opts.BankLimits = serve.BankLimits{MaxFactsPerRequest: *maxFacts, MaxMessagesPerRequest: *maxMessages, MaxRetainBytes: *maxRetain}
	}
	srv := serve.New(opts)
	if *plansDir == "" && !*watch {
		srv.Apply(map[string][]byte{}) // no plans to wait for: ready
	}
	if *plansDir != "" {
		if err := srv.WatchDir(ctx, *plansDir, *poll); err != nil {
			fmt.Fprintln(stderr, "promptops serve:", err)
			return ExitInvalid
		}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(stderr, "promptops serve:", err)
		return ExitInvalid
	}
	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: serveTimeouts.readHeader,
		ReadTimeout:       max(serveTimeouts.read, *timeout),
		WriteTimeout:      max(serveTimeouts.write, *timeout),
		IdleTimeout:       serveTimeouts.idle,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          nil,
		TLSConfig:         tlsConfig,
	}
	served := make(chan error, 1)
	go func() {
		if tlsConfig != nil {
			served <- hs.ServeTLS(ln, "", "")
			return
		}
		served <- hs.Serve(ln)
	}()
	log.Info("Serving", "address", ln.Addr().String(), "plansDir", *plansDir, "watch", *watch, "namespaces", namespaces, "bank", sf.bank, "auth", *auth, "tls", tlsConfig != nil)
	if serveReady != nil {
		serveReady(ln.Addr().String())
	}
	if *watch {
		go func() {
			if err := srv.Watch(ctx, cfg, namespaces); err != nil && ctx.Err() == nil {
				log.Error(err, "Watching rendered ConfigMaps")
				stop()
			}
		}()
	}
	select {
	case err := <-served:
		log.Error(err, "HTTP server stopped")
		return ExitFailed
	case <-ctx.Done():
	}
	log.Info("Shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), serveTimeouts.shutdown)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error(err, "Shutdown")
		return ExitFailed
	}
	return ExitOK
}

// checkTLSFlags refuses a half-given certificate pair, and plain HTTP off
// loopback unless --plain-http says a proxy in the pod terminates TLS.
func checkTLSFlags(cert, key string, plain bool, listen string) error {
	switch {
	case cert != "" && key == "":
		return errors.New("--tls-cert-file needs --tls-key-file")
	case cert == "" && key != "":
		return errors.New("--tls-key-file needs --tls-cert-file")
	case cert != "" && plain:
		return errors.New("--plain-http and --tls-cert-file exclude each other")
	case cert == "" && !plain && !loopback(listen):
		return fmt.Errorf("--listen %s is not a loopback address: give --tls-cert-file and --tls-key-file, so that callers' tokens do not cross the network in clear text, or --plain-http when a proxy in the same pod terminates TLS", listen)
	}
	return nil
}

// certWatchInterval is how often the certificate files are re-read beside
// the file system's notifications; a var so that tests can shorten it.
var certWatchInterval = 10 * time.Second

// watchedTLS loads the certificate pair and keeps it current: a rewritten
// pair (cert-manager's renewal, a Secret's update) is served to the next
// handshake without a restart.
func watchedTLS(ctx context.Context, certFile, keyFile string, log logr.Logger) (*tls.Config, error) {
	cw, err := certwatcher.New(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file, --tls-key-file: %w", err)
	}
	cw.WithWatchInterval(certWatchInterval)
	go func() {
		if err := cw.Start(ctx); err != nil {
			log.Error(err, "Watching the TLS certificate")
		}
	}()
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: cw.GetCertificate,
		// HTTP/1.1 only, as the manager's servers (HTTP/2 rapid reset).
		NextProtos: []string{"http/1.1"},
	}, nil
}

const (
	authNone       = "none"
	authKubernetes = "kubernetes"
)

// loopback says whether addr (host:port) listens on loopback only; an
// empty host listens on every interface.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// splitNamespaces parses --namespace's comma-separated list.
func splitNamespaces(list string) ([]string, error) {
	if list == "" {
		return nil, nil
	}
	var out []string
	for _, ns := range strings.Split(list, ",") {
		ns = strings.TrimSpace(ns)
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, fmt.Errorf("%q is not a namespace name: %s", ns, strings.Join(errs, "; "))
		}
		if !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	return out, nil
}

// memoryLimitEnv holds the container's memory limit in bytes: the samples
// and the chart set it from the downward API (resourceFieldRef
// limits.memory).
const memoryLimitEnv = "PROMPTOPS_MEMORY_LIMIT"

// memoryLimit is the Go runtime's soft memory limit for serve, and where it
// came from: GOMEMLIMIT when set (the runtime has applied it); else the
// container's limit, from PROMPTOPS_MEMORY_LIMIT or else the cgroup (v2
// memory.max, v1 memory.limit_in_bytes), less what the Go runtime does not
// count (memoryReserve). from is empty when there is no limit.
func memoryLimit(getenv func(string) string, readFile func(string) ([]byte, error)) (limit int64, from string) {
	if getenv("GOMEMLIMIT") != "" {
		return debug.SetMemoryLimit(-1), "GOMEMLIMIT"
	}
	container, from := parseLimit(getenv(memoryLimitEnv)), memoryLimitEnv
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		if container > 0 {
			break
		}
		if data, err := readFile(f); err == nil {
			container, from = parseLimit(string(data)), f
		}
	}
	if container <= 0 {
		return 0, ""
	}
	return container - min(max(container/5, memoryReserve), container/2), from
}

// memoryReserve is what a container's limit keeps, at least, beside the Go
// runtime's limit (a fifth of it when that is more, half at most): the
// binary's own resident pages, which the container is charged for and the
// Go runtime does not count (60 MiB for serve or the manager at 10,000
// templates when read from disk, bench/scale; up to 100 when the page cache
// holds them as they were just written), kernel socket buffers and the
// page cache.
const memoryReserve = 96 << 20

// parseLimit reads a limit in bytes; 0 for none ("max", unlimited cgroup
// v1's near 2^63, or not a number).
func parseLimit(s string) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 || n >= 1<<50 {
		return 0
	}
	return n
}

// bankOptions are what the flags of serve --bank say of the bank beside
// its store.
type bankOptions struct {
	encoding string
	emb      *embeddingsFlags
	redactor *redact.Redactor
	trust    consolidation.Trust
}

// openBank opens the store of --bank, registers the bank and loads its
// indexes, so that the first recall finds them in memory.
func openBank(ctx context.Context, sf storeFlags, o bankOptions, log logr.Logger) (*serve.Bank, func(), error) {
	encoding, emb, red := o.encoding, o.emb, o.redactor
	if _, err := tokens.Get(encoding); err != nil {
		return nil, nil, fmt.Errorf("--encoding: %w", err)
	}
	var set consolidation.Settings
	// One retry: a recall waits for its query's embedding.
	embedder, err := emb.embedder(&set, 1)
	if err != nil {
		return nil, nil, err
	}
	store, err := sf.open(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := store.EnsureBank(ctx, sf.id()); err != nil {
		store.Close()
		return nil, nil, fmt.Errorf("registering bank %s: %w", sf.bank, err)
	}
	ns, name, _ := strings.Cut(sf.bank, "/")
	// A query leaves the process for the embeddings API: redacted too.
	rec := &consolidation.Recaller{Store: store, Scope: sf.id().Scope(""), Embedder: consolidation.RedactEmbedder(embedder, red), Floor: set.SemanticFloor, Trust: o.trust,
		OnError: func(what string, err error) {
			if what == "embedding a query" {
				// The server's message may quote the query.
				log.Info("Embedding a query failed; recalling by words and entities", "bank", sf.bank)
				return
			}
			log.Error(err, "Recall", "what", what, "bank", sf.bank)
		}}
	if embedder == nil {
		rec.Floor = 0
	}
	// A first query pins the embeddings' space and loads both indexes.
	if _, _, err := rec.Recall(ctx, consolidation.Query{Text: "warm-up", Limit: 1}); err != nil {
		store.Close()
		return nil, nil, fmt.Errorf("loading bank %s: %w", sf.bank, err)
	}
	log.Info("Bank loaded", "bank", sf.bank, "generation", rec.Generation(), "semantic", embedder != nil)
	return &serve.Bank{Namespace: ns, Name: name, Store: store, Recaller: rec, Encoding: encoding, Redactor: red}, func() { store.Close() }, nil
}

// flushTraces sends the spans not yet exported, waiting at most 5 s.
func flushTraces(stop func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = stop(ctx)
}
