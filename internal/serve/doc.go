// Package serve is the HTTP server of `promptops serve`, in two halves:
// prompt assembly (POST /v1/assemble, GET /v1/templates: the rendered
// plans of a directory or of the cluster's ConfigMaps held as one
// immutable snapshot, a rollout's stable and canary plans included,
// assembled per request with recalled memory from the plan its assignment
// key chooses) and the
// bank API (/v1/banks/{namespace}/{name}/...: retain, recall, erasure and
// export of a MemoryBank served in-process, --bank).
//
// Every endpoint is an http.Handler registered with a ServeMux pattern
// (server.go) behind one instrumentation, authentication and
// authorization. A handler returns its error; the one adapter, handle in
// errors.go, writes it as {"error": {"code", "message"}}, mapping a done
// context to 503 RequestTimeout and a store's failure to 503
// StoreUnavailable. Every error code is defined in errors.go, and
// openapi.json lists the same set.
package serve
