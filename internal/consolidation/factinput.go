package consolidation

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/promptops/promptops/internal/memscope"
	"github.com/promptops/promptops/internal/strictjson"
)

// FactInput is a fact as callers write it: a line of `facts import` or an
// item of the bank API's POST .../facts.
type FactInput struct {
	ID            string   `json:"id"`
	Scope         string   `json:"scope"`
	Text          string   `json:"text"`
	Entities      []string `json:"entities"`
	OccurredStart string   `json:"occurredStart"`
	OccurredEnd   string   `json:"occurredEnd"`
	MentionedAt   string   `json:"mentionedAt"`
	Tags          []string `json:"tags"`
	Source        string   `json:"source"`
}

// FieldError is a fact that does not validate, naming the field at fault.
type FieldError struct {
	// Field is the JSON name of the field.
	Field string
	// Detail says what is wrong with it, without the field's name.
	Detail string
	// msg, when set, is the whole message.
	msg string
	// joined writes "field detail" rather than "field: detail".
	joined bool
}

func (e *FieldError) Error() string {
	switch {
	case e.msg != "":
		return e.msg
	case e.joined:
		return e.Field + " " + e.Detail
	}
	return e.Field + ": " + e.Detail
}

// ParseFact decodes and validates one fact written as a JSON object: valid
// UTF-8, known fields only, a non-blank text, a source that is a source's
// name (SourceProblem; SourceUnspecified when left out), times as RFC 3339 or
// YYYY-MM-DD with occurredEnd not before occurredStart. Errors about one
// field are *FieldError. The names of before the API was camelCase
// (occurred_start, occurred_end, mentioned_at) are refused, naming the new.
func ParseFact(data []byte) (Fact, error) {
	if !utf8.Valid(data) {
		return Fact{}, errors.New("not valid UTF-8")
	}
	var fl FactInput
	if err := strictjson.Unmarshal(data, &fl); err != nil {
		return Fact{}, factDecodeError(err)
	}
	if strings.TrimSpace(fl.Text) == "" {
		return Fact{}, &FieldError{Field: "text", Detail: "is required", joined: true}
	}
	if msg := memscope.Problem(fl.Scope); msg != "" {
		return Fact{}, &FieldError{Field: "scope", Detail: msg}
	}
	f := Fact{ID: fl.ID, Scope: fl.Scope, Text: fl.Text, Entities: fl.Entities, Tags: fl.Tags, Source: SourceUnspecified}
	if fl.Source != "" {
		if msg := SourceProblem(fl.Source); msg != "" {
			return Fact{}, &FieldError{Field: "source", Detail: msg}
		}
		f.Source = fl.Source
	}
	var err error
	if f.OccurredStart, err = parseFactTime("occurredStart", fl.OccurredStart); err != nil {
		return f, err
	}
	if f.OccurredEnd, err = parseFactTime("occurredEnd", fl.OccurredEnd); err != nil {
		return f, err
	}
	if f.MentionedAt, err = parseFactTime("mentionedAt", fl.MentionedAt); err != nil {
		return f, err
	}
	if f.OccurredStart != nil && f.OccurredEnd != nil && f.OccurredEnd.Before(*f.OccurredStart) {
		return f, &FieldError{Field: "occurredEnd", Detail: fmt.Sprintf("%q is before occurredStart %q", fl.OccurredEnd, fl.OccurredStart), joined: true}
	}
	return f, nil
}

// factDecodeError words a decoding error of a fact, naming the field.
func factDecodeError(err error) error {
	p := strictjson.Describe(err)
	field, _, _ := strings.Cut(p.Path, "[")
	field, _, _ = strings.Cut(field, ".")
	switch {
	case p.Unknown:
		if now, renamed := renamedFactFields[field]; renamed {
			return &FieldError{Field: field, Detail: fmt.Sprintf("a field renamed %s (the API's fields are camelCase)", now)}
		}
		return &FieldError{Field: field, Detail: "is not a field of a fact (id, scope, text, source, entities, tags, occurredStart, occurredEnd, mentionedAt)",
			msg: fmt.Sprintf("unknown field %q", strictjson.Name(err))}
	case p.Repeated:
		return &FieldError{Field: field, Detail: "appears twice", joined: true}
	case p.Trailing:
		return errors.New("more than one JSON value on the line (one fact per line)")
	case field != "":
		return &FieldError{Field: field, Detail: p.Message}
	}
	return errors.New(p.Message)
}

// renamedFactFields maps the fields of before the API was camelCase to
// their names now.
var renamedFactFields = map[string]string{"occurred_start": "occurredStart", "occurred_end": "occurredEnd", "mentioned_at": "mentionedAt"}

func parseFactTime(field, s string) (*time.Time, error) {
	if s == "" {
		return nil, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return &t, nil
		}
	}
	return nil, &FieldError{Field: field, Detail: fmt.Sprintf("%q is neither RFC 3339 nor YYYY-MM-DD", s), joined: true}
}

// factIDSpace is the UUID name space of derived fact ids.
var factIDSpace = uuid.MustParse("7b0f3c2e-5d1a-4e8b-9c6f-2a4d8e1b3f50")

// DerivedFactID is the id of a fact given without one: a UUID (version 8)
// from the SHA-256 of the fact's scope's key (BankID.Scope), the text and the three
// times (RFC 3339, UTC; empty when unset), so importing or posting the same
// fact again adds nothing, and two users who say the same sentence keep a
// fact each. Entities and tags do not count: the same statement at the
// same times is one fact. A fact's source counts when it names one: what
// a user says and what the CRM says are two facts, of two trusts. A fact
// of the shared scope, and one without a source, keeps the id it had
// before scopes and sources existed.
func DerivedFactID(bank BankID, f Fact) string {
	var b strings.Builder
	parts := []string{string(bank.Scope(f.Scope)), f.Text, timeKey(f.OccurredStart), timeKey(f.OccurredEnd), timeKey(f.MentionedAt)}
	if src := SourceOf(f); src != SourceUnspecified {
		parts = append(parts, "source="+src)
	}
	for _, s := range parts {
		// A length prefix keeps ("ab", "c") apart from ("a", "bc").
		fmt.Fprintf(&b, "%d:%s\n", len(s), s)
	}
	return uuid.NewHash(sha256.New(), factIDSpace, []byte(b.String()), 8).String()
}

func timeKey(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// FactConflictError is a fact whose id the bank holds with other text or
// another source.
type FactConflictError struct{ ID string }

func (e *FactConflictError) Error() string {
	return fmt.Sprintf("fact %q is already in the bank with other text or another source", e.ID)
}
