package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/html"

	"pizzabot/agent"
)

// The providers' own endpoints (PIZZA_SEARCH_URL replaces them).
const (
	braveEndpoint  = "https://api.search.brave.com/res/v1/web/search"
	tavilyEndpoint = "https://api.tavily.com/search"
)

// Search answer limits.
const (
	searchMaxBody    = 2 << 20
	searchMaxSnippet = 400
	searchDefault    = 8
	searchMax        = 20
)

func searchTool(s Search) Tool {
	sr := &searcher{
		cfg: s,
		// A plain client, not netguard's: the provider's address is the
		// admin's word (PIZZA_SEARCH_URL, or the provider's own), never a
		// model's, and a self-hosted SearXNG is usually inside the network
		// on purpose. The proxy from the environment applies.
		client: &http.Client{Timeout: webDefault(s.Timeout, DefaultSearchTimeout)},
	}
	return Tool{
		Spec: agent.ToolSpec{
			Name: WebSearchTool,
			Description: "Search the web and return a numbered list of results, each with its title, URL and a snippet. " +
				"Read a result with web_fetch. Use a few precise words, as in a search box.",
			Parameters: schema(fmt.Sprintf(`{"type":"object","properties":{
				"query":{"type":"string","minLength":1,"maxLength":400,"description":"What to search for, e.g. postgres 17 release notes"},
				"count":{"type":"integer","minimum":1,"maximum":%d,"description":"How many results (default %d)"}},
				"required":["query"],"additionalProperties":false}`, searchMax, searchDefault)),
		},
		Idempotent: true,
		Call:       sr.call,
	}
}

type searcher struct {
	cfg    Search
	client *http.Client
}

// searchResult is one hit, in every provider's shape.
type searchResult struct {
	Title, URL, Snippet string
}

func (sr *searcher) call(ctx context.Context, _ Run, args map[string]any) (string, error) {
	q, _ := args["query"].(string)
	q = strings.Join(strings.Fields(q), " ")
	if q == "" {
		return "", errors.New("query is empty")
	}
	count := int(intArg(args, "count", searchDefault, 1, searchMax))
	results, err := sr.search(ctx, q, count)
	if err != nil {
		// The key never leaves in an error, whatever carried it.
		return "", errors.New(sr.redact(err.Error()))
	}
	if len(results) > count {
		results = results[:count]
	}
	if len(results) == 0 {
		return fmt.Sprintf("No results for %q.", q), nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Results for %q:\n", q)
	for i, r := range results {
		title := plainText(r.Title, 200)
		if title == "" {
			title = "(no title)"
		}
		fmt.Fprintf(&b, "\n%d. %s\n   %s\n", i+1, title, r.URL)
		if s := plainText(r.Snippet, searchMaxSnippet); s != "" {
			fmt.Fprintf(&b, "   %s\n", s)
		}
	}
	return strings.TrimRight(b.String(), "\n"), nil
}

// search asks the provider and reads its answer.
func (sr *searcher) search(ctx context.Context, q string, count int) ([]searchResult, error) {
	req, err := sr.request(ctx, q, count)
	if err != nil {
		return nil, err
	}
	resp, err := sr.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if isTimeout(err) {
			return nil, fmt.Errorf("web search failed: %s did not answer within %s", sr.cfg.Provider, sr.client.Timeout)
		}
		return nil, fmt.Errorf("web search failed: %s could not be reached: %v", sr.cfg.Provider, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, searchMaxBody))
	if err != nil {
		return nil, fmt.Errorf("web search failed: reading %s's answer: %v", sr.cfg.Provider, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, sr.statusError(resp.StatusCode, body)
	}
	results, err := sr.parse(body)
	if err != nil {
		return nil, fmt.Errorf("web search failed: %s's answer is not the JSON expected (%d bytes, %s): %v", sr.cfg.Provider, len(body), resp.Header.Get("Content-Type"), err)
	}
	return results, nil
}

// request is the provider's HTTP request for q.
func (sr *searcher) request(ctx context.Context, q string, count int) (*http.Request, error) {
	endpoint := sr.cfg.URL
	switch sr.cfg.Provider {
	case SearchSearXNG:
		// The instance's address, or its /search already.
		endpoint = strings.TrimRight(endpoint, "/")
		if !strings.HasSuffix(endpoint, "/search") {
			endpoint += "/search"
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"?"+url.Values{"q": {q}, "format": {"json"}}.Encode(), nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "application/json")
		return req, nil
	case SearchBrave:
		if endpoint == "" {
			endpoint = braveEndpoint
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"?"+url.Values{"q": {q}, "count": {fmt.Sprint(count)}}.Encode(), nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "application/json")
		req.Header.Set("X-Subscription-Token", sr.cfg.Key)
		return req, nil
	case SearchTavily:
		if endpoint == "" {
			endpoint = tavilyEndpoint
		}
		body, err := json.Marshal(map[string]any{"query": q, "max_results": count})
		if err != nil {
			return nil, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json")
		req.Header.Set("Authorization", "Bearer "+sr.cfg.Key)
		return req, nil
	}
	return nil, fmt.Errorf("unknown search provider %q", sr.cfg.Provider)
}

// parse reads the provider's results.
func (sr *searcher) parse(body []byte) ([]searchResult, error) {
	type hit struct {
		Title       string `json:"title"`
		URL         string `json:"url"`
		Content     string `json:"content"`
		Description string `json:"description"`
	}
	var answer struct {
		Results *[]hit `json:"results"` // SearXNG, Tavily
		Web     *struct {
			Results []hit `json:"results"`
		} `json:"web"` // Brave
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return nil, err
	}
	var hits []hit
	switch {
	case sr.cfg.Provider == SearchBrave && answer.Web != nil:
		hits = answer.Web.Results
	case sr.cfg.Provider == SearchBrave:
		// Brave leaves "web" out when nothing matched.
	case answer.Results != nil:
		hits = *answer.Results
	default:
		return nil, errors.New(`no "results" in it`)
	}
	out := make([]searchResult, 0, len(hits))
	for _, h := range hits {
		if h.URL == "" {
			continue
		}
		snippet := h.Content
		if sr.cfg.Provider == SearchBrave {
			snippet = h.Description
		}
		out = append(out, searchResult{Title: h.Title, URL: h.URL, Snippet: snippet})
	}
	return out, nil
}

// statusError names the provider and its status, says what it likely
// means, and quotes the start of the answer (the key taken out by call).
func (sr *searcher) statusError(status int, body []byte) error {
	var hint string
	switch {
	case sr.cfg.Provider == SearchSearXNG && status == http.StatusForbidden:
		hint = "; SearXNG answers 403 when its JSON format is off: add json to search.formats in its settings.yml"
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		hint = "; the API key (PIZZA_SEARCH_KEY) was refused: an admin must check it"
	case status == http.StatusTooManyRequests || status == http.StatusPaymentRequired:
		hint = "; its rate limit or quota is reached: try again later, or do without searching"
	case status >= 500:
		hint = "; the provider failed: try again later"
	}
	msg := fmt.Sprintf("web search failed: %s answered %d %s%s", sr.cfg.Provider, status, http.StatusText(status), hint)
	if s := shortText(string(bytes.ToValidUTF8(body, nil)), 200); s != "" {
		msg += ": " + s
	}
	return errors.New(msg)
}

// redact takes the key out of s.
func (sr *searcher) redact(s string) string {
	if sr.cfg.Key == "" {
		return s
	}
	return strings.ReplaceAll(s, sr.cfg.Key, "[key]")
}

// plainText is a snippet as text: tags gone (Brave marks matches with
// <strong>), entities decoded, on one line, at most n characters.
func plainText(s string, n int) string {
	if strings.ContainsAny(s, "<&") {
		var b strings.Builder
		z := html.NewTokenizer(strings.NewReader(s))
		for {
			tt := z.Next()
			if tt == html.ErrorToken {
				break
			}
			if tt == html.TextToken {
				b.Write(z.Text())
			}
		}
		s = b.String()
	}
	return shortText(s, n)
}
