// Package strictjson is the one way promptops reads JSON it is sent:
// request bodies, fact lines and model answers. It is json/v2
// (github.com/go-json-experiment/json, the encoding/json/v2 the Go team is
// bringing into the standard library), which in one pass refuses invalid
// UTF-8, a repeated member name and anything after the value; Unmarshal
// also refuses a member that is no field of the Go type (names match
// exactly). Describe words its errors for the one who sent the JSON: where,
// and what is wrong there, quoting no more of the input than member names.
package strictjson

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// ErrNotObject is input that is valid JSON but not an object (null above
// all, which would decode as an empty one).
var ErrNotObject = errors.New("not a JSON object")

// Unmarshal decodes data, one JSON object of v's fields and nothing else,
// into v.
func Unmarshal(data []byte, v any) error {
	if b := bytes.TrimLeft(data, " \t\r\n"); len(b) == 0 || b[0] != '{' {
		return ErrNotObject
	}
	return json.Unmarshal(data, v, json.RejectUnknownMembers(true))
}

// Lenient decodes data, one JSON value, into v, skipping members that are
// no field of v (a server's answer carries fields of its own); a repeated
// name, invalid UTF-8 and trailing data are still refused.
func Lenient(data []byte, v any) error { return json.Unmarshal(data, v) }

// Problem is a decoding error taken apart.
type Problem struct {
	// Path is where: "facts[0].text"; "" for the value itself.
	Path string
	// Unknown is set when the member at Path is no field; Repeated when it
	// appears twice; Trailing when more follows the value.
	Unknown, Repeated, Trailing bool
	// Message says what is wrong, without the path.
	Message string
}

// String is "path: message", or the message alone.
func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// Describe takes a decoding error of this package apart.
func Describe(err error) Problem {
	var syn *jsontext.SyntacticError
	var sem *json.SemanticError
	switch {
	case errors.Is(err, ErrNotObject):
		return Problem{Message: err.Error()}
	case errors.Is(err, jsontext.ErrDuplicateName) && errors.As(err, &syn):
		return Problem{Path: path(syn.JSONPointer), Repeated: true, Message: "appears twice"}
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return Problem{Message: "the JSON ends early"}
	case errors.As(err, &syn) && strings.Contains(syn.Err.Error(), "after top-level value"):
		return Problem{Trailing: true, Message: "more than one JSON value"}
	case errors.As(err, &syn) && strings.Contains(syn.Err.Error(), "UTF-8"):
		return Problem{Message: fmt.Sprintf("invalid UTF-8 at byte %d", syn.ByteOffset)}
	case errors.As(err, &syn):
		return Problem{Message: fmt.Sprintf("invalid JSON at byte %d", syn.ByteOffset)}
	case errors.Is(err, json.ErrUnknownName) && errors.As(err, &sem):
		return Problem{Path: path(sem.JSONPointer), Unknown: true, Message: "unknown field"}
	case errors.As(err, &sem) && sem.Err != nil && !errors.Is(sem.Err, strconv.ErrSyntax) && !errors.Is(sem.Err, strconv.ErrRange):
		// A type's own UnmarshalJSONFrom said what is wrong.
		return Problem{Path: path(sem.JSONPointer), Message: sem.Err.Error()}
	case errors.As(err, &sem):
		return Problem{Path: path(sem.JSONPointer), Message: fmt.Sprintf("a JSON %s where %s is wanted", kindName(sem.JSONKind), goKind(sem.GoType))}
	}
	return Problem{Message: "invalid JSON"}
}

// Name is the last member name of the problem's path, as sent.
func Name(err error) string {
	var syn *jsontext.SyntacticError
	var sem *json.SemanticError
	switch {
	case errors.As(err, &syn):
		return syn.JSONPointer.LastToken()
	case errors.As(err, &sem):
		return sem.JSONPointer.LastToken()
	}
	return ""
}

// path is a JSON pointer as the messages write it: /facts/0/text is
// facts[0].text, a name quoted when it is not a plain word.
func path(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		plain := tok != "" && strings.IndexFunc(tok, func(r rune) bool {
			return !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
		}) < 0
		switch {
		case tok != "" && strings.Trim(tok, "0123456789") == "" && b.Len() > 0:
			b.WriteString("[" + tok + "]")
			continue
		case b.Len() > 0:
			b.WriteByte('.')
		}
		if plain {
			b.WriteString(tok)
		} else {
			fmt.Fprintf(&b, "%q", tok)
		}
	}
	return b.String()
}

func kindName(k jsontext.Kind) string {
	switch k {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case '0':
		return "number"
	case 't':
		return "true"
	case 'f':
		return "false"
	case 'n':
		return "null"
	}
	return "value"
}

// goKind says what JSON a Go type takes.
func goKind(t reflect.Type) string {
	if t == nil {
		return "another value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "another value"
}
