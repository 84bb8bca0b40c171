package handlers_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/net/html"

	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/handlers"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

// bundle is one test's server on its own database, with three users.
type bundle struct {
	t                 *testing.T
	ctx               context.Context
	pool              *pgxpool.Pool
	srv               http.Handler
	alice, bob, carol db.User
	logs              *syncBuffer
}

// setup starts a server on a fresh database. The test header X-Test-User
// names the user a request acts as ("alice", "bob", "carol"); without it a
// request is not signed in. opts adjust the dependencies.
func setup(t *testing.T, opts ...func(*handlers.Deps)) *bundle {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.New(t)
	b := &bundle{t: t, ctx: ctx, pool: pool, logs: &syncBuffer{}}
	users := map[string]*db.User{"alice": &b.alice, "bob": &b.bob, "carol": &b.carol}
	for name, u := range users {
		var err error
		*u, err = db.UpsertUser(ctx, pool, "https://idp.test", name, name+"@example.com", strings.ToUpper(name[:1])+name[1:], false)
		if err != nil {
			t.Fatal(err)
		}
	}
	deps := handlers.Deps{
		Pool:   pool,
		Logger: slog.New(slog.NewJSONHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Authenticate: func(r *http.Request) (db.User, error) {
			u, ok := users[r.Header.Get("X-Test-User")]
			if !ok {
				return db.User{}, handlers.ErrUnauthenticated
			}
			return *u, nil
		},
	}
	// An insert-only River client: runs are queued, never worked, so a new
	// thread stays running as the page tests expect.
	deps.Runs = jobstest.New(t, jobs.Config{Pool: pool, Logger: deps.Logger}) // the built-in tools
	for _, o := range opts {
		o(&deps)
	}
	// Every /api/v1 answer is validated against docs/openapi.json.
	b.srv = checkAPI(t, handlers.New(deps))
	return b
}

// htmx marks a request as an hx-get or hx-post; boosted as a boosted link.
var (
	htmx    = map[string]string{"HX-Request": "true", "HX-Current-URL": "http://example.com/inbox/all"}
	boosted = map[string]string{"HX-Request": "true", "HX-Boosted": "true"}
)

// get requests path as user.
func (b *bundle) get(user, path string, hdr ...map[string]string) *response {
	b.t.Helper()
	return b.do(user, http.MethodGet, path, nil, hdr...)
}

// post submits a form to path as user.
func (b *bundle) post(user, path string, form url.Values, hdr ...map[string]string) *response {
	b.t.Helper()
	return b.do(user, http.MethodPost, path, form, hdr...)
}

func (b *bundle) do(user, method, path string, form url.Values, hdr ...map[string]string) *response {
	b.t.Helper()
	var req *http.Request
	if form != nil {
		req = httptest.NewRequest(method, path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		req = httptest.NewRequest(method, path, nil)
	}
	if user != "" {
		req.Header.Set("X-Test-User", user)
	}
	for _, h := range hdr {
		for k, v := range h {
			req.Header.Set(k, v)
		}
	}
	rec := httptest.NewRecorder()
	b.srv.ServeHTTP(rec, req)
	return &response{t: b.t, ResponseRecorder: rec}
}

// thread creates a thread of u with the given status ("" leaves it running).
func (b *bundle) thread(u db.User, title, status string) db.Thread {
	b.t.Helper()
	t, err := db.CreateThread(b.ctx, b.pool, db.NewThread{UserID: u.ID, Title: title})
	if err != nil {
		b.t.Fatal(err)
	}
	if status != "" && status != db.StatusRunning {
		if err := db.SetThreadStatus(b.ctx, b.pool, t.ID, status, ""); err != nil {
			b.t.Fatal(err)
		}
	}
	return b.reload(u, t.ID)
}

// reload reads a thread as it is in the database.
func (b *bundle) reload(u db.User, id int64) db.Thread {
	b.t.Helper()
	t, err := db.GetThread(b.ctx, b.pool, u.ID, id)
	if err != nil {
		b.t.Fatal(err)
	}
	return t
}

func (b *bundle) folder(u db.User, name string) db.Folder {
	b.t.Helper()
	f, err := db.CreateFolder(b.ctx, b.pool, u.ID, name)
	if err != nil {
		b.t.Fatal(err)
	}
	return f
}

func (b *bundle) move(u db.User, folderID int64, ids ...int64) {
	b.t.Helper()
	if _, err := db.MoveThreads(b.ctx, b.pool, u.ID, ids, &folderID); err != nil {
		b.t.Fatal(err)
	}
}

func (b *bundle) markRead(u db.User, ids ...int64) {
	b.t.Helper()
	if _, err := db.MarkRead(b.ctx, b.pool, u.ID, ids, true); err != nil {
		b.t.Fatal(err)
	}
}

// response is a recorded response with helpers to read its HTML.
type response struct {
	*httptest.ResponseRecorder
	t      *testing.T
	parsed *html.Node
}

func (r *response) body() string { return r.Body.String() }

// wantStatus fails the test unless the response has the status.
func (r *response) wantStatus(want int) *response {
	r.t.Helper()
	if r.Code != want {
		body := r.body()
		if len(body) > 2000 {
			body = body[:2000] + "…"
		}
		r.t.Fatalf("status = %d, want %d; body:\n%s", r.Code, want, body)
	}
	return r
}

func (r *response) doc() *html.Node {
	r.t.Helper()
	if r.parsed == nil {
		n, err := html.Parse(strings.NewReader(r.body()))
		if err != nil {
			r.t.Fatal(err)
		}
		r.parsed = n
	}
	return r.parsed
}

// all returns the elements with the data-testid.
func (r *response) all(testid string) []*html.Node {
	r.t.Helper()
	return findAll(r.doc(), func(n *html.Node) bool { return attr(n, "data-testid") == testid })
}

// texts returns the text of each element with the data-testid.
func (r *response) texts(testid string) []string {
	r.t.Helper()
	var out []string
	for _, n := range r.all(testid) {
		out = append(out, text(n))
	}
	return out
}

// text returns the text of the first element with the data-testid, "" when
// there is none.
func (r *response) text(testid string) string {
	r.t.Helper()
	if ts := r.texts(testid); len(ts) > 0 {
		return ts[0]
	}
	return ""
}

// count returns the number in the element with the data-testid.
func (r *response) count(testid string) int {
	r.t.Helper()
	s := r.text(testid)
	n, err := strconv.Atoi(s)
	if err != nil {
		r.t.Fatalf("%s = %q, want a number", testid, s)
	}
	return n
}

// byID returns the element with the id, or nil.
func (r *response) byID(id string) *html.Node {
	r.t.Helper()
	if ns := findAll(r.doc(), func(n *html.Node) bool { return attr(n, "id") == id }); len(ns) > 0 {
		return ns[0]
	}
	return nil
}

// title returns the page's <title>.
func (r *response) title() string {
	r.t.Helper()
	ns := findAll(r.doc(), func(n *html.Node) bool { return n.Type == html.ElementNode && n.Data == "title" })
	if len(ns) == 0 {
		return ""
	}
	return text(ns[0])
}

// threadIDs returns the ids of the listed thread rows, in order.
func (r *response) threadIDs() []int64 {
	r.t.Helper()
	var ids []int64
	for _, n := range r.all("thread-row") {
		id, err := strconv.ParseInt(attr(n, "data-thread-id"), 10, 64)
		if err != nil {
			r.t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// isFragment reports whether the body is a fragment rather than a page.
func (r *response) isFragment() bool { return !strings.Contains(r.body(), "<html") }

func findAll(root *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	for n := range root.Descendants() {
		if n.Type == html.ElementNode && match(n) {
			out = append(out, n)
		}
	}
	return out
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func hasAttr(n *html.Node, key string) bool {
	for _, a := range n.Attr {
		if a.Key == key {
			return true
		}
	}
	return false
}

// text is the element's text with runs of white space collapsed.
func text(n *html.Node) string {
	var sb strings.Builder
	for d := range n.Descendants() {
		if d.Type == html.TextNode {
			sb.WriteString(d.Data)
		}
	}
	return strings.Join(strings.Fields(sb.String()), " ")
}

// syncBuffer is a log destination safe for the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

func form(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	return v
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

type htmlNode = html.Node

func parseID(t *testing.T, s string) int64 {
	t.Helper()
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
