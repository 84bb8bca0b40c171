package tools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"pizzabot/netguard"
	"pizzabot/tools"
	"pizzabot/tools/pdftest"
)

// webTool returns the tool of that name among WebTools(w).
func webTool(t *testing.T, w tools.Web, name string) tools.Tool {
	t.Helper()
	for _, tool := range tools.WebTools(w) {
		if tool.Spec.Name == name {
			return tool
		}
	}
	t.Fatalf("WebTools has no %s", name)
	return tools.Tool{}
}

func fetch(t *testing.T, w tools.Web, args map[string]any) (string, error) {
	t.Helper()
	return webTool(t, w, tools.WebFetchTool).Call(context.Background(), tools.Run{}, args)
}

// allow is a guard that lets the test server's loopback address and port
// through, as PIZZA_FETCH_ALLOW=127.0.0.1:<port> would.
func allow(t *testing.T, srv *httptest.Server) *netguard.Guard {
	t.Helper()
	rules, err := netguard.ParseRules(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return &netguard.Guard{Rules: rules}
}

func portOf(t *testing.T, hostport string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

const articlePage = `<!doctype html>
<html><head><meta charset="utf-8"><title>Ovens of Naples | Pizza Weekly</title></head>
<body>
<header><nav class="menu"><a href="/">Home</a> <a href="/subscribe">Subscribe now</a> <a href="/shop">Shop the merch</a></nav></header>
<div class="ad banner sponsored">BUY CHEAP OVENS TODAY, LIMITED OFFER</div>
<main>
<article>
<h1>Ovens of Naples</h1>
<p>The wood-fired ovens of Naples reach about 485 degrees Celsius, and a pizza bakes in sixty to ninety seconds. Bakers judge the heat by the colour of the dome rather than by a thermometer, and they move each pizza with a long peel to keep it from burning on the side nearest the fire.</p>
<h2>The dough</h2>
<p>The dough is flour, water, salt and yeast, left to rise for at least eight hours and often for a full day. A long rise gives the crust its open, airy structure and the leopard spots that appear when the blistered edge meets the flame. The <a href="/glossary/cornicione">cornicione</a> is the raised rim.</p>
<ul><li>Tipo 00 flour</li><li>Sea salt</li><li>Fresh yeast</li></ul>
<p>Most pizzerias in the old town still use ovens built from volcanic stone from Vesuvius, which holds heat for hours after the fire dies down. Some of these ovens have been in use for more than a century, passed down from one generation of pizzaioli to the next.</p>
<pre><code>bake(pizza, 90*time.Second)</code></pre>
</article>
</main>
<aside class="sidebar"><div class="ad">Sponsored: the best pizza stones of 2026</div></aside>
<footer>Copyright Pizza Weekly. <a href="/privacy">Privacy</a></footer>
<script>trackEverything()</script>
</body></html>`

// TestWebFetchArticle fetches a page with navigation, ads and an article
// from a server the admin allowed, directly and through redirects, and
// gets the article as Markdown under its final URL and title.
func TestWebFetchArticle(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/r1":
			http.Redirect(w, r, "/r2", http.StatusMovedPermanently)
		case "/r2":
			http.Redirect(w, r, "/news/ovens#top", http.StatusFound)
		case "/news/ovens":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			io.WriteString(w, articlePage)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	w := tools.Web{Guard: allow(t, srv)}

	got, err := fetch(t, w, map[string]any{"url": srv.URL + "/news/ovens"})
	if err != nil {
		t.Fatalf("web_fetch: %v", err)
	}
	if want := "URL: " + srv.URL + "/news/ovens\nTitle: Ovens of Naples"; !strings.HasPrefix(got, want) {
		t.Errorf("result starts %q, want %q", firstLines(got, 3), want)
	}
	for _, want := range []string{
		"485 degrees Celsius",
		"## The dough",
		"- Tipo 00 flour",
		"[cornicione](" + srv.URL + "/glossary/cornicione)",
		"bake(pizza, 90*time.Second)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("result lacks %q:\n%s", want, got)
		}
	}
	for _, clutter := range []string{"Subscribe now", "BUY CHEAP OVENS", "pizza stones", "trackEverything", "Copyright"} {
		if strings.Contains(got, clutter) {
			t.Errorf("result keeps the page's clutter %q:\n%s", clutter, got)
		}
	}
	if strings.Contains(got, "Redirected from") {
		t.Errorf("no redirect, yet the result says one:\n%s", firstLines(got, 5))
	}

	got, err = fetch(t, w, map[string]any{"url": srv.URL + "/r1"})
	if err != nil {
		t.Fatalf("web_fetch through redirects: %v", err)
	}
	if want := "URL: " + srv.URL + "/news/ovens\n"; !strings.HasPrefix(got, want) {
		t.Errorf("after two redirects the result starts %q, want the final URL %q", firstLines(got, 1), want)
	}
	if want := "Redirected from: " + srv.URL + "/r1\n"; !strings.Contains(got, want) {
		t.Errorf("result lacks %q:\n%s", want, firstLines(got, 5))
	}
	if !strings.Contains(got, "485 degrees Celsius") {
		t.Errorf("the redirected fetch lacks the article:\n%s", got)
	}
}

// TestWebFetchRedirectLimit stops where netguard's client stops: after
// netguard.MaxRedirects requests (as net/http's default does, that is 9
// redirects followed and the 10th refused), so an endless chain ends in an
// error.
func TestWebFetchRedirectLimit(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/hop/"))
		if err != nil || n == 0 {
			io.WriteString(w, "arrived")
			return
		}
		http.Redirect(w, r, "/hop/"+strconv.Itoa(n-1), http.StatusFound)
	}))
	defer srv.Close()
	w := tools.Web{Guard: allow(t, srv)}
	got, err := fetch(t, w, map[string]any{"url": srv.URL + "/hop/" + strconv.Itoa(netguard.MaxRedirects-1)})
	if err != nil || !strings.HasPrefix(got, "URL: "+srv.URL+"/hop/0\n") || !strings.HasSuffix(got, "\n\narrived") {
		t.Errorf("%d redirects: %q, %v", netguard.MaxRedirects-1, got, err)
	}
	if got, err := fetch(t, w, map[string]any{"url": srv.URL + "/hop/" + strconv.Itoa(netguard.MaxRedirects)}); err == nil || !strings.Contains(err.Error(), "stopped after 10 redirects") {
		t.Errorf("%d redirects: %q, %v; want an error", netguard.MaxRedirects, firstLines(got, 2), err)
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

// fixedResolver answers each name with one address.
type fixedResolver map[string]string

func (r fixedResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// TestWebFetchRefusesTheServersNetwork asks for every kind of address
// inside the server's network, directly, by a name and through a
// redirect from an allowed host: each is refused with netguard's reason,
// and the server behind them sees no request.
func TestWebFetchRefusesTheServersNetwork(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch r.URL.Path {
		case "/to-metadata":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/iam/security-credentials/", http.StatusFound)
		case "/to-loopback":
			http.Redirect(w, r, "http://127.0.0.1:"+strconv.Itoa(portOf(t, r.Host))+"/secret", http.StatusFound)
		case "/to-v6-loopback":
			http.Redirect(w, r, "http://[::1]:"+strconv.Itoa(portOf(t, r.Host))+"/secret", http.StatusTemporaryRedirect)
		default:
			io.WriteString(w, "the admin panel")
		}
	}))
	defer srv.Close()
	p := strconv.Itoa(portOf(t, srv.Listener.Addr().String()))
	// The admin allowed the name wiki.test on the server's port; nothing
	// else inside.
	rules, err := netguard.ParseRules("wiki.test:" + p)
	if err != nil {
		t.Fatal(err)
	}
	w := tools.Web{
		Guard:        &netguard.Guard{Rules: rules, Resolver: fixedResolver{"wiki.test": "127.0.0.1", "evil.test": "127.0.0.1", "intranet.test": "10.1.2.3"}, Timeout: time.Second},
		FetchTimeout: 5 * time.Second,
	}
	if _, err := fetch(t, w, map[string]any{"url": "http://wiki.test:" + p + "/"}); err != nil {
		t.Fatalf("the allowed host: %v", err)
	}
	hits.Store(0)

	cases := []struct {
		url    string
		reason string
		hits   int32 // requests the server sees: the redirecting page only
	}{
		{"http://127.0.0.1:" + p + "/", "loopback", 0},
		{"http://localhost:" + p + "/", "does not resolve", 0}, // the double knows no localhost: never the system's answer
		{"http://[::1]:" + p + "/", "loopback", 0},
		{"http://10.0.0.1/", "private", 0},
		{"https://169.254.169.254/latest/meta-data/", "link-local", 0},
		{"http://169.254.169.254/latest/meta-data/", "link-local", 0},
		{"http://[::ffff:127.0.0.1]:" + p + "/", "loopback", 0},
		{"http://[::ffff:169.254.169.254]/", "link-local", 0},
		{"http://100.64.0.1/", "carrier-grade NAT", 0},
		{"http://evil.test:" + p + "/", "loopback", 0},
		{"http://intranet.test/", "private", 0},
		{"http://wiki.test:" + p + "/to-metadata", "link-local", 1},
		{"http://wiki.test:" + p + "/to-loopback", "loopback", 1},
		{"http://wiki.test:" + p + "/to-v6-loopback", "loopback", 1},
	}
	for _, c := range cases {
		hits.Store(0)
		got, err := fetch(t, w, map[string]any{"url": c.url})
		if err == nil {
			t.Errorf("web_fetch %s = %q, want a refusal", c.url, firstLines(got, 2))
			continue
		}
		if c.reason == "does not resolve" {
			if !strings.Contains(err.Error(), c.reason) {
				t.Errorf("web_fetch %s: %v, want %q", c.url, err, c.reason)
			}
			continue
		}
		if !netguard.IsRefused(err) || !strings.Contains(err.Error(), "is refused: ") || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("web_fetch %s: %v, want netguard's refusal (%s)", c.url, err, c.reason)
		}
		if !strings.Contains(err.Error(), "PIZZA_FETCH_ALLOW") {
			t.Errorf("web_fetch %s: %v, want it to name PIZZA_FETCH_ALLOW", c.url, err)
		}
		if h := hits.Load(); h != c.hits {
			t.Errorf("web_fetch %s: the server saw %d requests, want %d", c.url, h, c.hits)
		}
	}
	// Without a rule, the test server itself is loopback.
	if _, err := fetch(t, tools.Web{}, map[string]any{"url": srv.URL}); !netguard.IsRefused(err) {
		t.Errorf("web_fetch %s with no rule: %v, want a refusal", srv.URL, err)
	}
	for _, u := range []string{"file:///etc/passwd", "gopher://x/", "http://user:pw@wiki.test:" + p + "/", "//wiki.test/"} {
		if _, err := fetch(t, w, map[string]any{"url": u}); err == nil {
			t.Errorf("web_fetch %s: no error", u)
		}
	}
}

// flipResolver answers first with one address and then with another: a
// rebinding attacker's DNS.
type flipResolver struct {
	first, later netip.Addr
	n            atomic.Int32
}

func (r *flipResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	if r.n.Add(1) == 1 {
		return []netip.Addr{r.first}, nil
	}
	return []netip.Addr{r.later}, nil
}

// TestWebFetchRebinding resolves a name to an allowed address first and to
// a forbidden one after: the page on the allowed address redirects to the
// same name on a new connection, whose lookup answers loopback, and the
// fetch is refused there; the service listening on that loopback address
// and port sees nothing. Each connect goes to the address just checked.
func TestWebFetchRebinding(t *testing.T) {
	t.Parallel()
	// Two listeners on one port: 127.0.0.2 (allowed by the admin's rule)
	// and 127.0.0.1 (the "inside" service a rebinding attack wants).
	var good, secret *httptest.Server
	var secretHits atomic.Int32
	for range 20 {
		good = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/" {
				// A new connection for the next request, so a new lookup.
				w.Header().Set("Connection", "close")
				http.Redirect(w, r, "/next", http.StatusFound)
				return
			}
			io.WriteString(w, "the public page")
		}))
		ln, err := net.Listen("tcp", "127.0.0.2:0")
		if err != nil {
			t.Skipf("cannot listen on 127.0.0.2 here: %v", err)
		}
		good.Listener.Close()
		good.Listener = ln
		sln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(portOf(t, ln.Addr().String())))
		if err != nil {
			ln.Close()
			continue // that port is taken on 127.0.0.1: another
		}
		secret = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			secretHits.Add(1)
			io.WriteString(w, "SECRET")
		}))
		secret.Listener.Close()
		secret.Listener = sln
		break
	}
	if secret == nil {
		t.Skip("found no port free on both 127.0.0.1 and 127.0.0.2")
	}
	good.Start()
	defer good.Close()
	secret.Start()
	defer secret.Close()
	p := strconv.Itoa(portOf(t, good.Listener.Addr().String()))

	rules, err := netguard.ParseRules("127.0.0.2:" + p)
	if err != nil {
		t.Fatal(err)
	}
	res := &flipResolver{first: netip.MustParseAddr("127.0.0.2"), later: netip.MustParseAddr("127.0.0.1")}
	w := tools.Web{Guard: &netguard.Guard{Rules: rules, Resolver: res, Timeout: time.Second}, FetchTimeout: 5 * time.Second}
	got, err := fetch(t, w, map[string]any{"url": "http://rebind.test:" + p + "/"})
	if err == nil || !netguard.IsRefused(err) || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("web_fetch through a rebinding name = %q, %v; want a loopback refusal", firstLines(got, 2), err)
	}
	if n := res.n.Load(); n != 2 {
		t.Errorf("%d lookups, want 2 (one per connection)", n)
	}
	if h := secretHits.Load(); h != 0 {
		t.Errorf("the loopback service saw %d requests", h)
	}
	if strings.Contains(got, "SECRET") {
		t.Errorf("the result holds the loopback service's answer: %q", got)
	}
}

// TestWebFetchSizeLimit reads a page that never ends as far as the limit
// and says it was cut there; a PDF past the limit is refused.
func TestWebFetchSizeLimit(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big.pdf" {
			w.Header().Set("Content-Type", "application/pdf")
		} else {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		}
		line := []byte(strings.Repeat("endless ", 15) + "\n")
		for {
			if _, err := w.Write(line); err != nil {
				return // the reader hung up
			}
			select {
			case <-r.Context().Done():
				return
			default:
			}
		}
	}))
	defer srv.Close()
	// A time limit far past what reading 64 KB takes: the size limit is
	// what ends the read.
	w := tools.Web{Guard: allow(t, srv), FetchMaxBytes: 64 << 10, FetchMaxChars: 1 << 20, FetchTimeout: time.Minute}
	got, err := fetch(t, w, map[string]any{"url": srv.URL + "/stream"})
	if err != nil {
		t.Fatalf("web_fetch of an endless page: %v", err)
	}
	if !strings.Contains(got, "Note: The document is larger than 64 KiB: only its first 64 KiB were read.") {
		t.Errorf("no note of the cut in:\n%s", firstLines(got, 6))
	}
	if n := strings.Count(got, "endless"); n == 0 || n > (64<<10)/8+1 {
		t.Errorf("%d words read, want at most the 64 KB's", n)
	}
	if _, err := fetch(t, w, map[string]any{"url": srv.URL + "/big.pdf"}); err == nil || !strings.Contains(err.Error(), "PDF larger than 64 KiB") {
		t.Errorf("an endless PDF: %v, want a refusal naming the limit", err)
	}
}

// TestWebFetchTimeLimit gives up on a server that never answers and on one
// that sends its body a byte at a time forever.
func TestWebFetchTimeLimit(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/trickle" {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusOK)
			for {
				if _, err := io.WriteString(w, "<p>"); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
		<-r.Context().Done() // never answers
	}))
	defer srv.Close()
	w := tools.Web{Guard: allow(t, srv), FetchTimeout: 300 * time.Millisecond}
	for _, path := range []string{"/silent", "/trickle"} {
		got, err := fetch(t, w, map[string]any{"url": srv.URL + path})
		if err == nil || !strings.Contains(err.Error(), "did not answer in full within 300ms") {
			t.Errorf("web_fetch %s = %q, %v; want a timeout error", path, firstLines(got, 2), err)
		}
	}
}

// TestWebFetchOffset cuts a long document at a line's end and reads on
// from there with offset.
func TestWebFetchOffset(t *testing.T) {
	t.Parallel()
	var doc strings.Builder
	for i := range 400 {
		fmt.Fprintf(&doc, "line %04d of the notes\n", i)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, doc.String())
	}))
	defer srv.Close()
	w := tools.Web{Guard: allow(t, srv), FetchMaxChars: 1000}
	cut := regexp.MustCompile(`cut at character (\d+): call web_fetch with the same url and offset (\d+) to read on`)

	var lines []string
	offset := 0
	for call := 0; ; call++ {
		if call > 20 {
			t.Fatal("more than 20 calls for a 9,200-character document read 1,000 at a time")
		}
		got, err := fetch(t, w, map[string]any{"url": srv.URL + "/notes.txt", "offset": json.Number(strconv.Itoa(offset))})
		if err != nil {
			t.Fatalf("offset %d: %v", offset, err)
		}
		head, body, _ := strings.Cut(got, "\n\n")
		if !strings.HasPrefix(head, "URL: "+srv.URL+"/notes.txt\nTitle: notes.txt\n") {
			t.Fatalf("offset %d: header %q", offset, head)
		}
		m := cut.FindStringSubmatch(body)
		if m == nil {
			lines = append(lines, strings.Split(body, "\n")...)
			break
		}
		body = strings.TrimSuffix(body[:strings.LastIndex(body, "\n\n…")], "\n")
		if len([]rune(body)) > 1000 {
			t.Errorf("offset %d: %d characters, want at most 1000", offset, len([]rune(body)))
		}
		if !strings.HasSuffix(body, "of the notes") {
			t.Errorf("offset %d: the part does not end at a line's end: …%q", offset, body[len(body)-20:])
		}
		lines = append(lines, strings.Split(body, "\n")...)
		next, _ := strconv.Atoi(m[1])
		if next <= offset {
			t.Fatalf("offset %d: next offset %d", offset, next)
		}
		offset = next
	}
	if want := strings.Split(strings.TrimSuffix(doc.String(), "\n"), "\n"); strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("the parts put together are %d lines, not the document's %d", len(lines), len(want))
	}
	if _, err := fetch(t, w, map[string]any{"url": srv.URL + "/notes.txt", "offset": json.Number("100000")}); err == nil || !strings.Contains(err.Error(), "past its end") {
		t.Errorf("an offset past the end: %v", err)
	}
}

// TestWebFetchTypes reads a PDF through the PDF text path, JSON and
// Latin-1 text as they are, and refuses an image and a missing page with
// messages that name the type and the status.
func TestWebFetchTypes(t *testing.T) {
	t.Parallel()
	pdf := pdftest.Handmade([]string{"Quarterly revenue rose nine percent", "The second page lists risks"}, false)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/report.pdf":
			w.Header().Set("Content-Type", "application/pdf")
			w.Write(pdf)
		case "/undeclared":
			w.Header()["Content-Type"] = nil // sniffed: a PDF all the same
			w.Write(pdf)
		case "/data.json":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"toppings":["basil","mozzarella"]}`)
		case "/latin1.txt":
			w.Header().Set("Content-Type", "text/plain; charset=iso-8859-1")
			w.Write([]byte("Caf\xe9 cr\xe8me"))
		case "/logo.png":
			w.Header().Set("Content-Type", "image/png")
			w.Write([]byte("\x89PNG\r\n\x1a\n"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	w := tools.Web{Guard: allow(t, srv)}

	for _, path := range []string{"/report.pdf", "/undeclared"} {
		got, err := fetch(t, w, map[string]any{"url": srv.URL + path})
		if err != nil {
			t.Fatalf("web_fetch %s: %v", path, err)
		}
		for _, want := range []string{"URL: " + srv.URL + path + "\n", "Type: PDF, 2 pages", "--- page 1 ---\nQuarterly revenue rose nine percent", "--- page 2 ---\nThe second page lists risks"} {
			if !strings.Contains(got, want) {
				t.Errorf("web_fetch %s lacks %q:\n%s", path, want, got)
			}
		}
	}
	got, err := fetch(t, w, map[string]any{"url": srv.URL + "/data.json"})
	if err != nil || !strings.HasSuffix(got, "\n\n"+`{"toppings":["basil","mozzarella"]}`) || !strings.Contains(got, "Type: application/json\n") {
		t.Errorf("JSON: %q, %v", got, err)
	}
	got, err = fetch(t, w, map[string]any{"url": srv.URL + "/latin1.txt"})
	if err != nil || !strings.HasSuffix(got, "\n\nCafé crème") {
		t.Errorf("Latin-1 text: %q, %v", got, err)
	}
	if _, err := fetch(t, w, map[string]any{"url": srv.URL + "/logo.png"}); err == nil || !strings.Contains(err.Error(), "is image/png, which web_fetch does not read") {
		t.Errorf("an image: %v, want a refusal naming image/png", err)
	}
	if _, err := fetch(t, w, map[string]any{"url": srv.URL + "/gone"}); err == nil || !strings.Contains(err.Error(), "404 Not Found") {
		t.Errorf("a missing page: %v, want the status", err)
	}
}

// TestWebToolsSearchOnlyWhenConfigured: web_fetch is always there, and
// web_search only with a provider; both pass the toolbox's schema check
// and are reads.
func TestWebToolsSearchOnlyWhenConfigured(t *testing.T) {
	t.Parallel()
	names := func(w tools.Web) []string {
		var n []string
		for _, tool := range tools.WebTools(w) {
			if !tool.Idempotent || tool.Call == nil || tool.Tx != nil {
				t.Errorf("%s is not an idempotent Call tool", tool.Spec.Name)
			}
			n = append(n, tool.Spec.Name)
		}
		return n
	}
	if got := names(tools.Web{}); strings.Join(got, ",") != "web_fetch" {
		t.Errorf("no provider: %v, want web_fetch only", got)
	}
	w := tools.Web{Search: tools.Search{Provider: tools.SearchSearXNG, URL: "http://searxng:8080"}}
	if got := names(w); strings.Join(got, ",") != "web_fetch,web_search" {
		t.Errorf("with searxng: %v", got)
	}
	if _, err := tools.NewToolbox(tools.WebTools(w)...); err != nil {
		t.Fatal(err)
	}
}

func search(t *testing.T, s tools.Search, args map[string]any) (string, error) {
	t.Helper()
	return webTool(t, tools.Web{Search: s}, tools.WebSearchTool).Call(context.Background(), tools.Run{}, args)
}

// TestWebSearchProviders asks a double of each provider's API, checks the
// request each receives (path, query, key header, body), and the numbered
// list the model gets.
func TestWebSearchProviders(t *testing.T) {
	t.Parallel()
	const key = "BSA-secret-key-42"
	type seen struct {
		method, path, query, token, auth, body string
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("X-Subscription-Token"), r.Header.Get("Authorization"), string(b)}
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/searx/search":
			io.WriteString(w, `{"query":"neapolitan pizza","results":[
				{"title":"Neapolitan pizza - Wikipedia","url":"https://en.wikipedia.org/wiki/Neapolitan_pizza","content":"Neapolitan pizza is a style of pizza made with tomatoes and mozzarella cheese.","engine":"wikipedia"},
				{"title":"AVPN","url":"https://www.pizzanapoletana.org/","content":"The True Neapolitan Pizza Association &amp; its rules."},
				{"title":"Third","url":"https://example.org/3","content":"cut by count"}]}`)
		case "/res/v1/web/search":
			io.WriteString(w, `{"type":"search","web":{"type":"search","results":[
				{"title":"Brave result","url":"https://brave.example/1","description":"The <strong>neapolitan</strong> way."}]}}`)
		case "/tavily":
			io.WriteString(w, `{"query":"neapolitan pizza","results":[
				{"title":"Tavily result","url":"https://tavily.example/1","content":"From Tavily.","score":0.9}]}`)
		}
	}))
	defer srv.Close()

	out, err := search(t, tools.Search{Provider: tools.SearchSearXNG, URL: srv.URL + "/searx/"}, map[string]any{"query": "neapolitan  pizza", "count": json.Number("2")})
	if err != nil {
		t.Fatalf("searxng: %v", err)
	}
	req := <-got
	if req.method != "GET" || req.path != "/searx/search" || req.query != "format=json&q=neapolitan+pizza" {
		t.Errorf("searxng request %+v", req)
	}
	want := `Results for "neapolitan pizza":

1. Neapolitan pizza - Wikipedia
   https://en.wikipedia.org/wiki/Neapolitan_pizza
   Neapolitan pizza is a style of pizza made with tomatoes and mozzarella cheese.

2. AVPN
   https://www.pizzanapoletana.org/
   The True Neapolitan Pizza Association & its rules.`
	if out != want {
		t.Errorf("searxng result:\n%s\nwant:\n%s", out, want)
	}

	out, err = search(t, tools.Search{Provider: tools.SearchBrave, URL: srv.URL + "/res/v1/web/search", Key: key}, map[string]any{"query": "neapolitan pizza"})
	if err != nil {
		t.Fatalf("brave: %v", err)
	}
	req = <-got
	if req.method != "GET" || req.path != "/res/v1/web/search" || req.query != "count=8&q=neapolitan+pizza" || req.token != key || req.auth != "" {
		t.Errorf("brave request %+v", req)
	}
	if want := "1. Brave result\n   https://brave.example/1\n   The neapolitan way."; !strings.HasSuffix(out, want) {
		t.Errorf("brave result:\n%s\nwant it to end:\n%s", out, want)
	}

	out, err = search(t, tools.Search{Provider: tools.SearchTavily, URL: srv.URL + "/tavily", Key: key}, map[string]any{"query": "neapolitan pizza", "count": json.Number("3")})
	if err != nil {
		t.Fatalf("tavily: %v", err)
	}
	req = <-got
	var body map[string]any
	if err := json.Unmarshal([]byte(req.body), &body); err != nil {
		t.Fatalf("tavily body %q: %v", req.body, err)
	}
	if req.method != "POST" || req.path != "/tavily" || req.auth != "Bearer "+key || req.token != "" || body["query"] != "neapolitan pizza" || body["max_results"] != 3.0 || len(body) != 2 {
		t.Errorf("tavily request %+v", req)
	}
	if want := "1. Tavily result\n   https://tavily.example/1\n   From Tavily."; !strings.HasSuffix(out, want) {
		t.Errorf("tavily result:\n%s", out)
	}
}

// TestWebSearchErrors: a rate limit, a failure, a refused key and an
// answer that is not JSON each give an error naming the provider and the
// status, and none carries the key, even when the provider echoes it.
func TestWebSearchErrors(t *testing.T) {
	t.Parallel()
	const key = "tvly-very-secret-0123456789"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		echo := r.Header.Get("Authorization") + r.Header.Get("X-Subscription-Token")
		switch r.URL.Path {
		case "/429":
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprintf(w, `{"detail":{"error":"rate limit exceeded for %s"}}`, echo)
		case "/500":
			http.Error(w, "upstream exploded", http.StatusInternalServerError)
		case "/401":
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"detail":"invalid key %s"}`, echo)
		case "/html":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, "<html>a login page for %s</html>", echo)
		case "/nothing":
			io.WriteString(w, `{"message":"ok"}`)
		}
	}))
	defer srv.Close()
	cases := []struct {
		provider, path string
		want           []string
	}{
		{tools.SearchTavily, "/429", []string{"web search failed: tavily answered 429 Too Many Requests", "rate limit", "try again later"}},
		{tools.SearchBrave, "/429", []string{"brave answered 429 Too Many Requests"}},
		{tools.SearchTavily, "/500", []string{"tavily answered 500 Internal Server Error", "upstream exploded"}},
		{tools.SearchBrave, "/401", []string{"brave answered 401 Unauthorized", "the API key (PIZZA_SEARCH_KEY) was refused"}},
		{tools.SearchTavily, "/html", []string{"tavily's answer is not the JSON expected", "text/html"}},
		{tools.SearchBrave, "/html", []string{"brave's answer is not the JSON expected"}},
		{tools.SearchTavily, "/nothing", []string{`no "results"`}},
	}
	for _, c := range cases {
		_, err := search(t, tools.Search{Provider: c.provider, URL: srv.URL + c.path, Key: key}, map[string]any{"query": "q"})
		if err == nil {
			t.Errorf("%s %s: no error", c.provider, c.path)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s %s: %q, want it to say %q", c.provider, c.path, err, w)
			}
		}
		if strings.Contains(err.Error(), key) || strings.Contains(err.Error(), "very-secret") {
			t.Errorf("%s %s: the error carries the key: %q", c.provider, c.path, err)
		}
	}
	// SearXNG without its JSON format enabled answers 403.
	forbidden := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "Forbidden", http.StatusForbidden)
	}))
	defer forbidden.Close()
	if _, err := search(t, tools.Search{Provider: tools.SearchSearXNG, URL: forbidden.URL}, map[string]any{"query": "q"}); err == nil || !strings.Contains(err.Error(), "searxng answered 403 Forbidden") || !strings.Contains(err.Error(), "search.formats") {
		t.Errorf("searxng 403: %v", err)
	}
	// A provider that does not answer in time.
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer slow.Close()
	if _, err := search(t, tools.Search{Provider: tools.SearchBrave, URL: slow.URL, Key: key, Timeout: 200 * time.Millisecond}, map[string]any{"query": "q"}); err == nil || !strings.Contains(err.Error(), "brave did not answer within 200ms") {
		t.Errorf("a silent provider: %v", err)
	}
}
