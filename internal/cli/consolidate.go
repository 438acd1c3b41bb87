package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/controllers"
	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/consolidation/llm"
	"github.com/promptops/promptops/internal/consolidation/sqlstore"
	"github.com/promptops/promptops/internal/extraction"
	"github.com/promptops/promptops/internal/telemetry"
)

func init() {
	register("consolidate", "consolidate a bank's new facts into observations with an LLM (what the Job runs)", runConsolidate)
}

// MaxTerminationMessage is the kubelet's limit on a termination message.
const MaxTerminationMessage = 4096

// storeFlags are the flags every bank verb shares.
type storeFlags struct {
	bank, store string
}

func (s *storeFlags) register(fs *flag.FlagSet) {
	envStringVar(fs, &s.bank, "bank", "PROMPTOPS_BANK", "", "Bank, as `NAMESPACE/NAME` ($PROMPTOPS_BANK).")
	envStringVar(fs, &s.store, "store", "PROMPTOPS_STORE", "", "Store `URL`: postgres://... or sqlite:///path.db. Give it in $PROMPTOPS_STORE rather than here: a flag's value shows in ps, and -h shows the variable's password as ***.")
}

// storeNote says where the bank verbs' usage takes the store from.
const storeNote = "The store's URL is read from $PROMPTOPS_STORE (--store would show it, password and all, in ps)."

// id is the --bank flag's bank.
func (s *storeFlags) id() consolidation.BankID { return consolidation.BankID(s.bank) }

// check says what is wrong with --bank and --store: a usage error, which
// a verb reports with ExitInvalid before it opens anything.
func (s *storeFlags) check() error {
	if s.bank == "" || strings.Count(s.bank, "/") != 1 || strings.HasPrefix(s.bank, "/") || strings.HasSuffix(s.bank, "/") {
		return errors.New("--bank must be NAMESPACE/NAME")
	}
	if s.store == "" {
		return errors.New("the store's URL is required: $PROMPTOPS_STORE (or --store, which ps shows)")
	}
	return nil
}

// usageError reports check's error as verb's, with the exit code to return;
// ok when there is none.
func (s *storeFlags) usageError(verb string, stderr io.Writer) (code int, ok bool) {
	if err := s.check(); err != nil {
		fmt.Fprintf(stderr, "promptops %s: %v\n", verb, err)
		return ExitInvalid, false
	}
	return 0, true
}

// open opens the store; its errors never hold the URL (sqlstore.Open).
func (s *storeFlags) open(ctx context.Context) (*sqlstore.Store, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return sqlstore.Open(ctx, s.store)
}

// openKnown is open for a verb that reads the bank: a bank the store does
// not know is an error naming it, not an empty answer (a typo in --bank,
// or another bank's store).
func (s *storeFlags) openKnown(ctx context.Context) (*sqlstore.Store, error) {
	store, err := s.open(ctx)
	if err != nil {
		return nil, err
	}
	known, err := store.HasBank(ctx, s.id())
	if err == nil && !known {
		err = fmt.Errorf("bank %s is not in this store: nothing was ever imported, retained or consolidated for it (check --bank and $PROMPTOPS_STORE)", s.bank)
	}
	if err != nil {
		store.Close()
		return nil, err
	}
	return store, nil
}

// encodingFlag defines --encoding, the bank's token encoding.
func encodingFlag(fs *flag.FlagSet, p *string) {
	envStringVar(fs, p, "encoding", "PROMPTOPS_ENCODING", string(promptopsv1.DefaultEncoding), "Token `ENCODING` for sizing prompts ($PROMPTOPS_ENCODING).")
}

// intFlag defines an integer flag whose default comes from env; a value
// there that is not an integer is an error, not silently ignored.
func intFlag(fs *flag.FlagSet, errs *[]error, p *int, name, env string, def int, usage string) {
	fs.IntVar(p, name, def, usage+" ($"+env+")")
	if s, ok := lookupEnv(env); ok && strings.TrimSpace(s) != "" {
		if _, err := strconv.Atoi(strings.TrimSpace(s)); err != nil {
			*errs = append(*errs, fmt.Errorf("$%s=%q is not an integer", env, s))
			return
		}
		_ = fs.Set(name, strings.TrimSpace(s))
	}
}

func runConsolidate(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("consolidate", stdout, stderr)
	var sf storeFlags
	sf.register(fs)
	var (
		baseURL, model, missionFile, encoding, terminationLog, apiKeyFile string
		retention, trusted                                                string
		set                                                               consolidation.Settings
		timeoutSeconds, retries, maxTokensPerRun                          int
		envErrs                                                           []error
		emb                                                               embeddingsFlags
		rf                                                                redactionFlags
		xs                                                                extraction.Settings
	)
	envStringVar(fs, &baseURL, "llm-base-url", "PROMPTOPS_LLM_BASE_URL", "", "Base `URL` of an OpenAI-compatible API, e.g. http://vllm:8000/v1 ($PROMPTOPS_LLM_BASE_URL).")
	envStringVar(fs, &model, "model", "PROMPTOPS_MODEL", "", "`MODEL` name ($PROMPTOPS_MODEL).")
	envStringVar(fs, &missionFile, "mission-file", "PROMPTOPS_MISSION_FILE", "", "`FILE` holding the bank's mission; empty uses the default mission ($PROMPTOPS_MISSION_FILE).")
	encodingFlag(fs, &encoding)
	envStringVar(fs, &terminationLog, "termination-log", "PROMPTOPS_TERMINATION_LOG", "", "Also write the JSON summary to `FILE`, within 4 KiB, e.g. /dev/termination-log ($PROMPTOPS_TERMINATION_LOG).")
	envStringVar(fs, &apiKeyFile, "api-key-file", "PROMPTOPS_API_KEY_FILE", "", "`FILE` holding the API key; otherwise $OPENAI_API_KEY; neither sends no key.")
	intFlag(fs, &envErrs, &set.MaxObservations, "max-observations", "PROMPTOPS_MAX_OBSERVATIONS", 0, "Capacity of the bank; 0 for none.")
	intFlag(fs, &envErrs, &set.MaxObservationsPerScope, "max-observations-per-scope", "PROMPTOPS_MAX_OBSERVATIONS_PER_SCOPE", 0, "Capacity of each named scope; 0 for none.")
	intFlag(fs, &envErrs, &set.Parallelism, "parallelism", "PROMPTOPS_PARALLELISM", int(promptopsv1.DefaultParallelism), "Scopes consolidated at once, one LLM call in flight each.")
	intFlag(fs, &envErrs, &set.BatchSize, "batch-size", "PROMPTOPS_BATCH_SIZE", consolidation.DefaultBatchSize, "Facts per LLM call.")
	intFlag(fs, &envErrs, &set.MaxFacts, "max-facts", "PROMPTOPS_MAX_FACTS", consolidation.DefaultMaxFacts, "Facts consolidated in this run at most.")
	intFlag(fs, &envErrs, &set.MaxPromptTokens, "max-prompt-tokens", "PROMPTOPS_MAX_PROMPT_TOKENS", consolidation.DefaultMaxPromptTokens, "Token budget of one LLM call.")
	intFlag(fs, &envErrs, &set.MaxAttempts, "max-attempts", "PROMPTOPS_MAX_ATTEMPTS", consolidation.DefaultMaxAttempts, "LLM calls per batch (and per half of a split batch) at most.")
	intFlag(fs, &envErrs, &maxTokensPerRun, "max-tokens-per-run", "PROMPTOPS_MAX_TOKENS_PER_RUN", int(consolidation.DefaultMaxTokensPerRun), "Prompt plus completion tokens of the run at most, retries included; then no new call starts and the rest stays pending.")
	intFlag(fs, &envErrs, &timeoutSeconds, "llm-timeout-seconds", "PROMPTOPS_LLM_TIMEOUT_SECONDS", int(promptopsv1.DefaultLLMTimeoutSeconds), "Timeout of one LLM call.")
	intFlag(fs, &envErrs, &retries, "llm-retries", "PROMPTOPS_LLM_RETRIES", 3, "Retries of an LLM call on 429, 5xx and connection errors, with backoff.")
	envStringVar(fs, &retention, "retention-max-age", "PROMPTOPS_RETENTION_MAX_AGE", "", "Erase, first thing in the run, the facts stored longer ago than this Go `DURATION` (e.g. 720h) with the observations citing them; 0 or empty keeps facts ($PROMPTOPS_RETENTION_MAX_AGE).")
	trustedSourcesFlag(fs, &trusted)
	intFlag(fs, &envErrs, &xs.MaxPromptTokens, "extraction-max-prompt-tokens", "PROMPTOPS_EXTRACTION_MAX_PROMPT_TOKENS", extraction.DefaultMaxPromptTokens, "Token budget of one call extracting facts from retained messages.")
	intFlag(fs, &envErrs, &xs.ContextMessages, "extraction-context-messages", "PROMPTOPS_EXTRACTION_CONTEXT_MESSAGES", extraction.DefaultContextMessages, "Messages said before a batch shown with it for context, at most.")
	intFlag(fs, &envErrs, &xs.MessagesPerBatch, "extraction-messages-per-batch", "PROMPTOPS_EXTRACTION_MESSAGES_PER_BATCH", extraction.DefaultMessagesPerBatch, "New messages of one conversation per extraction call, at most.")
	emb.register(fs, &envErrs)
	rf.register(fs)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	fail := func(code int, format string, a ...any) int {
		msg := fmt.Sprintf(format, a...)
		fmt.Fprintln(stderr, "promptops consolidate:", msg)
		return code
	}
	if err := errors.Join(envErrs...); err != nil {
		return fail(ExitInvalid, "%v", err)
	}
	if err := sf.check(); err != nil {
		return fail(ExitInvalid, "%v", err)
	}
	maxAge, err := retentionMaxAge(retention)
	if err != nil {
		return fail(ExitInvalid, "%v", err)
	}
	set.RetentionMaxAge = maxAge
	if set.Trust, err = trustedSources(trusted); err != nil {
		return fail(ExitInvalid, "%v", err)
	}
	if baseURL == "" || model == "" {
		return fail(ExitInvalid, "--llm-base-url and --model are required")
	}
	if set.BatchSize < 1 || set.BatchSize > 100 || set.MaxFacts < 1 || set.MaxPromptTokens < 1024 || set.MaxAttempts < 1 || set.MaxObservations < 0 || set.MaxObservationsPerScope < 0 || set.Parallelism < 1 || set.Parallelism > 32 || maxTokensPerRun < 1000 {
		return fail(ExitInvalid, "out of range: --batch-size 1..100, --max-facts >= 1, --max-prompt-tokens >= 1024, --max-attempts >= 1, --max-observations >= 0, --max-observations-per-scope >= 0, --parallelism 1..32, --max-tokens-per-run >= 1000")
	}
	if xs.MaxPromptTokens < 1024 || xs.ContextMessages < 0 || xs.ContextMessages > 100 || xs.MessagesPerBatch < 1 || xs.MessagesPerBatch > 64 {
		return fail(ExitInvalid, "out of range: --extraction-max-prompt-tokens >= 1024, --extraction-context-messages 0..100, --extraction-messages-per-batch 1..64")
	}
	set.MaxTokensPerRun = int64(maxTokensPerRun)
	if missionFile != "" {
		data, err := os.ReadFile(missionFile)
		if err != nil {
			return fail(ExitInvalid, "reading the mission: %v", err)
		}
		set.Mission = strings.TrimSpace(string(data))
	}
	apiKey, _ := lookupEnv("OPENAI_API_KEY")
	apiKey = strings.TrimSpace(apiKey)
	if apiKeyFile != "" {
		data, err := os.ReadFile(apiKeyFile)
		if err != nil {
			return fail(ExitInvalid, "reading the API key file: %v", err)
		}
		apiKey = strings.TrimSpace(string(data))
	}
	embedder, err := emb.embedder(&set, retries)
	if err != nil {
		return fail(ExitInvalid, "%v", err)
	}
	// What a run sends to the LLM and the embeddings API is redacted
	// again, in case facts were written straight into the store.
	red, err := rf.redactor()
	if err != nil {
		return fail(ExitInvalid, "%v", err)
	}
	set.Bank, set.Encoding = sf.id(), encoding
	// A claim outlives the longest call the client can make (every retry
	// timing out), so a live run never loses its facts to another.
	set.ClaimLease = max(consolidation.DefaultClaimLease, time.Duration(retries+1)*time.Duration(timeoutSeconds)*time.Second+2*time.Minute)

	// The container's limit, as serve takes it: without one the collector
	// lets the heap grow to twice what is live, and loading a bank's
	// vectors leaves about as much garbage (the rows read) as it keeps.
	getenv := func(k string) string { v, _ := lookupEnv(k); return v }
	if limit, from := memoryLimit(getenv, os.ReadFile); from != "" && from != "GOMEMLIMIT" {
		debug.SetMemoryLimit(limit)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stopTraces, err := telemetry.Setup(ctx, "promptops-consolidate")
	if err != nil {
		fmt.Fprintln(stderr, "promptops consolidate: OpenTelemetry:", err)
		return ExitInvalid
	}
	defer flushTraces(stopTraces)
	// A Job's run continues the trace the manager passed in TRACEPARENT.
	ctx = telemetry.ContextFromEnv(ctx)
	summary := consolidation.Summary{MissionHash: consolidation.MissionHash(set.Mission)}
	finish := func(err error) int {
		code := ExitOK
		if err == nil && summary.FactsFailed > 0 && summary.FactsConsolidated == 0 {
			err = fmt.Errorf("all %d facts of the run failed and none was consolidated ('promptops facts list --status failed' shows why; 'promptops facts retry' sets them back to pending)", summary.FactsFailed)
			code = int(controllers.ConsolidateExitNoProgress)
		}
		if err != nil {
			summary.Error = err.Error()
			fmt.Fprintln(stderr, "promptops consolidate: run failed:", err)
			code = max(code, ExitFailed)
		}
		data, _ := json.Marshal(summary)
		fmt.Fprintln(stdout, string(data))
		if terminationLog != "" {
			if werr := os.WriteFile(terminationLog, terminationMessage(summary), 0o644); werr != nil {
				fmt.Fprintln(stderr, "promptops consolidate: writing the termination log:", werr)
			}
		}
		return code
	}
	store, err := sf.open(ctx)
	if err != nil {
		return finish(err)
	}
	defer store.Close()
	eng := &consolidation.Engine{
		Store:    store,
		Settings: set,
		LLM: llm.New(llm.Config{BaseURL: baseURL, Model: model, APIKey: apiKey,
			Timeout: time.Duration(timeoutSeconds) * time.Second, MaxRetries: retries}),
		Progress: func(line string) { fmt.Fprintf(stderr, "%s %s\n", time.Now().UTC().Format(time.RFC3339), line) },
		Redactor: red,
	}
	if embedder != nil {
		eng.Embedder = embedder
	}
	// Retained messages become facts first, with the same client and
	// budget.
	xs.Bank, xs.Mission, xs.Encoding, xs.MaxAttempts, xs.Trust = set.Bank, set.Mission, set.Encoding, set.MaxAttempts, set.Trust
	eng.Extractor = &extraction.Extractor{Store: store, LLM: eng.LLM, Settings: xs, Redactor: red, Progress: eng.Progress}
	summary, err = eng.Run(ctx)
	return finish(err)
}

// retentionMaxAge parses --retention-max-age: a positive Go duration, or
// 0 or empty for none; an error names the flag and the value.
func retentionMaxAge(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("--retention-max-age: %q is not a positive duration (e.g. 720h, 90m); 0 keeps facts", s)
	}
	return d, nil
}

// terminationMessage is the summary as JSON within 4 KiB: the error message
// is shortened first.
func terminationMessage(s consolidation.Summary) []byte {
	data, _ := json.Marshal(s)
	for len(data) > MaxTerminationMessage && s.Error != "" {
		cut := max(0, len(s.Error)-(len(data)-MaxTerminationMessage)-16)
		s.Error = s.Error[:cut] + "..."
		data, _ = json.Marshal(s)
	}
	return data
}

// embeddingsFlags configure the embeddings server; without a base URL
// recall stays lexical.
type embeddingsFlags struct {
	baseURL, model, apiKeyFile                                     string
	dimensions, timeoutSeconds, batchSize, duplicate, floor, maxRe int
}

func (e *embeddingsFlags) register(fs *flag.FlagSet, errs *[]error) {
	envStringVar(fs, &e.baseURL, "embeddings-base-url", "PROMPTOPS_EMBEDDINGS_BASE_URL", "", "Base `URL` of an OpenAI-compatible embeddings API; empty keeps recall lexical ($PROMPTOPS_EMBEDDINGS_BASE_URL).")
	envStringVar(fs, &e.model, "embeddings-model", "PROMPTOPS_EMBEDDINGS_MODEL", "", "Embedding `MODEL` name ($PROMPTOPS_EMBEDDINGS_MODEL).")
	envStringVar(fs, &e.apiKeyFile, "embeddings-api-key-file", "PROMPTOPS_EMBEDDINGS_API_KEY_FILE", "", "`FILE` holding the embeddings API key; otherwise $PROMPTOPS_EMBEDDINGS_API_KEY; neither sends no key.")
	intFlag(fs, errs, &e.dimensions, "embeddings-dimensions", "PROMPTOPS_EMBEDDINGS_DIMENSIONS", 0, "Dimensions asked of the embedding model; 0 sends none.")
	intFlag(fs, errs, &e.timeoutSeconds, "embeddings-timeout-seconds", "PROMPTOPS_EMBEDDINGS_TIMEOUT_SECONDS", int(promptopsv1.DefaultEmbeddingsTimeoutSeconds), "Timeout of one embeddings call.")
	intFlag(fs, errs, &e.batchSize, "embeddings-batch-size", "PROMPTOPS_EMBEDDINGS_BATCH_SIZE", int(promptopsv1.DefaultEmbeddingsBatchSize), "Texts per embeddings request at most.")
	intFlag(fs, errs, &e.duplicate, "duplicate-similarity", "PROMPTOPS_DUPLICATE_SIMILARITY", int(promptopsv1.DefaultDuplicateSimilarityPerMille), "Cosine per mille at or above which a new observation is a duplicate (with embeddings).")
	intFlag(fs, errs, &e.floor, "recall-similarity", "PROMPTOPS_RECALL_SIMILARITY", int(promptopsv1.DefaultRecallSimilarityPerMille), "Least cosine per mille of an observation recalled by meaning.")
	intFlag(fs, errs, &e.maxRe, "max-reembed-per-run", "PROMPTOPS_MAX_REEMBED_PER_RUN", int(promptopsv1.DefaultMaxReembedPerRun), "Observations without a vector of the current model embedded per run at most.")
}

// embedder validates the flags, fills the run's settings and builds the
// client; nil when no embeddings server is configured.
func (e *embeddingsFlags) embedder(set *consolidation.Settings, retries int) (consolidation.Embedder, error) {
	if e.baseURL == "" {
		if e.model != "" {
			return nil, errors.New("--embeddings-model needs --embeddings-base-url")
		}
		return nil, nil
	}
	if e.model == "" {
		return nil, errors.New("--embeddings-base-url needs --embeddings-model")
	}
	if e.dimensions < 0 || e.dimensions > 8192 || e.timeoutSeconds < 1 || e.batchSize < 1 || e.batchSize > 2048 ||
		e.duplicate < 500 || e.duplicate > 1000 || e.floor < 0 || e.floor > 1000 || e.maxRe < 1 {
		return nil, errors.New("out of range: --embeddings-dimensions 0..8192, --embeddings-timeout-seconds >= 1, --embeddings-batch-size 1..2048, --duplicate-similarity 500..1000, --recall-similarity 0..1000, --max-reembed-per-run >= 1")
	}
	key, _ := lookupEnv("PROMPTOPS_EMBEDDINGS_API_KEY")
	key = strings.TrimSpace(key)
	if e.apiKeyFile != "" {
		data, err := os.ReadFile(e.apiKeyFile)
		if err != nil {
			return nil, fmt.Errorf("reading the embeddings API key file: %w", err)
		}
		key = strings.TrimSpace(string(data))
	}
	set.DuplicateSimilarity = float64(e.duplicate) / 1000
	// A floor of 0 would mean the default; the smallest positive cosine
	// keeps "recall everything" expressible.
	set.SemanticFloor = max(float64(e.floor)/1000, 1e-9)
	set.MaxReembedPerRun, set.EmbedBatchSize = e.maxRe, e.batchSize
	return llm.NewEmbeddings(llm.EmbeddingsConfig{BaseURL: e.baseURL, Model: e.model, Dimensions: e.dimensions, APIKey: key,
		Timeout: time.Duration(e.timeoutSeconds) * time.Second, MaxRetries: retries, BatchSize: e.batchSize}), nil
}
