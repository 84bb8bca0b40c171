package tools

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"pizzabot/netguard"
)

// The names of the web tools.
const (
	WebFetchTool  = "web_fetch"
	WebSearchTool = "web_search"
)

// Web configures the web tools: web_fetch, always there, and web_search,
// there only when a search provider is configured.
type Web struct {
	// Guard checks every address web_fetch connects to, redirects
	// included, at connect time; its Rules are the admin's exceptions
	// (PIZZA_FETCH_ALLOW). nil: the zero Guard, which reaches nothing
	// inside the server's network.
	Guard *netguard.Guard
	// FetchTimeout bounds one fetch, from the request to the last byte of
	// the body; DefaultFetchTimeout when zero.
	FetchTimeout time.Duration
	// FetchMaxBytes is the most of a response body web_fetch reads;
	// DefaultFetchMaxBytes when zero. An HTML or text page past it is read
	// that far (the result says so); a PDF past it is refused, since half
	// a PDF cannot be opened.
	FetchMaxBytes int64
	// FetchMaxChars is the most characters of content one web_fetch call
	// returns; the rest is read with its offset argument.
	// DefaultFetchMaxChars when zero.
	FetchMaxChars int
	// Search is web_search's provider.
	Search Search
}

// Defaults of Web.
const (
	DefaultFetchTimeout        = 20 * time.Second
	DefaultFetchMaxBytes int64 = 5 << 20
	DefaultFetchMaxChars       = 40_000
	DefaultSearchTimeout       = 15 * time.Second
)

// Search providers (PIZZA_SEARCH_PROVIDER).
const (
	SearchSearXNG = "searxng"
	SearchBrave   = "brave"
	SearchTavily  = "tavily"
)

// Search is the search provider web_search asks, as the admin configured
// it (PIZZA_SEARCH_PROVIDER, PIZZA_SEARCH_URL, PIZZA_SEARCH_KEY).
type Search struct {
	// Provider is SearchSearXNG, SearchBrave or SearchTavily; "": no
	// web_search.
	Provider string
	// URL is a SearXNG instance's address (its /search is asked), or, for
	// Brave and Tavily, an endpoint to use instead of the provider's own
	// (a proxy, a test double).
	URL string
	// Key is Brave's or Tavily's API key. It is sent to the provider and
	// nowhere else: never logged, never in an error.
	Key string
	// Timeout bounds one search; DefaultSearchTimeout when zero.
	Timeout time.Duration
}

// Configured reports whether a provider is set.
func (s Search) Configured() bool { return s.Provider != "" }

// Check reports what is wrong with the configuration, for the start of the
// server: an unknown provider, a provider that needs a key without one,
// SearXNG without its URL, a URL that is not http(s), a URL or key without
// a provider. No message carries the key.
func (s Search) Check() []error {
	var errs []error
	switch s.Provider {
	case "":
		if s.URL != "" {
			errs = append(errs, errors.New("PIZZA_SEARCH_URL is set without PIZZA_SEARCH_PROVIDER (searxng, brave or tavily)"))
		}
		if s.Key != "" {
			errs = append(errs, errors.New("PIZZA_SEARCH_KEY is set without PIZZA_SEARCH_PROVIDER (searxng, brave or tavily)"))
		}
		return errs
	case SearchSearXNG:
		if s.URL == "" {
			errs = append(errs, errors.New("PIZZA_SEARCH_URL is required with PIZZA_SEARCH_PROVIDER=searxng: the instance's address, e.g. http://searxng:8080"))
		}
		if s.Key != "" {
			errs = append(errs, errors.New("PIZZA_SEARCH_KEY is set, but searxng takes no key"))
		}
	case SearchBrave, SearchTavily:
		if s.Key == "" {
			errs = append(errs, fmt.Errorf("PIZZA_SEARCH_KEY is required with PIZZA_SEARCH_PROVIDER=%s: the provider's API key", s.Provider))
		}
	default:
		return append(errs, fmt.Errorf("PIZZA_SEARCH_PROVIDER %q: want searxng, brave or tavily", s.Provider))
	}
	if s.URL != "" {
		if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("PIZZA_SEARCH_URL %q: want an http or https URL", s.URL))
		} else if u.User != nil {
			errs = append(errs, errors.New("PIZZA_SEARCH_URL: a URL with a user name or password is refused (it would be shown in errors)"))
		}
	}
	return errs
}

// WebTools returns web_fetch, and web_search when a provider is
// configured. Both only read: a call cut short by a crash runs again
// without asking anyone (Idempotent).
func WebTools(w Web) []Tool {
	out := []Tool{fetchTool(w)}
	if w.Search.Configured() {
		out = append(out, searchTool(w.Search))
	}
	return out
}

// webDefault is v, or def when v is zero.
func webDefault[T int | int64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// shortText is s on one line, at most n characters.
func shortText(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
