package handlers_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	vErrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/helpers"

	"pizzabot/docs"
)

// The API's answers are checked against docs/openapi.json: every test that
// builds its server with checkAPI (the bundle of helpers_test.go does) has
// each /api/v1 answer it receives validated, status, headers and body.

// apiValidator is the validator of docs/openapi.json, built once per test
// process (building it parses the document and compiles its schemas).
var apiValidator = sync.OnceValues(func() (validator.Validator, error) {
	doc, err := libopenapi.NewDocument(docs.OpenAPI)
	if err != nil {
		return nil, err
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		return nil, fmt.Errorf("%v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		return nil, fmt.Errorf("docs/openapi.json is not a valid OpenAPI document: %v", verrs)
	}
	return v, nil
})

// checkAPI wraps a server so that every answer under /api/v1 is validated
// against docs/openapi.json; a mismatch fails t. Answers to paths or
// methods the document does not have must be 4xx refusals with an error
// body. The event
// stream passes through as it is written, its errors are checked.
func checkAPI(t testing.TB, next http.Handler) http.Handler {
	v, err := apiValidator()
	if err != nil {
		t.Fatal(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/api/v1/") {
			next.ServeHTTP(w, r)
			return
		}
		cw := &capture{w: w, header: http.Header{}}
		next.ServeHTTP(cw, r)
		if cw.stream {
			return // a 200 event stream, written as it went
		}
		if !cw.wrote {
			cw.WriteHeader(http.StatusOK)
		}
		resp := &http.Response{StatusCode: cw.status, Header: cw.header, Body: io.NopCloser(bytes.NewReader(cw.body.Bytes())), Request: r}
		req := r.Clone(r.Context())
		req.Body = http.NoBody
		if ok, errs := v.ValidateHttpResponse(req, resp); !ok {
			if onlyUnknownPath(errs) && refusal(cw.status, cw.body.Bytes()) {
				return // a path or method the API does not have, refused
			}
			var msgs []string
			for _, e := range errs {
				msg := e.Message + ": " + e.Reason
				for _, s := range e.SchemaValidationErrors {
					msg += fmt.Sprintf("\n\t\t%s: %s", s.FieldPath, s.Reason)
				}
				msgs = append(msgs, msg)
			}
			t.Errorf("%s %s answered %d, not as docs/openapi.json says:\n\t%s\n\tbody: %.500s",
				r.Method, r.URL, cw.status, strings.Join(msgs, "\n\t"), cw.body.String())
		}
	})
}

// refusal reports whether an answer is a 4xx with an Error body.
func refusal(status int, body []byte) bool {
	var e struct{ Error string }
	return status >= 400 && status < 500 && json.Unmarshal(body, &e) == nil && e.Error != ""
}

func onlyUnknownPath(errs []*vErrors.ValidationError) bool {
	for _, e := range errs {
		if e.ValidationType != helpers.PathValidation && e.ValidationType != helpers.ValidationMissingOperation {
			return false
		}
	}
	return true
}

// capture holds an answer back for validation, except a 200 event stream,
// which it writes through (flushes included) as the handler goes.
type capture struct {
	w      http.ResponseWriter
	header http.Header
	status int
	wrote  bool
	stream bool
	body   bytes.Buffer
}

func (c *capture) Header() http.Header {
	if c.stream {
		return c.w.Header()
	}
	return c.header
}

func (c *capture) WriteHeader(status int) {
	if c.wrote {
		return
	}
	c.wrote, c.status = true, status
	for k, vs := range c.header {
		c.w.Header()[k] = vs
	}
	if status == http.StatusOK && strings.HasPrefix(c.header.Get("Content-Type"), "text/event-stream") {
		c.stream = true
	}
	c.w.WriteHeader(status)
}

func (c *capture) Write(p []byte) (int, error) {
	if !c.wrote {
		c.WriteHeader(http.StatusOK)
	}
	c.body.Write(p)
	if len(p) > 0 && c.body.Len() > 1<<20 {
		c.body.Reset() // a long stream: only its start is kept
	}
	return c.w.Write(p)
}

func (c *capture) Flush() {
	if f, ok := c.w.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the real writer (deadlines).
func (c *capture) Unwrap() http.ResponseWriter { return c.w }

// apiRoute is a "METHOD /api/v1/..." route of routes.go.
var apiRoute = regexp.MustCompile(`mux\.Handle(?:Func)?\("([A-Z]+) /api/v1(/[^"]*)"`)

// Every /api/v1 route of routes.go is an operation of docs/openapi.json,
// and every operation of the document is a route: neither drifts from the
// other. The document is served as it is in the repository.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("routes.go")
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(docs.OpenAPI, &spec); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(spec.OpenAPI, "3.1.") {
		t.Errorf("openapi = %q, want 3.1.x", spec.OpenAPI)
	}
	routes := map[string]bool{}
	for _, m := range apiRoute.FindAllStringSubmatch(string(src), -1) {
		routes[strings.ToLower(m[1])+" "+m[2]] = true
	}
	if len(routes) < 20 {
		t.Fatalf("found %d /api/v1 routes in routes.go: the extraction is broken", len(routes))
	}
	documented := map[string]bool{}
	for path, ops := range spec.Paths {
		for method := range ops {
			if slices.Contains([]string{"get", "post", "put", "patch", "delete"}, method) {
				documented[method+" "+path] = true
			}
		}
	}
	for r := range routes {
		if !documented[r] {
			t.Errorf("routes.go serves %s under /api/v1, which docs/openapi.json does not describe", strings.ToUpper(r))
		}
	}
	for d := range documented {
		if !routes[d] {
			t.Errorf("docs/openapi.json describes %s under /api/v1, which routes.go does not serve", strings.ToUpper(d))
		}
	}

	b := setup(t)
	rec := httptest.NewRecorder()
	b.srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/openapi.json", nil))
	if rec.Code != http.StatusOK || !bytes.Equal(rec.Body.Bytes(), docs.OpenAPI) || rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("GET /api/v1/openapi.json = %d %s, %d bytes; want docs/openapi.json", rec.Code, rec.Header().Get("Content-Type"), rec.Body.Len())
	}
}
