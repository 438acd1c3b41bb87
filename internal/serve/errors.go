package serve

import (
	"context"
	"errors"
	"net/http"

	"github.com/go-logr/logr"

	"github.com/promptops/promptops/plan"
)

// Code is the stable code of an error answer, {"error": {"code", "message"}}.
// Every code is defined here and nowhere else; TestErrorCodesMatchOpenAPI
// holds openapi.json's enum of codes to the constants of this file.
type Code string

// Codes of the prompt API (/v1/assemble, /v1/templates) and of every
// endpoint.
const (
	CodeNotReady       Code = "NotReady"
	CodeMalformed      Code = "MalformedRequest"
	CodeInvalidRuntime Code = "InvalidRuntimeValue"
	CodeUnknownSection Code = "UnknownSection"
	// CodeSpecialToken: a runtime value holds a special-token string of
	// the template's encoding, and its specialTokens is Reject (422).
	CodeSpecialToken     Code = "SpecialToken"
	CodeTemplateNotFound Code = "TemplateNotFound"
	CodeIntentNotFound   Code = "IntentNotFound"
	CodeTooLarge         Code = "RequestTooLarge"
	CodeBusy             Code = "Busy"
	CodeTimeout          Code = "RequestTimeout"
	CodeMethodNotAllowed Code = "MethodNotAllowed"
	CodeNotFound         Code = "NotFound"
	// CodeInternal is a failure of the server itself (500), logged.
	CodeInternal Code = "Internal"
)

// Codes of --auth=kubernetes.
const (
	CodeUnauthorized Code = "Unauthorized"
	CodeForbidden    Code = "Forbidden"
)

// Codes of the bank API.
const (
	CodeBankNotFound     Code = "BankNotFound"
	CodeInvalidFact      Code = "InvalidFact"
	CodeTooManyFacts     Code = "TooManyFacts"
	CodeFactConflict     Code = "FactConflict"
	CodeInvalidRecall    Code = "InvalidRecall"
	CodeStoreUnavailable Code = "StoreUnavailable"
	CodeInvalidScope     Code = "InvalidScope"
	CodeFactNotFound     Code = "FactNotFound"
	// CodeSecretInFact: a fact holds a secret and the bank's secrets
	// policy is Reject (422); nothing of the request was stored.
	CodeSecretInFact    Code = "SecretInFact"
	CodeInvalidMessage  Code = "InvalidMessage"
	CodeTooManyMessages Code = "TooManyMessages"
	CodeMessageConflict Code = "MessageConflict"
	// CodeSecretInMessage: a message holds a secret and the bank's
	// secrets policy is Reject (422); nothing of the request was stored.
	CodeSecretInMessage Code = "SecretInMessage"
	// CodeNotImplemented: the bank's store cannot erase, export or keep
	// messages (501).
	CodeNotImplemented Code = "NotImplemented"
)

// Codes of a memory section's "error" in an assemble answer, besides
// plan's (NoQuery, NoRecall, TimedOut, RecallFailed) and the bank API's
// codes above, which a recall passes on.
const (
	CodeNotServed       plan.MemoryCode = "NotServed"
	CodeRecallTooLarge  plan.MemoryCode = "RecallTooLarge"
	CodeRecallMalformed plan.MemoryCode = "RecallMalformed"
	CodeRecallHTTP      plan.MemoryCode = "RecallHTTPError"
	// CodeTokenUnreadable: the token serve sends to the bank could not be
	// read from its file.
	CodeTokenUnreadable plan.MemoryCode = "TokenUnreadable"
	// CodeCAUnreadable: the CA file serve verifies the bank's certificate
	// with (--memory-ca-file) could not be read or holds no certificate.
	CodeCAUnreadable plan.MemoryCode = "CAUnreadable"
)

// APIError is an error answer: the handler has decided its status, code
// and message, and the adapter writes it as it is.
type APIError struct {
	Status  int
	Code    Code
	Message string
}

func (e *APIError) Error() string { return string(e.Code) + ": " + e.Message }

// problem is the answer status, code, msg.
func problem(status int, code Code, msg string) *APIError {
	return &APIError{Status: status, Code: code, Message: msg}
}

// timeoutMessage is the message of a request whose context is done.
const timeoutMessage = "the request took longer than the server's request timeout"

// storeError is a bank store's failure: 503 StoreUnavailable with msg, or
// 503 RequestTimeout (with note added) when the request's context is done.
// It is logged as op with the bank, never with a scope or an id.
type storeError struct {
	err  error
	bank Key
	op   string
	msg  string
	note string
}

func (e *storeError) Error() string { return e.op + ": " + e.err.Error() }
func (e *storeError) Unwrap() error { return e.err }

// storeFailed is the answer to a failure of bk's store: op names it in
// the log, msg in the answer.
func storeFailed(err error, bk *Bank, op, msg string) *storeError {
	return &storeError{err: err, bank: Key{bk.Namespace, bk.Name}, op: op, msg: msg}
}

// internalError is a failure of the server's own: logged as op with kv,
// answered 500 Internal with msg, or 503 RequestTimeout when the request's
// context is done.
type internalError struct {
	err error
	op  string
	kv  []any
	msg string
}

func (e *internalError) Error() string { return e.op + ": " + e.err.Error() }
func (e *internalError) Unwrap() error { return e.err }

// handlerFunc is a handler that returns its error answer instead of
// writing it.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// handle adapts h to an http.Handler: the one place an error answer is
// written (as k8s.io/apiserver writes a StatusError). A handler that has
// begun its answer returns nil or panics with http.ErrAbortHandler.
func (s *Server) handle(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			e := answerOf(r.Context(), s.log, err)
			writeError(w, e.Status, e.Code, e.Message)
		}
	})
}

// answerOf maps an error to its answer: an *APIError as it is; any other
// error of a request whose context is done (the deadline passed or the
// client went away: nobody may read this) 503 RequestTimeout; a store's
// failure 503 StoreUnavailable; anything else 500 Internal. The last two
// are logged.
func answerOf(ctx context.Context, log logr.Logger, err error) *APIError {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae
	}
	var se *storeError
	isStore := errors.As(err, &se)
	if ctx.Err() != nil {
		msg := timeoutMessage
		if isStore {
			msg += se.note
		}
		return problem(http.StatusServiceUnavailable, CodeTimeout, msg)
	}
	if isStore {
		log.Error(se.err, se.op, "bank", se.bank)
		return problem(http.StatusServiceUnavailable, CodeStoreUnavailable, se.msg)
	}
	var ie *internalError
	if errors.As(err, &ie) {
		log.Error(ie.err, ie.op, ie.kv...)
		return problem(http.StatusInternalServerError, CodeInternal, ie.msg)
	}
	log.Error(err, "Request failed")
	return problem(http.StatusInternalServerError, CodeInternal, "the request failed")
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// writeError writes the JSON error body {"error": {"code", "message"}};
// only handle and writeJSON call it.
func writeError(w http.ResponseWriter, status int, code Code, msg string) {
	var b errorBody
	b.Error.Code, b.Error.Message = string(code), msg
	writeJSON(w, status, &b)
}
