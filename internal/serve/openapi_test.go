package serve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"

	"github.com/promptops/promptops/plan"
)

// apiValidator checks requests and answers against openapi.json with
// libopenapi-validator (OpenAPI 3.1, JSON Schema 2020-12).
var apiValidator = sync.OnceValues(func() (validator.Validator, error) {
	doc, err := libopenapi.NewDocument(openAPI)
	if err != nil {
		return nil, err
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		return nil, errs[0]
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		return nil, verrs[0]
	}
	return v, nil
})

// newServer is httptest.NewServer of the handler, with every answer, and
// every request the server accepted (2xx), checked against openapi.json:
// a test fails when serve stops matching its document. Bodies are teed,
// not buffered, so streaming and slow bodies behave as without it.
func newServer(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	v, err := apiValidator()
	if err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	return httptest.NewServer(validated(t, v, h))
}

// exportedItem is openapi.json's ExportedItem, the schema of each line of
// a scope's export.
var exportedItem = sync.OnceValues(func() (*base.Schema, error) {
	doc, err := libopenapi.NewDocument(openAPI)
	if err != nil {
		return nil, err
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		return nil, err
	}
	proxy := model.Model.Components.Schemas.GetOrZero("ExportedItem")
	if proxy == nil {
		return nil, errors.New("no schema ExportedItem")
	}
	return proxy.Schema(), nil
})

func validated(t testing.TB, v validator.Validator, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in bytes.Buffer
		if r.Body != nil {
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.TeeReader(r.Body, &in), r.Body}
		}
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		// An aborted answer (a panic, http.ErrAbortHandler) is not checked.
		h.ServeHTTP(rec, r)
		check(t, v, r, &in, rec)
	})
}

func check(t testing.TB, v validator.Validator, r *http.Request, in *bytes.Buffer, rec *recorder) {
	// Paths and methods the API does not have are answered 404 and 405 by
	// design.
	if (rec.status == http.StatusNotFound && strings.Contains(rec.body.String(), `"NotFound"`)) || rec.status == http.StatusMethodNotAllowed {
		return
	}
	req := r.Clone(r.Context())
	req.Body = io.NopCloser(bytes.NewReader(in.Bytes()))
	// serve reads every body as JSON, whatever its Content-Type says.
	if req.Header.Get("Content-Type") == "" && in.Len() > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	// net/http sends no body in answer to HEAD.
	if r.Method == http.MethodHead {
		rec.body.Reset()
	}
	resp := &http.Response{StatusCode: rec.status, Header: rec.Header().Clone(), Body: io.NopCloser(bytes.NewReader(rec.body.Bytes())), Request: req}
	if rec.status/100 == 2 {
		if ok, errs := v.ValidateHttpRequest(req); !ok {
			t.Errorf("openapi.json: %s %s (answered %d) does not match: %s", r.Method, r.URL.Path, rec.status, describeErrs(errs))
		}
		req.Body = io.NopCloser(bytes.NewReader(in.Bytes()))
	}
	export := rec.status == http.StatusOK && strings.HasSuffix(r.URL.Path, "/export")
	if ok, errs := v.ValidateHttpResponse(req, resp); !ok && !export {
		t.Errorf("openapi.json: the answer %d to %s %s does not match: %s\n%.500s", rec.status, r.Method, r.URL.Path, describeErrs(errs), rec.body.String())
	}
	// An export is JSON lines, which no JSON schema reads whole: each one
	// an ExportedItem, a fact or an observation.
	if export {
		schema, err := exportedItem()
		if err != nil {
			t.Fatalf("openapi.json: %v", err)
		}
		lines := schema_validation.NewSchemaValidator()
		sc := bufio.NewScanner(bytes.NewReader(rec.body.Bytes()))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if ok, errs := lines.ValidateSchemaBytes(schema, sc.Bytes()); !ok {
				t.Errorf("openapi.json: an export line is no ExportedItem: %s\n%.200s", describeErrs(errs), sc.Text())
			}
		}
	}
}

func describeErrs[E interface{ Error() string }](errs []E) string {
	var b strings.Builder
	for i, e := range errs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// recorder passes an answer through and keeps a copy.
type recorder struct {
	http.ResponseWriter
	status int
	wrote  bool
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	r.wrote = true
	r.body.Write(p)
	return r.ResponseWriter.Write(p)
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(r.ResponseWriter).Hijack()
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// TestOpenAPIDocument: the document is served as it is in the repository,
// and is a valid OpenAPI 3.1 document.
func TestOpenAPIDocument(t *testing.T) {
	s := New(Options{Log: logr.Discard()})
	ts := newServer(t, s.Handler())
	defer ts.Close()
	resp, err := http.Get(ts.URL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, openAPI) || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /openapi.json: %d %s, %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
	}
	var doc struct {
		OpenAPI string `json:"openapi"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q: %v", doc.OpenAPI, err)
	}
}

// TestHTTPAPIPage: docs/http-api.md names every path of openapi.json and
// every error code the server answers, so that the page does not go
// stale beside the code.
func TestHTTPAPIPage(t *testing.T) {
	page, err := os.ReadFile("../../docs/http-api.md")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
	for path, ops := range doc.Paths {
		for method := range ops {
			if method == "parameters" {
				continue
			}
			if want := strings.ToUpper(method) + " " + path; !bytes.Contains(page, []byte(want)) {
				t.Errorf("docs/http-api.md does not name %s", want)
			}
		}
	}
	codes := definedCodes(t)
	for _, c := range []plan.MemoryCode{CodeNotServed, CodeRecallTooLarge, CodeRecallMalformed, CodeRecallHTTP, CodeTokenUnreadable} {
		codes = append(codes, string(c))
	}
	for _, c := range codes {
		if !bytes.Contains(page, []byte("`"+c)) {
			t.Errorf("docs/http-api.md does not name the error code %s", c)
		}
	}
}

// definedCodes are the values of the constants of type Code in errors.go,
// the one file that defines the API's error codes.
func definedCodes(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			v := spec.(*ast.ValueSpec)
			if id, ok := v.Type.(*ast.Ident); !ok || id.Name != "Code" {
				continue
			}
			for _, val := range v.Values {
				lit, ok := val.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("errors.go: a Code that is not a string literal: %T", val)
				}
				c, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				codes = append(codes, c)
			}
		}
	}
	if len(codes) == 0 {
		t.Fatal("errors.go defines no Code")
	}
	return codes
}

// TestErrorCodesMatchOpenAPI: the codes of openapi.json's Error are the
// codes errors.go defines, no more and no fewer, so that a client
// generated from the document knows every code the server answers.
func TestErrorCodesMatchOpenAPI(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas struct {
				Error struct {
					Properties struct {
						Error struct {
							Properties struct {
								Code struct {
									Enum []string `json:"enum"`
								} `json:"code"`
							} `json:"properties"`
						} `json:"error"`
					} `json:"properties"`
				} `json:"Error"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
	documented := doc.Components.Schemas.Error.Properties.Error.Properties.Code.Enum
	defined := definedCodes(t)
	if len(documented) == 0 {
		t.Fatal("openapi.json: Error has no enum of codes")
	}
	inDoc, inCode := map[string]bool{}, map[string]bool{}
	for _, c := range documented {
		if inDoc[c] {
			t.Errorf("openapi.json lists the code %s twice", c)
		}
		inDoc[c] = true
	}
	for _, c := range defined {
		if inCode[c] {
			t.Errorf("errors.go defines the code %s twice", c)
		}
		inCode[c] = true
		if !inDoc[c] {
			t.Errorf("openapi.json does not list the code %s of errors.go", c)
		}
	}
	for _, c := range documented {
		if !inCode[c] {
			t.Errorf("openapi.json lists the code %s, which errors.go does not define", c)
		}
	}
}
