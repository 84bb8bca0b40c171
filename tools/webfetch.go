package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	readability "codeberg.org/readeck/go-readability/v2"
	"github.com/JohannesKaufmann/html-to-markdown/v2/converter"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/base"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/commonmark"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/table"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
	"golang.org/x/net/html/charset"

	"pizzabot/agent"
	"pizzabot/db"
	"pizzabot/netguard"
)

// web_fetch reads what a model names, so it is the one tool most likely to
// be pointed at the server's own network (a prompt injection in a page
// asking to fetch http://169.254.169.254/ or an admin panel): every
// connection, redirects included, goes through netguard, which checks the
// address it connects to, not the name.

// fetchUserAgent says who fetches, so a site can tell an agent from a
// browser.
const fetchUserAgent = "Mozilla/5.0 (compatible; pizza-bot web_fetch)"

// readabilityMaxElems bounds the pages readability scores: past it the
// whole page is converted instead (readability's scoring grows faster than
// the page, and nothing interrupts it).
const readabilityMaxElems = 60_000

func fetchTool(w Web) Tool {
	guard := w.Guard
	if guard == nil {
		guard = &netguard.Guard{}
	}
	timeout := webDefault(w.FetchTimeout, DefaultFetchTimeout)
	f := &fetcher{
		client:   guard.Client(timeout),
		timeout:  timeout,
		maxBytes: webDefault(w.FetchMaxBytes, DefaultFetchMaxBytes),
		maxChars: webDefault(w.FetchMaxChars, DefaultFetchMaxChars),
	}
	return Tool{
		Spec: agent.ToolSpec{
			Name: WebFetchTool,
			Description: "Fetch a web page (an http or https URL) and return its main content as Markdown, without the navigation, ads and scripts around it; " +
				"a PDF as its text, plain text and JSON as they are. The result starts with the final URL (after redirects) and the title. " +
				fmt.Sprintf("At most %d characters come back per call: a longer page says where it was cut, and offset reads on from there. ", f.maxChars) +
				"Addresses inside the server's own network are refused unless an admin allowed them.",
			Parameters: schema(`{"type":"object","properties":{
				"url":{"type":"string","minLength":1,"maxLength":4096,"description":"The http or https URL to fetch, e.g. https://example.com/article"},
				"offset":{"type":"integer","minimum":0,"description":"Characters of the content to skip, to read on where an earlier call was cut (default 0)"}},
				"required":["url"],"additionalProperties":false}`),
		},
		Idempotent: true,
		Call:       f.call,
	}
}

type fetcher struct {
	client   *http.Client
	timeout  time.Duration
	maxBytes int64
	maxChars int
}

// page is what a fetch found, before it is cut to one call's share.
type page struct {
	url     string // the final URL, after redirects
	from    string // the URL asked for, when a redirect led elsewhere
	title   string
	kind    string   // "HTML", "PDF, 3 pages", "text/plain", ...
	notes   []string // said before the content: a body read only in part, ...
	content string
	// more: the content stops before the document's end for a reason
	// other than the cut (a PDF read only as far as this call needs).
	more bool
}

func (f *fetcher) call(ctx context.Context, _ Run, args map[string]any) (string, error) {
	raw, _ := args["url"].(string)
	u, err := fetchURL(strings.TrimSpace(raw))
	if err != nil {
		return "", err
	}
	offset := int(intArg(args, "offset", 0, 0, 1<<40))
	p, err := f.get(ctx, u, offset+f.maxChars)
	if err != nil {
		return "", err
	}
	return p.render(offset, f.maxChars)
}

// fetchURL parses what the model asked for: http or https, a host, no user
// name or password (they would be kept in the call's record), no fragment.
func fetchURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%q is not a URL: %w", raw, err)
	}
	u.Scheme = strings.ToLower(u.Scheme)
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%q is not an http or https URL: web_fetch reads web pages only", raw)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("%q has no host", raw)
	}
	if u.User != nil {
		return nil, errors.New("a URL with a user name or password is refused: web_fetch does not sign in")
	}
	u.Fragment, u.RawFragment = "", ""
	return u, nil
}

// get fetches u and turns the body into text: at least need characters of
// it when the document has that many (a PDF is read no further).
func (f *fetcher) get(ctx context.Context, u *url.URL, need int) (*page, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	req.Header.Set("User-Agent", fetchUserAgent)
	req.Header.Set("Accept", "text/html,application/xhtml+xml,application/pdf;q=0.9,text/plain;q=0.9,application/json;q=0.9,*/*;q=0.5")
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, f.explain(u, err)
	}
	defer resp.Body.Close()
	final := new(*resp.Request.URL)
	final.Fragment, final.RawFragment = "", "" // a redirect's #part means nothing here
	p := &page{url: final.String()}
	if p.url != u.String() {
		p.from = u.String()
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Errorf("%s answered %s", final, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, f.maxBytes+1))
	if err != nil {
		return nil, f.explain(final, err)
	}
	cut := int64(len(body)) > f.maxBytes
	if cut {
		body = body[:f.maxBytes]
	}
	contentType := resp.Header.Get("Content-Type")
	mediaType, params, _ := mime.ParseMediaType(contentType)
	if mediaType == "" {
		mediaType, params, _ = mime.ParseMediaType(http.DetectContentType(body))
		contentType = mediaType
	}
	read := fmt.Sprintf("The document is larger than %s: only its first %s were read.", db.FormatBytes(f.maxBytes), db.FormatBytes(f.maxBytes))
	switch {
	case mediaType == "text/html" || mediaType == "application/xhtml+xml":
		p.kind = "HTML"
		p.title, p.content, err = htmlToMarkdown(ctx, body, contentType, final)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", final, err)
		}
	case mediaType == "application/pdf" || mediaType == "application/x-pdf":
		if cut {
			return nil, fmt.Errorf("%s is a PDF larger than %s, the most web_fetch reads", final, db.FormatBytes(f.maxBytes))
		}
		if err := p.readPDF(ctx, body, need); err != nil {
			return nil, fmt.Errorf("%s: %w", final, err)
		}
		p.title = fileTitle(final)
	case isTextType(mediaType):
		p.kind = mediaType
		p.title = fileTitle(final)
		p.content = decodeText(body, params["charset"])
	default:
		return nil, fmt.Errorf("%s is %s, which web_fetch does not read: it reads web pages (HTML), PDFs, text and JSON", final, mediaType)
	}
	if cut {
		p.notes = append(p.notes, read)
	}
	return p, nil
}

// explain turns a failed exchange into an error for the model: a refusal
// says the server's network is off limits (and keeps the *netguard.Refused
// for errors.As), a timeout says how long was waited.
func (f *fetcher) explain(u *url.URL, err error) error {
	target := u.String()
	var ue *url.Error
	if errors.As(err, &ue) {
		target, err = ue.URL, ue.Err
	}
	var refused *netguard.Refused
	switch {
	case errors.As(err, &refused):
		via := ""
		if target != u.String() {
			via = " (reached by a redirect from " + u.String() + ")"
		}
		return fmt.Errorf("%s%s: %w. web_fetch does not reach addresses inside the server's own network; an admin can allow a host with PIZZA_FETCH_ALLOW", target, via, refused)
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return fmt.Errorf("%s did not answer in full within %s: try again later, or another page", target, f.timeout)
	}
	return fmt.Errorf("%s: %w", target, err)
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// isTextType reports whether a media type is read as it is: text, JSON,
// XML (feeds among them).
func isTextType(t string) bool {
	switch {
	case strings.HasPrefix(t, "text/"),
		t == "application/json", strings.HasSuffix(t, "+json"),
		t == "application/xml", strings.HasSuffix(t, "+xml"),
		t == "application/javascript", t == "application/x-ndjson":
		return true
	}
	return false
}

// decodeText is body as UTF-8: from the declared character set, else as
// UTF-8 with invalid bytes replaced.
func decodeText(body []byte, cs string) string {
	if cs != "" {
		if enc, _ := charset.Lookup(cs); enc != nil {
			if b, err := enc.NewDecoder().Bytes(body); err == nil {
				body = b
			}
		}
	}
	return strings.ToValidUTF8(string(body), "\uFFFD")
}

// fileTitle is the last part of the URL's path, the title of a document
// that has none of its own.
func fileTitle(u *url.URL) string {
	if name := path.Base(u.Path); name != "/" && name != "." {
		if un, err := url.PathUnescape(name); err == nil {
			return un
		}
		return name
	}
	return u.Host
}

// readPDF reads the PDF's text through the attachments' PDF path, page by
// page until need characters (four bytes each at most) are there.
func (p *page) readPDF(ctx context.Context, body []byte, need int) error {
	t, err := readPDF(ctx, body, 1, 1<<20, 4*need)
	switch {
	case errors.Is(err, ErrPDFEncrypted):
		return errors.New("the PDF is encrypted with a password: its text cannot be read")
	case errors.Is(err, ErrPDFBroken):
		return errors.New("the file is not a valid PDF or is damaged, so its text cannot be read")
	case err != nil:
		return fmt.Errorf("the PDF could not be read: %w", err)
	}
	p.kind = fmt.Sprintf("PDF, %d pages", t.Pages)
	var b strings.Builder
	empty := true
	for i, text := range t.Text {
		text = strings.TrimSpace(text)
		empty = empty && text == ""
		fmt.Fprintf(&b, "--- page %d ---\n%s\n\n", t.First+i, text)
	}
	if empty && len(t.Text) == t.Pages {
		p.notes = append(p.notes, "The PDF has no text layer: it is probably scanned images, which cannot be read as text.")
	}
	p.content = strings.TrimRight(b.String(), "\n")
	p.more = t.First+len(t.Text)-1 < t.Pages
	return nil
}

// htmlToMarkdown finds the page's main content (readability) and writes it
// as Markdown, links made absolute; a page where readability finds no
// article is converted whole.
func htmlToMarkdown(ctx context.Context, body []byte, contentType string, pageURL *url.URL) (title, md string, err error) {
	r, err := charset.NewReader(bytes.NewReader(body), contentType)
	if err != nil {
		r = bytes.NewReader(body)
	}
	doc, err := html.Parse(r)
	if err != nil {
		return "", "", fmt.Errorf("the page is not HTML that can be read: %w", err)
	}
	title = docTitle(doc)
	parser := readability.NewParser()
	parser.MaxElemsToParse = readabilityMaxElems
	node := doc
	if art, err := parser.ParseDocument(doc, pageURL); err == nil && art.Node != nil && strings.TrimSpace(textOf(art.Node)) != "" {
		node = art.Node
		if t := strings.TrimSpace(art.Title()); t != "" {
			title = t
		}
	}
	dropDataImages(node)
	conv := converter.NewConverter(converter.WithPlugins(
		base.NewBasePlugin(),
		commonmark.NewCommonmarkPlugin(),
		table.NewTablePlugin(),
	))
	out, err := conv.ConvertNode(node, converter.WithDomain(pageURL.String()), converter.WithContext(ctx))
	if err != nil {
		return "", "", fmt.Errorf("the page could not be converted to Markdown: %w", err)
	}
	return strings.Join(strings.Fields(title), " "), strings.TrimSpace(string(out)), nil
}

// docTitle is the text of the document's <title>.
func docTitle(n *html.Node) string {
	if n.Type == html.ElementNode && n.DataAtom == atom.Title {
		return textOf(n)
	}
	if n.Type == html.ElementNode && (n.DataAtom == atom.Body || n.DataAtom == atom.Svg) {
		return ""
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if t := docTitle(c); t != "" {
			return t
		}
	}
	return ""
}

func textOf(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

// dropDataImages removes images inlined as data: URLs, which would be
// kilobytes of base64 in the Markdown and nothing a model can read.
func dropDataImages(n *html.Node) {
	for c := n.FirstChild; c != nil; {
		next := c.NextSibling
		if c.Type == html.ElementNode && c.DataAtom == atom.Img {
			for _, a := range c.Attr {
				if a.Key == "src" && strings.HasPrefix(strings.TrimSpace(strings.ToLower(a.Val)), "data:") {
					n.RemoveChild(c)
					break
				}
			}
		} else {
			dropDataImages(c)
		}
		c = next
	}
}

// render is the result of one call: the header, then the content from
// character offset on, at most maxChars of it, cut at a line's end when
// one is near, and a note saying where to read on.
func (p *page) render(offset, maxChars int) (string, error) {
	total := utf8.RuneCountInString(p.content)
	if offset > 0 && offset >= total {
		return "", fmt.Errorf("%s has %d characters of content: offset %d is past its end", p.url, total, offset)
	}
	start := byteAt(p.content, offset)
	rest := p.content[start:]
	part, cut := rest, false
	if end := byteAt(rest, maxChars); end < len(rest) {
		part, cut = rest[:end], true
		// Rather end at a line's end in the last fifth of the share.
		if nl := strings.LastIndexByte(part, '\n'); nl >= 0 && utf8.RuneCountInString(part[:nl+1]) >= maxChars*4/5 {
			part = part[:nl+1]
		}
	}
	next := offset + utf8.RuneCountInString(part)

	var b strings.Builder
	fmt.Fprintf(&b, "URL: %s\n", p.url)
	title := p.title
	if title == "" {
		title = "(none)"
	}
	fmt.Fprintf(&b, "Title: %s\n", title)
	if p.from != "" {
		fmt.Fprintf(&b, "Redirected from: %s\n", p.from)
	}
	fmt.Fprintf(&b, "Type: %s\n", p.kind)
	for _, n := range p.notes {
		fmt.Fprintf(&b, "Note: %s\n", n)
	}
	if offset > 0 || cut || p.more {
		of := fmt.Sprintf(" of %d", total)
		if p.more {
			of = ""
		}
		fmt.Fprintf(&b, "Content: characters %d to %d%s\n", offset, next, of)
	}
	b.WriteString("\n")
	if strings.TrimSpace(part) == "" {
		b.WriteString("(The page has no text content.)")
	} else {
		b.WriteString(strings.TrimRight(part, "\n"))
	}
	if cut || p.more {
		fmt.Fprintf(&b, "\n\n… (cut at character %d: call web_fetch with the same url and offset %d to read on)", next, next)
	}
	return b.String(), nil
}

// byteAt is the byte index of the n-th character of s (len(s) past its
// end).
func byteAt(s string, n int) int {
	for i := range s {
		if n == 0 {
			return i
		}
		n--
	}
	return len(s)
}
