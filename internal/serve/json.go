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
		// An error body always encodes: this does not come back here.
		writeError(w, http.StatusInternalServerError, CodeInternal, "encoding the answer failed")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(data)+1))
	w.WriteHeader(status)
	w.Write(append(data, '\n'))
}
