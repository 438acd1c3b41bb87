package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/redact"
)

func init() {
	register("messages", "import conversations' messages into a bank, for its runs to extract facts from (import)", runMessages)
}

// Bounds of messages import.
const (
	// MaxMessageLine is the longest line, without its line ending, that
	// messages import reads: what one POST .../messages may carry by
	// default (serve's --max-retain-bytes).
	MaxMessageLine = 4 << 20
	// MaxMessagesPerLine bounds the messages of one line (one
	// conversation, or a part of one).
	MaxMessagesPerLine = 10000
	// messagesChunk bounds the messages held and written at once: a
	// chunk is one transaction of the store.
	messagesChunk = 1000
)

func runMessages(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || isHelp(args[0]) {
		return groupUsage(args, stdout, stderr, "Usage: promptops messages import --bank NS/NAME FILE.jsonl|-\n\n"+storeNote+"\nRun 'promptops messages <subcommand> -h' for its flags.")
	}
	if args[0] == "import" {
		return runMessagesImport(args[1:], stdin, stdout, stderr)
	}
	fmt.Fprintf(stderr, "promptops messages: unknown subcommand %q (import)\n", args[0])
	return ExitInvalid
}

// readConversations reads JSONL a line at a time (eachJSONLine: a
// UTF-8 byte order mark, CRLF line endings and blank lines accepted), and
// gives fn each line's messages, parsed by consolidation.ParseMessages
// with at most MaxMessagesPerLine. It holds one line at a time. An error
// names the line and, when it is about one, the field.
func readConversations(r io.Reader, fn func(line int, msgs []consolidation.Message) error) error {
	return eachJSONLine(r, MaxMessageLine, func(n int, line []byte) error {
		msgs, err := consolidation.ParseMessages(line, MaxMessagesPerLine)
		if err != nil {
			var fe *consolidation.FieldError
			var tooMany *consolidation.TooManyMessagesError
			switch {
			case errors.As(err, &tooMany):
				return lineErrorf(n, "messages: %d items, at most %d per line; split the conversation over several lines", tooMany.Count, tooMany.Most)
			case errors.As(err, &fe):
				return lineErrorf(n, "%s: %s", fe.Field, fe.Detail)
			}
			return lineErrorf(n, "%v", err)
		}
		return fn(n, msgs)
	})
}

// messagesImport stores the messages of an import in transactions of
// whole lines, at most messagesChunk messages each unless one line holds
// more, remembering each pending message's line to name it in a conflict.
type messagesImport struct {
	ctx    context.Context
	store  messageStore
	bank   consolidation.BankID
	red    *redact.Redactor
	counts redact.Counts

	pending []consolidation.Message
	lines   []int
	// stored and unchanged count what the transactions so far stored.
	stored, unchanged int
}

// messageStore is what messages import needs of a store.
type messageStore interface {
	RetainMessages(ctx context.Context, bank consolidation.BankID, msgs []consolidation.Message) (stored, unchanged int, err error)
}

// flushError is a transaction of the import that failed: a conflict
// (the input's fault, naming the line) or the store's failure.
type flushError struct {
	err   error
	store bool
}

func (e *flushError) Error() string { return e.err.Error() }
func (e *flushError) Unwrap() error { return e.err }

// add redacts a line's messages and derives the ids of those without one
// (after redaction, as POST .../messages does), then adds them to the
// pending ones, writing those first when the line would take them over
// messagesChunk. Nothing of a line that fails is pending.
func (im *messagesImport) add(line int, msgs []consolidation.Message) error {
	for i := range msgs {
		m := &msgs[i]
		if err := consolidation.RedactMessage(im.red, m, im.counts); err != nil {
			var se *consolidation.FactSecretError
			if errors.As(err, &se) {
				return lineErrorf(line, "messages[%d].%s holds a secret (%s) and --redact-secrets is Reject", i, se.Field, strings.Join(se.Kinds, ", "))
			}
			return lineErrorf(line, "messages[%d]: %v", i, err)
		}
		if m.ID == "" {
			m.ID = consolidation.DerivedMessageID(im.bank, *m)
		}
	}
	if len(im.pending)+len(msgs) > messagesChunk {
		if err := im.flush(); err != nil {
			return err
		}
	}
	for range msgs {
		im.lines = append(im.lines, line)
	}
	im.pending = append(im.pending, msgs...)
	if len(im.pending) >= messagesChunk {
		return im.flush()
	}
	return nil
}

// flush writes the pending messages in one transaction.
func (im *messagesImport) flush() error {
	if len(im.pending) == 0 {
		return nil
	}
	stored, unchanged, err := im.store.RetainMessages(im.ctx, im.bank, im.pending)
	if err != nil {
		var conflict *consolidation.MessageConflictError
		if !errors.As(err, &conflict) {
			return &flushError{err: err, store: true}
		}
		for i, m := range im.pending {
			if m.ID == conflict.ID {
				return &flushError{err: fmt.Errorf("line %d: message %q is already in bank %s with another conversation, role, time or content", im.lines[i], m.ID, im.bank)}
			}
		}
		return &flushError{err: err}
	}
	im.stored += stored
	im.unchanged += unchanged
	im.pending, im.lines = im.pending[:0], im.lines[:0]
	return nil
}

// sofar says what an import that stopped with err stored: the lines
// before the first of a transaction that failed (still pending), or else
// before the bad line.
func (im *messagesImport) sofar(err error) string {
	if im.stored+im.unchanged == 0 {
		return "nothing imported"
	}
	next := 0
	var le *lineError
	switch {
	case len(im.lines) > 0:
		next = im.lines[0]
	case errors.As(err, &le):
		next = le.line
	}
	return fmt.Sprintf("the lines before line %d are stored (%d new messages, %d unchanged), none from it on", next, im.stored, im.unchanged)
}

// lineError is what is wrong with one line.
type lineError struct {
	line int
	msg  string
}

func (e *lineError) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }

func lineErrorf(line int, format string, a ...any) error {
	return &lineError{line: line, msg: fmt.Sprintf(format, a...)}
}

func runMessagesImport(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("messages import", stdout, stderr)
	var sf storeFlags
	sf.register(fs)
	var rf redactionFlags
	rf.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: promptops messages import --bank NS/NAME FILE.jsonl|-

One conversation per line, the body of POST /v1/banks/NS/NAME/messages:
  {"scope"?, "conversation", "messages": [{"id"?, "role", "content", "at"}, ...]}
role is user, assistant, tool or system (kept as the source of the facts a run
extracts from the message); at is RFC 3339; content at most %d KiB; at most
%d messages and %d MiB a line. UTF-8, with or without a byte order mark; LF or
CRLF line endings; blank lines are skipped. A conversation may span several
lines. A message without an id gets one derived from the bank, its scope, the
conversation, its role, time and content (after redaction), so importing a file
again stores nothing new and appending messages to a conversation stores only
those. Secrets (and the --redact-personal-data kinds) are replaced by
[REDACTED:<kind>] before a message is stored and counted by kind.
The file is read a line at a time and stored in transactions of whole lines,
up to %d messages each. A bad line (its number and field named), a secret under
--redact-secrets=Reject, or an id the bank holds with other content stops the
import with exit code 2: the lines before it are stored, nothing from it on;
import the corrected file again.
`, consolidation.MaxMessageContentBytes>>10, MaxMessagesPerLine, MaxMessageLine>>20, messagesChunk)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	r, red, closeInput, code, ok := importInput("messages import", fs, &sf, &rf, stdin, stderr)
	if !ok {
		return code
	}
	defer closeInput()
	name := fs.Arg(0)
	ctx := context.Background()
	store, err := sf.open(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "promptops messages import:", err)
		return ExitFailed
	}
	defer store.Close()
	im := &messagesImport{ctx: ctx, store: store, bank: sf.id(), red: red, counts: redact.Counts{}}
	err = readConversations(r, im.add)
	// The lines before a bad one are valid: stored, unless what failed
	// was a transaction (whose lines stay unstored).
	var fe *flushError
	if !errors.As(err, &fe) {
		if ferr := im.flush(); ferr != nil {
			err = ferr
		}
	}
	switch {
	case errors.As(err, &fe) && fe.store:
		fmt.Fprintf(stderr, "promptops messages import: %v; %s\n", err, im.sofar(err))
		return ExitFailed
	case err != nil:
		fmt.Fprintf(stderr, "promptops messages import: %s: %v; %s\n", name, err, im.sofar(err))
		return ExitInvalid
	}
	fmt.Fprintf(stdout, "stored %d messages into %s (%d unchanged)\n", im.stored, sf.bank, im.unchanged)
	if len(im.counts) > 0 {
		fmt.Fprintf(stdout, "redacted %s\n", formatRedacted(im.counts))
	}
	return ExitOK
}
