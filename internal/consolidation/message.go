package consolidation

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/google/uuid"

	"github.com/promptops/promptops/internal/memscope"
	"github.com/promptops/promptops/internal/redact"
	"github.com/promptops/promptops/internal/strictjson"
)

// Messages: what was said in a conversation, retained as it was said (no
// model on the request path) for a run to extract facts from later.

// MessageRole is who said a message. It is also the message's source
// for the trust rules: a fact extracted from it carries its role.
type MessageRole string

// The roles of a message.
const (
	RoleUser      MessageRole = "user"
	RoleAssistant MessageRole = "assistant"
	RoleTool      MessageRole = "tool"
	RoleSystem    MessageRole = "system"
)

// MessageStatus is where a message is in extraction.
type MessageStatus string

// The statuses of a message.
const (
	MessagePending   MessageStatus = "pending"
	MessageExtracted MessageStatus = "extracted"
	MessageFailed    MessageStatus = "failed"
)

// Bounds of a message.
const (
	// MaxMessageContentBytes bounds a message's content (a pasted
	// document, a tool's output); a run cuts a message longer than its
	// extraction prompt into parts.
	MaxMessageContentBytes = 3 << 20
	// MaxMessageIDBytes bounds a message's id.
	MaxMessageIDBytes = 128
	// MaxConversationBytes bounds a conversation's id.
	MaxConversationBytes = 256
)

// Message is one message of a conversation in a scope.
type Message struct {
	ID           string
	Scope        string
	Conversation string
	Role         MessageRole
	Content      string
	// At is when it was said, as the application says.
	At time.Time
	// CreatedAt is when the bank stored it.
	CreatedAt     time.Time
	Status        MessageStatus
	FailureReason string
}

// Source is the message's source for the trust rules: its role.
func (m Message) Source() string { return string(m.Role) }

// MessageInput is a message as callers write it, an item of the
// messages of POST .../messages.
type MessageInput struct {
	ID      string `json:"id"`
	Role    string `json:"role"`
	Content string `json:"content"`
	At      string `json:"at"`
}

// ConversationInput is the body of POST .../messages and a line of a
// messages import.
type ConversationInput struct {
	Scope        string           `json:"scope"`
	Conversation string           `json:"conversation"`
	Messages     []jsontext.Value `json:"messages"`
}

// ParseMessages decodes and validates a conversation's messages written as
// one JSON object {"scope"?, "conversation", "messages": [...]}: valid
// UTF-8, known fields only, a conversation of 1 to MaxConversationBytes
// bytes, 1 to most messages, each with a role of MessageRole, a non-blank
// content of at most MaxMessageContentBytes, an id of at most
// MaxMessageIDBytes and an at in RFC 3339. Errors about one field are
// *FieldError naming it ("messages[2].role"); more than most messages is a
// *TooManyMessagesError. Ids are left as given (DerivedMessageID fills the
// missing ones, after redaction).
func ParseMessages(data []byte, most int) ([]Message, error) {
	if !utf8.Valid(data) {
		return nil, errors.New("not valid UTF-8")
	}
	var in ConversationInput
	if err := strictjson.Unmarshal(data, &in); err != nil {
		return nil, messageDecodeError(err, conversationFields)
	}
	if msg := memscope.Problem(in.Scope); msg != "" {
		return nil, &FieldError{Field: "scope", Detail: msg}
	}
	switch {
	case strings.TrimSpace(in.Conversation) == "":
		return nil, &FieldError{Field: "conversation", Detail: "is required", joined: true}
	case len(in.Conversation) > MaxConversationBytes:
		return nil, &FieldError{Field: "conversation", Detail: fmt.Sprintf("%d bytes, at most %d", len(in.Conversation), MaxConversationBytes)}
	case len(in.Messages) == 0:
		return nil, &FieldError{Field: "messages", Detail: "at least one message is required"}
	case len(in.Messages) > most:
		return nil, &TooManyMessagesError{Count: len(in.Messages), Most: most}
	}
	out := make([]Message, len(in.Messages))
	for i, raw := range in.Messages {
		m, err := parseMessage(raw)
		if err != nil {
			var fe *FieldError
			if errors.As(err, &fe) {
				fe.Field = fmt.Sprintf("messages[%d].%s", i, fe.Field)
				return nil, fe
			}
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
		m.Scope, m.Conversation, m.Status = in.Scope, in.Conversation, MessagePending
		out[i] = m
	}
	return out, nil
}

func parseMessage(data []byte) (Message, error) {
	var in MessageInput
	if err := strictjson.Unmarshal(data, &in); err != nil {
		return Message{}, messageDecodeError(err, messageFields)
	}
	m := Message{ID: in.ID, Role: MessageRole(in.Role), Content: in.Content}
	switch m.Role {
	case RoleUser, RoleAssistant, RoleTool, RoleSystem:
	case "":
		return m, &FieldError{Field: "role", Detail: "is required", joined: true}
	default:
		return m, &FieldError{Field: "role", Detail: fmt.Sprintf("%q is not one of user, assistant, tool, system", in.Role)}
	}
	switch {
	case strings.TrimSpace(m.Content) == "":
		return m, &FieldError{Field: "content", Detail: "is required", joined: true}
	case len(m.Content) > MaxMessageContentBytes:
		return m, &FieldError{Field: "content", Detail: fmt.Sprintf("%d bytes, at most %d", len(m.Content), MaxMessageContentBytes)}
	case len(m.ID) > MaxMessageIDBytes:
		return m, &FieldError{Field: "id", Detail: fmt.Sprintf("%d bytes, at most %d", len(m.ID), MaxMessageIDBytes)}
	case in.At == "":
		return m, &FieldError{Field: "at", Detail: "is required", joined: true}
	}
	at, err := time.Parse(time.RFC3339Nano, in.At)
	if err != nil {
		return m, &FieldError{Field: "at", Detail: fmt.Sprintf("%q is not RFC 3339", in.At), joined: true}
	}
	m.At = at.UTC()
	return m, nil
}

const (
	conversationFields = "is not a field of a conversation (scope, conversation, messages)"
	messageFields      = "is not a field of a message (id, role, content, at)"
)

// messageDecodeError words a decoding error of a conversation or a
// message, naming the field.
func messageDecodeError(err error, unknown string) error {
	p := strictjson.Describe(err)
	// The decoding of the whole checks the messages' syntax (a repeated
	// name): such a path names the message and its field.
	prefix, path := "", p.Path
	if i := strings.Index(path, "]."); strings.HasPrefix(path, "messages[") && i > 0 {
		prefix, path = path[:i+2], path[i+2:]
	}
	field, _, _ := strings.Cut(path, "[")
	field, _, _ = strings.Cut(field, ".")
	field = prefix + field
	switch {
	case p.Unknown:
		return &FieldError{Field: field, Detail: unknown, msg: fmt.Sprintf("unknown field %q", strictjson.Name(err))}
	case p.Repeated:
		return &FieldError{Field: field, Detail: "appears twice", joined: true}
	case p.Trailing:
		return errors.New("more than one JSON value")
	case field != "":
		return &FieldError{Field: field, Detail: p.Message}
	}
	return errors.New(p.Message)
}

// TooManyMessagesError is a conversation of more messages than one
// request may carry.
type TooManyMessagesError struct{ Count, Most int }

func (e *TooManyMessagesError) Error() string {
	return fmt.Sprintf("messages: %d items, at most %d per request", e.Count, e.Most)
}

// messageIDSpace is the UUID name space of derived message ids.
var messageIDSpace = uuid.MustParse("3c9e1f7a-0b4d-4a62-8e15-d27f6a9c4b81")

// DerivedMessageID is the id of a message given without one: a UUID
// (version 8) from the SHA-256 of the scope's key, the conversation, the
// role, the time (RFC 3339, UTC) and the content, each length-prefixed, so
// retaining the same conversation again stores nothing new and appending
// to it stores only the new messages.
func DerivedMessageID(bank BankID, m Message) string {
	var b strings.Builder
	for _, s := range []string{string(bank.Scope(m.Scope)), m.Conversation, string(m.Role), m.At.UTC().Format(time.RFC3339Nano), m.Content} {
		fmt.Fprintf(&b, "%d:%s\n", len(s), s)
	}
	return uuid.NewHash(sha256.New(), messageIDSpace, []byte(b.String()), 8).String()
}

// MessageConflictError is a message whose id its scope holds with another
// conversation, role, time or content.
type MessageConflictError struct{ ID string }

func (e *MessageConflictError) Error() string {
	return fmt.Sprintf("message %q is already in the bank with another conversation, role, time or content", e.ID)
}

// RedactMessage replaces what r detects in m's content with
// [REDACTED:<kind>], as RedactFact does a fact's text; under Reject a
// secret is a *FactSecretError naming the field content.
func RedactMessage(r *redact.Redactor, m *Message, counts redact.Counts) error {
	if r == nil {
		return nil
	}
	if err := r.Check(m.Content); err != nil {
		return factSecret("content", err)
	}
	m.Content = redactInto(r, m.Content, counts)
	return nil
}

// ConversationRef names a conversation: its scope's key and its name.
type ConversationRef struct {
	Key          ScopeKey
	Conversation string
}
