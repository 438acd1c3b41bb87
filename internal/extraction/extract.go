package extraction

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/trace"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/redact"
	"github.com/promptops/promptops/internal/telemetry"
	"github.com/promptops/promptops/internal/textclip"
	"github.com/promptops/promptops/internal/tokens"
)

// Store is what extraction needs of a bank's store (sqlstore).
type Store interface {
	// PendingConversations lists up to limit of the bank's conversations
	// with pending messages, by scope key and name, after after.
	PendingConversations(ctx context.Context, bank consolidation.BankID, after consolidation.ConversationRef, limit int) ([]consolidation.ConversationRef, error)
	// PendingMessages returns up to limit of a conversation's pending
	// messages in the order they were said.
	PendingMessages(ctx context.Context, c consolidation.ConversationRef, limit int) ([]consolidation.Message, error)
	// MessagesBefore returns up to limit of the messages of c said before
	// m, the latest of them, oldest first.
	MessagesBefore(ctx context.Context, c consolidation.ConversationRef, m consolidation.Message, limit int) ([]consolidation.Message, error)
	// MarkMessages sets the status of messages of a scope.
	MarkMessages(ctx context.Context, key consolidation.ScopeKey, ids []string, status consolidation.MessageStatus, reason string) error
	// RetainFacts stores facts pending, a fact the bank holds already
	// (same id, text and source) counted in unchanged.
	RetainFacts(ctx context.Context, bank consolidation.BankID, facts []consolidation.Fact) (stored, unchanged int, err error)
}

// Settings of extraction.
type Settings struct {
	Bank     consolidation.BankID
	Mission  string
	Encoding string
	// MaxPromptTokens bounds every call's prompt (system and user
	// messages, in tokens of Encoding); 0 is DefaultMaxPromptTokens.
	MaxPromptTokens int
	// ContextMessages is how many messages said before a batch its prompt
	// shows for context, at most; negative is none.
	ContextMessages int
	// MessagesPerBatch is the most new messages of one call; 0 is
	// DefaultMessagesPerBatch.
	MessagesPerBatch int
	// MaxAttempts is how often a batch is asked again after an unusable
	// answer before it is split; 0 is consolidation's default.
	MaxAttempts int
	// MaxCompletionTokens caps one answer; 0 is consolidation's default.
	MaxCompletionTokens int
	// Trust decides which of a fact's messages' roles is least trusted.
	Trust consolidation.Trust
}

// Defaults of the settings left zero: a MemoryBank's spec.extraction.
const (
	DefaultMaxPromptTokens  = int(promptopsv1.DefaultExtractionMaxPromptTokens)
	DefaultContextMessages  = int(promptopsv1.DefaultExtractionContextMessages)
	DefaultMessagesPerBatch = int(promptopsv1.DefaultExtractionMessagesPerBatch)
)

// messageOverhead is the tokens chat formatting adds per message.
const messageOverhead = 8

// correctionTokens is the room a prompt keeps for a retry's note.
const correctionTokens = 200

// conversationsPage is how many conversations one listing reads.
const conversationsPage = 100

// Extractor extracts a bank's pending messages; it implements
// consolidation.Extractor.
type Extractor struct {
	Store    Store
	LLM      consolidation.LLM
	Settings Settings
	// Redactor redacts the messages a call sends and the facts it makes,
	// in case messages were written straight into the store; nil sends
	// them as stored.
	Redactor *redact.Redactor
	// Progress receives a line per batch; lines never quote a message.
	Progress func(line string)
}

// errBudget stops extraction when the run's budget cannot take a call.
var errBudget = errors.New("maxTokensPerRun reached")

// job is one Extract's state.
type job struct {
	*Extractor
	s            Settings
	budget       consolidation.Budget
	enc          *tokens.Encoder
	system       string
	systemTokens int
	sum          consolidation.Extraction
	redacted     redact.Counts
}

// Extract extracts every pending message of the bank, conversation by
// conversation, until none is left or the budget cannot take the next
// call (then Extraction.CutShort is set and the rest stays pending). An
// error is the store's or the LLM's: what was extracted is kept.
func (x *Extractor) Extract(ctx context.Context, budget consolidation.Budget) (consolidation.Extraction, error) {
	s := x.Settings
	if s.MaxPromptTokens <= 0 {
		s.MaxPromptTokens = DefaultMaxPromptTokens
	}
	if s.MessagesPerBatch <= 0 {
		s.MessagesPerBatch = DefaultMessagesPerBatch
	}
	s.ContextMessages = max(0, s.ContextMessages)
	if s.MaxAttempts <= 0 {
		s.MaxAttempts = consolidation.DefaultMaxAttempts
	}
	if s.MaxCompletionTokens <= 0 {
		s.MaxCompletionTokens = consolidation.DefaultMaxCompletionTokens
	}
	if s.Encoding == "" {
		s.Encoding = string(promptopsv1.DefaultEncoding)
	}
	enc, err := tokens.Get(s.Encoding)
	if err != nil {
		return consolidation.Extraction{}, err
	}
	j := &job{Extractor: x, s: s, budget: budget, enc: enc, system: SystemPrompt(s.Mission), redacted: redact.Counts{}}
	j.systemTokens = enc.Count(j.system) + messageOverhead
	err = j.all(ctx)
	if len(j.redacted) > 0 {
		j.sum.Redacted = map[string]int64{}
		for k, n := range j.redacted {
			j.sum.Redacted[k] = int64(n)
		}
	}
	if errors.Is(err, errBudget) {
		j.sum.CutShort = true
		err = nil
	}
	return j.sum, err
}

// all goes through the bank's conversations with pending messages, a page
// at a time.
func (j *job) all(ctx context.Context) error {
	var after consolidation.ConversationRef
	for {
		page, err := j.Store.PendingConversations(ctx, j.s.Bank, after, conversationsPage)
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		for _, c := range page {
			if err := j.conversation(ctx, c); err != nil {
				return err
			}
		}
		if len(page) < conversationsPage {
			return nil
		}
		after = page[len(page)-1]
	}
}

// conversation extracts a conversation's pending messages a batch at a
// time; every batch marks at least one message extracted or failed, so
// it ends.
func (j *job) conversation(ctx context.Context, c consolidation.ConversationRef) error {
	for {
		msgs, err := j.Store.PendingMessages(ctx, c, j.s.MessagesPerBatch)
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		if len(msgs) == 0 {
			return nil
		}
		j.redactMessages(msgs)
		earlier, err := j.Store.MessagesBefore(ctx, c, msgs[0], j.s.ContextMessages)
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		j.redactMessages(earlier)
		b := j.fit(msgs, earlier)
		if b == nil {
			// The first message does not fit a prompt on its own.
			if err := j.cut(ctx, c, msgs[0]); err != nil {
				return err
			}
			continue
		}
		if err := j.process(ctx, c, b); err != nil {
			return err
		}
	}
}

// batch is one call's messages: the new ones and the context window, with
// the labels the prompt shows them by.
type batch struct {
	msgs    []consolidation.Message
	earlier []consolidation.Message
	// lines are the new messages' prompt lines, earlierLines the
	// context's; labels the new messages' labels.
	lines, earlierLines []string
	labels              []string
	// parts, when set, is the content of a cut message's part and its
	// place ("part 2 of 5"): the batch is that one message.
	part string
}

// room is the user message's tokens a prompt may take.
func (j *job) room() int {
	return j.s.MaxPromptTokens - j.systemTokens - messageOverhead - correctionTokens
}

// labelsFor gives each message of msgs (the context window first, then the
// batch) the label its prompt line shows: the id the application gave
// when it gave one fit for a line, else "m<n>" (n counting from 1 over
// the prompt's messages), never one label twice.
func (j *job) labelsFor(msgs []consolidation.Message) []string {
	out := make([]string, len(msgs))
	used := map[string]bool{}
	for i, m := range msgs {
		if given(j.s.Bank, m) {
			out[i] = m.ID
			used[m.ID] = true
		}
	}
	n := 0
	for i := range msgs {
		if out[i] != "" {
			continue
		}
		for {
			n++
			if l := fmt.Sprintf("m%d", n); !used[l] {
				out[i], used[l] = l, true
				break
			}
		}
	}
	return out
}

// given says whether the application gave m its id (not derived), and the
// id reads well in a line: no control character, no bracket.
func given(bank consolidation.BankID, m consolidation.Message) bool {
	if m.ID == "" || strings.ContainsAny(m.ID, "[]") || strings.ContainsFunc(m.ID, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return false
	}
	return consolidation.DerivedMessageID(bank, m) != m.ID
}

// fit makes the largest batch of msgs' first messages whose prompt fits,
// with as much of the context window (the latest messages first) as fits
// beside it; nil when the first message alone does not fit.
func (j *job) fit(msgs, earlier []consolidation.Message) *batch {
	room := j.room()
	all := append(slices.Clone(earlier), msgs...)
	labels := j.labelsFor(all)
	lines := make([]string, len(all))
	counts := make([]int, len(all))
	for i, m := range all {
		lines[i] = Line(labels[i], m, m.Content, "")
		// +1 for the line's end; a line longer than the room is not
		// counted whole.
		n, over := j.enc.CountUpTo(lines[i], max(room, 0))
		counts[i] = n + 1
		if over {
			counts[i] = room + 1
		}
	}
	fixed := j.enc.Count(UserPrompt(nil, nil, ""))
	ctx := len(earlier)
	take, used := 0, fixed
	for i := ctx; i < len(all) && used+counts[i] <= room; i++ {
		used += counts[i]
		take++
	}
	if take == 0 {
		return nil
	}
	from := ctx
	headed := false
	for from > 0 {
		extra := counts[from-1]
		if !headed {
			extra += 4 // the EARLIER MESSAGES heading and its blank line
		}
		if used+extra > room {
			break
		}
		used += extra
		headed = true
		from--
	}
	b := &batch{
		msgs: all[ctx : ctx+take], earlier: all[from:ctx],
		lines: lines[ctx : ctx+take], earlierLines: lines[from:ctx], labels: labels[ctx : ctx+take],
	}
	// The sum of the lines' counts is near the prompt's; the exact count
	// decides, dropping context and then messages until it fits.
	for j.enc.Count(UserPrompt(b.earlierLines, b.lines, "")) > room {
		switch {
		case len(b.earlier) > 0:
			b.earlier, b.earlierLines = b.earlier[1:], b.earlierLines[1:]
		case len(b.msgs) > 1:
			b.msgs, b.lines, b.labels = b.msgs[:len(b.msgs)-1], b.lines[:len(b.lines)-1], b.labels[:len(b.labels)-1]
		default:
			return nil
		}
	}
	return b
}

// cut extracts a message too long for a prompt in parts cut at token
// boundaries, each alone in its call, then marks it extracted (or failed
// when a part failed).
func (j *job) cut(ctx context.Context, c consolidation.ConversationRef, m consolidation.Message) error {
	label := j.labelsFor([]consolidation.Message{m})[0]
	fixed := j.enc.Count(UserPrompt(nil, []string{Line(label, m, "", "part 99999 of 99999")}, ""))
	room := j.room() - fixed - 1
	if room < 16 {
		return j.failMessages(ctx, c, []consolidation.Message{m}, fmt.Sprintf("maxPromptTokens (%d) leaves no room for the message", j.s.MaxPromptTokens))
	}
	// The parts' count first, so that each line says "part k of n"; the
	// content is cut again as each part is sent, never held as a list.
	n := 0
	for rest := m.Content; rest != ""; n++ {
		part, _ := j.enc.Truncate(rest, room)
		if part == "" {
			return j.failMessages(ctx, c, []consolidation.Message{m}, "the message cannot be cut at a token boundary")
		}
		rest = rest[len(part):]
	}
	j.progress("a message of %d bytes does not fit maxPromptTokens (%d): extracting it in %d parts", len(m.Content), j.s.MaxPromptTokens, n)
	failed := ""
	rest := m.Content
	for k := 1; rest != ""; k++ {
		part, _ := j.enc.Truncate(rest, room)
		rest = rest[len(part):]
		where := fmt.Sprintf("part %d of %d", k, n)
		b := &batch{msgs: []consolidation.Message{m}, labels: []string{label}, part: where,
			lines: []string{Line(label, m, part, where)}}
		ok, why, err := j.ask(ctx, c, b)
		if err != nil {
			return err
		}
		if !ok && failed == "" {
			failed = where + ": " + why
		}
	}
	if failed != "" {
		return j.failMessages(ctx, c, []consolidation.Message{m}, failed)
	}
	return j.markExtracted(ctx, c, []consolidation.Message{m})
}

// process extracts a batch: asked up to MaxAttempts times, then split in
// halves, a single message without a usable answer marked failed.
func (j *job) process(ctx context.Context, c consolidation.ConversationRef, b *batch) error {
	ok, why, err := j.ask(ctx, c, b)
	if err != nil {
		return err
	}
	if ok {
		return j.markExtracted(ctx, c, b.msgs)
	}
	if len(b.msgs) == 1 {
		return j.failMessages(ctx, c, b.msgs, why)
	}
	j.progress("batch of %d messages: no usable answer in %d attempts; splitting", len(b.msgs), j.s.MaxAttempts)
	mid := len(b.msgs) / 2
	first := &batch{msgs: b.msgs[:mid], earlier: b.earlier, lines: b.lines[:mid], earlierLines: b.earlierLines, labels: b.labels[:mid]}
	second := &batch{msgs: b.msgs[mid:], earlier: b.earlier, lines: b.lines[mid:], earlierLines: b.earlierLines, labels: b.labels[mid:]}
	if err := j.process(ctx, c, first); err != nil {
		return err
	}
	return j.process(ctx, c, second)
}

// ask sends a batch up to MaxAttempts times and stores the facts of the
// first usable answer; ok is false, with the last reason, when none was.
func (j *job) ask(ctx context.Context, c consolidation.ConversationRef, b *batch) (ok bool, why string, err error) {
	ctx, span := telemetry.Tracer().Start(ctx, "extract batch", trace.WithAttributes(telemetry.BatchMessages.Int(len(b.msgs))))
	defer span.End()
	j.sum.Batches++
	correction := ""
	for attempt := 1; attempt <= j.s.MaxAttempts; attempt++ {
		user := UserPrompt(b.earlierLines, b.lines, correction)
		userTokens := j.enc.Count(user)
		prompt := j.systemTokens + userTokens + messageOverhead
		maxTokens := consolidation.CompletionBudget(len(b.msgs), j.s.MaxCompletionTokens)
		if !j.budget.Reserve(int64(prompt + maxTokens)) {
			return false, "", errBudget
		}
		comp, err := j.LLM.Complete(ctx, consolidation.Request{
			Messages:  []consolidation.ChatMessage{{Role: "system", Content: j.system}, {Role: "user", Content: user}},
			Schema:    AnswerSchema(),
			MaxTokens: maxTokens,
		})
		j.budget.Release(int64(prompt + maxTokens))
		j.account(comp, err, prompt, maxTokens)
		if attempt > 1 {
			j.sum.Retries++
		}
		var facts []Extracted
		switch {
		case errors.Is(err, consolidation.ErrAnswerTooLarge):
			why = err.Error()
		case err != nil:
			return false, "", fmt.Errorf("llm: %w", err)
		default:
			facts, err = Parse(comp.Content, b.labels)
			switch {
			case err == nil:
				return true, "", j.store(ctx, c, b, facts)
			case comp.Truncated:
				why = fmt.Sprintf("the answer stopped at max_tokens (%d) before its JSON ended", maxTokens)
			default:
				why = err.Error()
			}
		}
		j.progress("batch of %d messages: attempt %d: invalid answer: %s", len(b.msgs), attempt, why)
		correction = "## YOUR PREVIOUS ANSWER WAS REJECTED\nIt could not be used: " + textclip.Head(why, 400, "...") +
			"\nAnswer again with exactly one JSON object {\"facts\": [...]}, citing only ids shown under NEW MESSAGES, copied exactly."
	}
	return false, fmt.Sprintf("no usable answer in %d attempts: %s", j.s.MaxAttempts, why), nil
}

// account adds a call's tokens: the usage the server reported, else the
// prompt as counted and the answer's bytes over three.
func (j *job) account(comp consolidation.Completion, err error, prompt, maxTokens int) {
	p, c := comp.PromptTokens, comp.CompletionTokens
	if p <= 0 {
		p = int64(prompt)
	}
	if c <= 0 {
		switch {
		case errors.Is(err, consolidation.ErrAnswerTooLarge):
			c = int64(maxTokens)
		case err == nil:
			c = int64(len(comp.Content)/3 + 1)
		}
	}
	j.sum.LLMCalls++
	j.sum.PromptTokens += p
	j.sum.CompletionTokens += c
	j.sum.CacheablePromptTokens += int64(j.systemTokens)
	j.budget.Spend(p + c)
}

// store makes the facts of a valid answer and stores them pending.
func (j *job) store(ctx context.Context, c consolidation.ConversationRef, b *batch, xs []Extracted) error {
	if len(xs) == 0 {
		return nil
	}
	scope := c.Key.Name()
	facts := make([]consolidation.Fact, 0, len(xs))
	seen := map[string]bool{}
	for _, x := range xs {
		cited := make([]consolidation.Message, len(x.Messages))
		for i, k := range x.Messages {
			cited[i] = b.msgs[k]
		}
		mentioned := cited[0].At
		for _, m := range cited[1:] {
			if m.At.After(mentioned) {
				mentioned = m.At
			}
		}
		f := consolidation.Fact{
			Scope: scope, Text: x.Text, Entities: x.Entities,
			OccurredStart: x.OccurredStart, OccurredEnd: x.OccurredEnd, MentionedAt: &mentioned,
			Source: LeastTrusted(j.s.Trust, cited),
		}
		if j.Redactor != nil {
			f.Text, _ = j.redact(f.Text)
			for i := range f.Entities {
				f.Entities[i], _ = j.redact(f.Entities[i])
			}
		}
		f.ID = consolidation.DerivedFactID(j.s.Bank, f)
		if seen[f.ID] {
			continue
		}
		seen[f.ID] = true
		facts = append(facts, f)
	}
	stored, _, err := j.Store.RetainFacts(ctx, j.s.Bank, facts)
	if err != nil {
		return fmt.Errorf("store: storing extracted facts: %w", err)
	}
	j.sum.FactsExtracted += int64(len(facts))
	j.sum.FactsStored += int64(stored)
	return nil
}

// roleOrder ranks roles from least to most trusted among equals of trust:
// what a user claims before what a tool returned, before what the
// assistant said, before the system's.
var roleOrder = []consolidation.MessageRole{consolidation.RoleUser, consolidation.RoleTool, consolidation.RoleAssistant, consolidation.RoleSystem}

// LeastTrusted is the source of a fact citing msgs: the role of one of them
// the bank does not trust when there is one, else the first of roleOrder
// among their roles, so that a fact never passes for more trusted than
// the least trusted message it comes from.
func LeastTrusted(trust consolidation.Trust, msgs []consolidation.Message) string {
	best, bestRank := "", 0
	for _, m := range msgs {
		rank := slices.Index(roleOrder, m.Role)
		if !trust.Source(m.Source()) {
			rank -= len(roleOrder)
		}
		if best == "" || rank < bestRank {
			best, bestRank = m.Source(), rank
		}
	}
	return best
}

func (j *job) markExtracted(ctx context.Context, c consolidation.ConversationRef, msgs []consolidation.Message) error {
	if err := j.Store.MarkMessages(ctx, c.Key, messageIDs(msgs), consolidation.MessageExtracted, ""); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	j.sum.MessagesExtracted += int64(len(msgs))
	return nil
}

func (j *job) failMessages(ctx context.Context, c consolidation.ConversationRef, msgs []consolidation.Message, why string) error {
	if err := j.Store.MarkMessages(ctx, c.Key, messageIDs(msgs), consolidation.MessageFailed, why); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	j.sum.MessagesFailed += int64(len(msgs))
	j.progress("%d messages marked failed: %s", len(msgs), why)
	return nil
}

func messageIDs(msgs []consolidation.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// redactMessages redacts the messages a call will send, in place (the
// job's own copies).
func (j *job) redactMessages(msgs []consolidation.Message) {
	if j.Redactor == nil {
		return
	}
	for i := range msgs {
		msgs[i].Content, _ = j.redact(msgs[i].Content)
	}
}

func (j *job) redact(text string) (string, bool) {
	out, counts := j.Redactor.Redact(text)
	for k, n := range counts {
		j.redacted[k] += n
	}
	return out, len(counts) > 0
}

func (j *job) progress(format string, a ...any) {
	if j.Progress != nil {
		j.Progress(fmt.Sprintf(format, a...))
	}
}

var _ consolidation.Extractor = (*Extractor)(nil)
