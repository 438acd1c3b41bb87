package serve

import (
	stdjson "encoding/json"
	"fmt"
	"net/http"

	"github.com/promptops/promptops/internal/strictjson"
)

// jsonProblem words a decoding error for the client.
func jsonProblem(err error) string {
	p := strictjson.Describe(err)
	switch {
	case p.Unknown:
		return "unknown field " + p.Path
	case p.Repeated:
		return "member " + p.Path + " appears twice"
	}
	return p.String()
}

// writeJSON writes v as the answer, with status. Answers are written with
// encoding/json, whose omitempty and nil slices the OpenAPI document
// describes.
func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := stdjson.Marshal(v)
	if err != nil {
		status, data = http.StatusInternalServerError, []byte(`{"error":{"code":"Internal","message":"encoding the answer failed"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(data)+1))
	w.WriteHeader(status)
	w.Write(append(data, '\n'))
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// writeError writes the JSON error body {"error": {"code", "message"}}.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	var b errorBody
	b.Error.Code, b.Error.Message = code, msg
	writeJSON(w, status, &b)
}
