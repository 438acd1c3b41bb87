package extraction_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/consolidation/llm"
	"github.com/promptops/promptops/internal/extraction"
	"github.com/promptops/promptops/internal/llmtest"
)

// TestExtractionCost gives the cost per retained message at 1, 8 and 32
// messages per batch (docs/memorybanks.md quotes it): 10 conversations of
// 64 messages of some 20 words, every fourth a preference, the default
// context window and prompt budget, the prompt tokens counted in the
// bank's encoding, and the share of them that is the calls' unchanging
// prefix (the system message). go test -run TestExtractionCost -v
// ./internal/extraction/ prints the table.
func TestExtractionCost(t *testing.T) {
	const bank = consolidation.BankID("shop/assistant")
	const convs, perConv = 10, 64
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	var calls []int64
	for _, perBatch := range []int{1, 8, 32} {
		st := openStore(t)
		ctx := context.Background()
		for c := range convs {
			var msgs []consolidation.Message
			for i := range perConv {
				m := consolidation.Message{Scope: fmt.Sprintf("u%d", c), Conversation: "c", At: at.Add(time.Duration(i) * time.Minute), Role: consolidation.RoleUser,
					Content: fmt.Sprintf("Message %d: we talked about the trip, the hotel near the station and the train that leaves at nine in the morning.", i)}
				if i%2 == 1 {
					m.Role = consolidation.RoleAssistant
					m.Content = fmt.Sprintf("Reply %d: the hotel has rooms on the quiet side, and the nine o'clock train has seats left in coach four.", i)
				}
				if i%4 == 0 {
					m.Content = fmt.Sprintf("Message %d: I prefer a window seat facing forward, and a room on the quiet side of hotel %d.", i, i)
				}
				m.ID = consolidation.DerivedMessageID(bank, m)
				msgs = append(msgs, m)
			}
			if _, _, err := st.RetainMessages(ctx, bank, msgs); err != nil {
				t.Fatal(err)
			}
		}
		model := llmtest.New(preferring)
		x := &extraction.Extractor{Store: st, LLM: llm.New(llm.Config{BaseURL: model.BaseURL(), Model: "m", Timeout: time.Minute}),
			Settings: extraction.Settings{Bank: bank, MessagesPerBatch: perBatch}}
		sum, err := x.Extract(ctx, &budget{max: 1 << 40})
		model.Close()
		if err != nil {
			t.Fatal(err)
		}
		n := float64(convs * perConv)
		if sum.MessagesExtracted != convs*perConv || sum.FactsStored != convs*perConv/4 {
			t.Fatalf("batch %d: %+v", perBatch, sum)
		}
		t.Logf("messagesPerBatch %2d: %.3f calls and %.0f prompt tokens per message; %.0f%% of the prompt tokens are the cacheable prefix",
			perBatch, float64(sum.LLMCalls)/n, float64(sum.PromptTokens)/n, 100*float64(sum.CacheablePromptTokens)/float64(sum.PromptTokens))
		calls = append(calls, sum.LLMCalls)
	}
	if calls[0] <= calls[1] || calls[1] <= calls[2] {
		t.Errorf("calls at 1, 8, 32 per batch: %v, want fewer with larger batches", calls)
	}
}
