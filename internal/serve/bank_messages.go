package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/promptops/promptops/internal/consolidation"
	"github.com/promptops/promptops/internal/redact"
)

// Messages of a served bank: POST /v1/banks/{namespace}/{name}/messages
// stores what was said in a conversation at once, for the bank's
// consolidation Job to extract facts from (no model on the request path).

// MessageStore is what POST .../messages needs of a bank's store.
type MessageStore interface {
	// RetainMessages stores messages (each with an id) in one
	// transaction; a *consolidation.MessageConflictError stores nothing.
	RetainMessages(ctx context.Context, bank consolidation.BankID, msgs []consolidation.Message) (stored, unchanged int, err error)
}

// MessagesResponse is the answer to POST .../messages.
type MessagesResponse struct {
	// Stored counts the messages new to the bank.
	Stored int `json:"stored"`
	// Unchanged counts the messages the bank had already: the same id
	// with the same conversation, role, time and content.
	Unchanged int `json:"unchanged"`
	// IDs are the messages' ids in the order posted, derived ones
	// included.
	IDs []string `json:"ids"`
	// Redacted counts what was replaced by [REDACTED:<kind>] in the
	// messages' contents, by kind; absent when nothing was.
	Redacted redact.Counts `json:"redacted,omitempty"`
}

// retainMessages answers POST .../messages: the messages stored in one
// transaction, each redacted as a fact's text is before its id is
// derived, each with its role kept as its source.
func (bk *servedBank) retainMessages(w http.ResponseWriter, r *http.Request) error {
	s := bk.s
	if bk.messageStore == nil {
		return problem(http.StatusNotImplemented, CodeNotImplemented, fmt.Sprintf("the store of bank %s does not keep messages", bk.id()))
	}
	body, release, err := s.body(w, r, s.bank.limits.MaxRetainBytes, "--max-retain-bytes", "; send fewer messages per request")
	defer release()
	if err != nil {
		return err
	}
	bad := func(msg string) error { return problem(http.StatusBadRequest, CodeInvalidMessage, msg) }
	msgs, err := consolidation.ParseMessages(body, s.bank.limits.MaxMessagesPerRequest)
	if err != nil {
		var fe *consolidation.FieldError
		var tooMany *consolidation.TooManyMessagesError
		switch {
		case errors.As(err, &tooMany):
			return problem(http.StatusRequestEntityTooLarge, CodeTooManyMessages, err.Error()+" (--max-messages-per-request)")
		case errors.As(err, &fe):
			return bad(fe.Field + ": " + fe.Detail)
		}
		return problem(http.StatusBadRequest, CodeMalformed, fmt.Sprintf(`the body must be one JSON object {"scope"?, "conversation", "messages": [...]}: %v`, err))
	}
	bankID := bk.id()
	redacted := redact.Counts{}
	ids := make([]string, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		// Redacted before its id is derived: posting the same
		// conversation again finds the same messages.
		if err := consolidation.RedactMessage(bk.Redactor, m, redacted); err != nil {
			var se *consolidation.FactSecretError
			if !errors.As(err, &se) {
				return err
			}
			return problem(http.StatusUnprocessableEntity, CodeSecretInMessage, fmt.Sprintf(
				"messages[%d].%s%s holds a secret (%s) and bank %s refuses secrets (secrets: Reject); nothing of the request was stored",
				i, se.Field, idNote(m.ID), strings.Join(se.Kinds, ", "), bankID))
		}
		if m.ID == "" {
			m.ID = consolidation.DerivedMessageID(bankID, *m)
		}
		ids[i] = m.ID
	}
	stored, unchanged, err := bk.messageStore.RetainMessages(r.Context(), bankID, msgs)
	if err != nil {
		var conflict *consolidation.MessageConflictError
		if errors.As(err, &conflict) {
			return problem(http.StatusConflict, CodeMessageConflict, fmt.Sprintf("message %q is already in bank %s with another conversation, role, time or content; nothing of the request was stored", conflict.ID, bankID))
		}
		se := storeFailed(err, bk.Bank, "Storing messages failed", "the store did not take the messages; nothing of the request was stored")
		se.note = "; nothing of it was stored"
		return se
	}
	redacted = bk.countRetained(s.bank.messages, stored, unchanged, redacted)
	writeJSON(w, http.StatusOK, &MessagesResponse{Stored: stored, Unchanged: unchanged, IDs: ids, Redacted: redacted})
	return nil
}
