package extraction_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/consolidation/llm"
	"github.com/promptops/promptops/internal/consolidation/sqlstore"
	"github.com/promptops/promptops/internal/extraction"
	"github.com/promptops/promptops/internal/llmtest"
	"github.com/promptops/promptops/internal/tokens"
)

// budget is a run's budget of max tokens.
type budget struct {
	mu                  sync.Mutex
	max, used, reserved int64
}

func (b *budget) Reserve(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+b.reserved+n > b.max {
		return false
	}
	b.reserved += n
	return true
}
func (b *budget) Release(n int64) { b.mu.Lock(); b.reserved -= n; b.mu.Unlock() }
func (b *budget) Spend(n int64)   { b.mu.Lock(); b.used += n; b.mu.Unlock() }

// preferring answers a fact for every new message that states a
// preference ("I prefer X."), citing it; a part of a cut message too.
func preferring(_ int, req llmtest.Request) llmtest.Reply {
	var facts []llmtest.ExtractedFact
	for _, m := range llmtest.Messages(req.User) {
		if m.Earlier {
			continue
		}
		if _, what, ok := strings.Cut(m.Content, "I prefer "); ok {
			what, _, _ = strings.Cut(what, ".")
			facts = append(facts, llmtest.ExtractedFact{Text: "The user prefers " + what + ".", SourceMessageIDs: []string{m.Label}})
		}
	}
	return llmtest.Reply{Content: llmtest.ExtractionAnswer(facts)}
}

func openStore(t *testing.T) *sqlstore.Store {
	t.Helper()
	st, err := sqlstore.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "bank.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestExtractHugeMessagesAndLongConversation: a 2 MB message of prose, a
// 2 MB message of one repeated character and a conversation of 5,000
// messages are extracted with every prompt within maxPromptTokens (counted
// here with the bank's encoding), every message extracted, a fact from
// every preference; the peak heap is logged (the figure of the issue's
// note).
func TestExtractHugeMessagesAndLongConversation(t *testing.T) {
	const bank = consolidation.BankID("shop/assistant")
	const maxPrompt = 4000
	ctx := context.Background()
	st := openStore(t)
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	var prose strings.Builder
	for i := 0; prose.Len() < 2<<20; i++ {
		fmt.Fprintf(&prose, "Paragraph %d of the pasted report: the quarterly figures rose by %d percent in region %d. ", i, i%97, i%13)
		if i%5000 == 0 {
			prose.WriteString("I prefer the summary in bullet points. ")
		}
	}
	huge := []consolidation.Message{
		{Scope: "u1", Conversation: "report", Role: consolidation.RoleUser, Content: prose.String(), At: at},
		{Scope: "u2", Conversation: "one-char", Role: consolidation.RoleUser, Content: strings.Repeat("a", 2<<20), At: at},
	}
	for i := range huge {
		huge[i].ID = consolidation.DerivedMessageID(bank, huge[i])
	}
	if _, _, err := st.RetainMessages(ctx, bank, huge); err != nil {
		t.Fatal(err)
	}
	const long = 5000
	prefs := 0
	for from := 0; from < long; from += 1000 {
		var msgs []consolidation.Message
		for i := from; i < from+1000; i++ {
			m := consolidation.Message{Scope: "u3", Conversation: "long", Role: consolidation.RoleUser, At: at.Add(time.Duration(i) * time.Second),
				ID: fmt.Sprintf("long-%d", i), Content: fmt.Sprintf("Message %d: just chatting about the weather today.", i)}
			if i%10 == 0 {
				m.Content = fmt.Sprintf("Message %d: I prefer option %d.", i, i)
				prefs++
			}
			if i%2 == 1 {
				m.Role = consolidation.RoleAssistant
			}
			msgs = append(msgs, m)
		}
		if _, _, err := st.RetainMessages(ctx, bank, msgs); err != nil {
			t.Fatal(err)
		}
	}

	model := llmtest.New(preferring)
	defer model.Close()
	x := &extraction.Extractor{
		Store:    st,
		LLM:      llm.New(llm.Config{BaseURL: model.BaseURL(), Model: "m", Timeout: time.Minute}),
		Settings: extraction.Settings{Bank: bank, MaxPromptTokens: maxPrompt, MessagesPerBatch: 32, ContextMessages: 8},
	}
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	runtime.GC()
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peak.Load() {
				peak.Store(ms.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	sum, err := x.Extract(ctx, &budget{max: 1 << 40})
	close(stop)
	<-sampled
	if err != nil {
		t.Fatal(err)
	}
	if sum.MessagesExtracted != long+2 || sum.MessagesFailed != 0 || sum.FactsStored != int64(prefs+1) {
		t.Errorf("%+v, want %d messages extracted, %d facts", sum, long+2, prefs+1)
	}
	enc, err := tokens.Get("o200k_base")
	if err != nil {
		t.Fatal(err)
	}
	parts, most := 0, 0
	for _, req := range model.Requests() {
		n := enc.Count(req.System) + enc.Count(req.User) + 16
		most = max(most, n)
		if n > maxPrompt {
			t.Errorf("a prompt of %d tokens, over maxPromptTokens %d", n, maxPrompt)
		}
		if ms := llmtest.Messages(req.User); len(ms) == 1 && ms[0].Part != "" {
			parts++
		}
	}
	t.Logf("%d calls (%d of them parts of the two 2 MB messages), largest prompt %d tokens of %d; %d prompt tokens in all, %d cacheable; peak heap %.1f MiB",
		sum.LLMCalls, parts, most, maxPrompt, sum.PromptTokens, sum.CacheablePromptTokens, float64(peak.Load())/(1<<20))
	left, err := st.ListScopeMessages(ctx, bank.Scope("u3"), consolidation.MessagePending, 10)
	if err != nil || len(left) != 0 {
		t.Errorf("pending messages left: %d %v", len(left), err)
	}
}

func retainConversation(t *testing.T, st *sqlstore.Store, bank consolidation.BankID, n int) {
	t.Helper()
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	var msgs []consolidation.Message
	for i := range n {
		m := consolidation.Message{Scope: "u1", Conversation: "c", Role: consolidation.RoleUser, At: at.Add(time.Duration(i) * time.Minute),
			Content: fmt.Sprintf("I prefer option %d.", i)}
		m.ID = consolidation.DerivedMessageID(bank, m)
		msgs = append(msgs, m)
	}
	if _, _, err := st.RetainMessages(context.Background(), bank, msgs); err != nil {
		t.Fatal(err)
	}
}

// A model whose answers are never usable: the batch is asked again, split
// down to single messages, and each is marked failed with the reason and
// kept; the run itself does not fail.
func TestExtractUnusableAnswersFailMessages(t *testing.T) {
	const bank = consolidation.BankID("shop/assistant")
	ctx := context.Background()
	st := openStore(t)
	retainConversation(t, st, bank, 3)
	model := llmtest.New(func(int, llmtest.Request) llmtest.Reply { return llmtest.Reply{Content: `{"facts": "none"}`} })
	defer model.Close()
	x := &extraction.Extractor{Store: st, LLM: llm.New(llm.Config{BaseURL: model.BaseURL(), Model: "m", Timeout: time.Minute}),
		Settings: extraction.Settings{Bank: bank, MaxAttempts: 2}}
	sum, err := x.Extract(ctx, &budget{max: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	// 2 attempts of the batch of 3, of its halves (1 and 2), and of the
	// second half's halves: 2 × 5.
	if sum.MessagesFailed != 3 || sum.MessagesExtracted != 0 || sum.LLMCalls != 10 || sum.Retries != 5 {
		t.Errorf("%+v", sum)
	}
	failed, err := st.ListScopeMessages(ctx, bank.Scope("u1"), consolidation.MessageFailed, 10)
	if err != nil || len(failed) != 3 {
		t.Fatalf("%d failed messages kept, want 3 (%v)", len(failed), err)
	}
	for _, m := range failed {
		if !strings.Contains(m.FailureReason, "no usable answer in 2 attempts: facts") || m.Content == "" {
			t.Errorf("failed message: %+v", m)
		}
	}
}

// A budget too small for the next call stops extraction: what is done is
// kept, the rest stays pending, and the summary says the run was cut
// short.
func TestExtractStopsAtTheBudget(t *testing.T) {
	const bank = consolidation.BankID("shop/assistant")
	ctx := context.Background()
	st := openStore(t)
	retainConversation(t, st, bank, 20)
	model := llmtest.New(preferring)
	defer model.Close()
	x := &extraction.Extractor{Store: st, LLM: llm.New(llm.Config{BaseURL: model.BaseURL(), Model: "m", Timeout: time.Minute}),
		Settings: extraction.Settings{Bank: bank, MessagesPerBatch: 4}}
	// Room for two calls: each books its prompt (some 600 tokens) and a
	// completion budget of 5,120, and spends some 700.
	sum, err := x.Extract(ctx, &budget{max: 7000})
	if err != nil {
		t.Fatal(err)
	}
	pending, err := st.ListScopeMessages(ctx, bank.Scope("u1"), consolidation.MessagePending, 100)
	if err != nil {
		t.Fatal(err)
	}
	if !sum.CutShort || sum.MessagesExtracted != 8 || len(pending) != 12 || sum.FactsStored != sum.MessagesExtracted {
		t.Errorf("%+v with %d pending", sum, len(pending))
	}
}
