package main

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pizzabot/tools"
)

// The web tools' settings: PIZZA_FETCH_ALLOW becomes the guard's rules, a
// search provider is offered only when complete, and no error shows the
// key.
func TestConfigWeb(t *testing.T) {
	t.Parallel()
	const key = "BSA-do-not-print-me"
	keyFile := filepath.Join(t.TempDir(), "search.key")
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		env     map[string]string
		want    tools.Search
		tools   string // the web tools offered
		wantErr []string
	}{
		{name: "nothing", env: nil, tools: "web_fetch"},
		{name: "searxng", env: map[string]string{"PIZZA_SEARCH_PROVIDER": "SearXNG", "PIZZA_SEARCH_URL": " http://searxng:8080 "},
			want: tools.Search{Provider: "searxng", URL: "http://searxng:8080"}, tools: "web_fetch,web_search"},
		{name: "brave", env: map[string]string{"PIZZA_SEARCH_PROVIDER": "brave", "PIZZA_SEARCH_KEY": key},
			want: tools.Search{Provider: "brave", Key: key}, tools: "web_fetch,web_search"},
		{name: "tavily key file", env: map[string]string{"PIZZA_SEARCH_PROVIDER": "tavily", "PIZZA_SEARCH_KEY_FILE": keyFile, "PIZZA_SEARCH_URL": "https://proxy.internal/tavily"},
			want: tools.Search{Provider: "tavily", Key: key, URL: "https://proxy.internal/tavily"}, tools: "web_fetch,web_search"},
		{name: "unknown provider", env: map[string]string{"PIZZA_SEARCH_PROVIDER": "google", "PIZZA_SEARCH_KEY": key},
			wantErr: []string{`PIZZA_SEARCH_PROVIDER "google": want searxng, brave or tavily`}},
		{name: "brave without key", env: map[string]string{"PIZZA_SEARCH_PROVIDER": "brave"},
			wantErr: []string{"PIZZA_SEARCH_KEY is required with PIZZA_SEARCH_PROVIDER=brave"}},
		{name: "tavily without key", env: map[string]string{"PIZZA_SEARCH_PROVIDER": "tavily"},
			wantErr: []string{"PIZZA_SEARCH_KEY is required with PIZZA_SEARCH_PROVIDER=tavily"}},
		{name: "searxng without URL", env: map[string]string{"PIZZA_SEARCH_PROVIDER": "searxng"},
			wantErr: []string{"PIZZA_SEARCH_URL is required with PIZZA_SEARCH_PROVIDER=searxng"}},
		{name: "searxng with a key", env: map[string]string{"PIZZA_SEARCH_PROVIDER": "searxng", "PIZZA_SEARCH_URL": "http://searxng:8080", "PIZZA_SEARCH_KEY": key},
			wantErr: []string{"searxng takes no key"}},
		{name: "bad URL", env: map[string]string{"PIZZA_SEARCH_PROVIDER": "searxng", "PIZZA_SEARCH_URL": "searxng:8080"},
			wantErr: []string{`PIZZA_SEARCH_URL "searxng:8080": want an http or https URL`}},
		{name: "key without provider", env: map[string]string{"PIZZA_SEARCH_KEY": key, "PIZZA_SEARCH_URL": "http://x"},
			wantErr: []string{"PIZZA_SEARCH_KEY is set without PIZZA_SEARCH_PROVIDER", "PIZZA_SEARCH_URL is set without PIZZA_SEARCH_PROVIDER"}},
		{name: "key and key file", env: map[string]string{"PIZZA_SEARCH_PROVIDER": "brave", "PIZZA_SEARCH_KEY": key, "PIZZA_SEARCH_KEY_FILE": keyFile},
			wantErr: []string{"PIZZA_SEARCH_KEY and PIZZA_SEARCH_KEY_FILE are both set"}},
		{name: "missing key file", env: map[string]string{"PIZZA_SEARCH_PROVIDER": "brave", "PIZZA_SEARCH_KEY_FILE": keyFile + ".gone"},
			wantErr: []string{"PIZZA_SEARCH_KEY_FILE: "}},
		{name: "bad fetch rule", env: map[string]string{"PIZZA_FETCH_ALLOW": "wiki.internal:8080, 10.0.0.0/33"},
			wantErr: []string{`PIZZA_FETCH_ALLOW: "10.0.0.0/33"`}},
	} {
		m := map[string]string{"PIZZA_DATA_ROOT": "/tmp/pizza-config-test"}
		for k, v := range tt.env {
			m[k] = v
		}
		c, err := loadConfig(env(m))
		if len(tt.wantErr) > 0 {
			for _, w := range tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error = %v, want %q", tt.name, err, w)
				}
			}
			if err != nil && strings.Contains(err.Error(), "do-not-print") {
				t.Errorf("%s: the error shows the key: %v", tt.name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if c.Web.Search != tt.want {
			t.Errorf("%s: search = %+v, want %+v", tt.name, c.Web.Search, tt.want)
		}
		var names []string
		for _, tool := range tools.WebTools(c.Web) {
			names = append(names, tool.Spec.Name)
		}
		if got := strings.Join(names, ","); got != tt.tools {
			t.Errorf("%s: web tools %s, want %s", tt.name, got, tt.tools)
		}
	}
}

// PIZZA_FETCH_ALLOW's exceptions let their hosts and addresses through the
// fetch guard, and nothing else inside.
func TestConfigWebFetchAllow(t *testing.T) {
	t.Parallel()
	c, err := loadConfig(env(map[string]string{"PIZZA_DATA_ROOT": "/tmp/pizza-config-test", "PIZZA_FETCH_ALLOW": "wiki.internal:8080, 10.1.0.0/16 [fd00::5]:*"}))
	if err != nil {
		t.Fatal(err)
	}
	g := c.Web.Guard
	if g == nil || len(g.Rules) != 3 || g.Loopback {
		t.Fatalf("guard = %+v, want three rules and no loopback", g)
	}
	for _, tt := range []struct {
		host, addr string
		port       int
		ok         bool
	}{
		{"wiki.internal", "10.9.9.9", 8080, true},
		{"wiki.internal", "10.9.9.9", 22, false},
		{"x", "10.1.2.3", 443, true},
		{"x", "10.2.2.3", 443, false},
		{"x", "fd00::5", 5432, true},
		{"x", "127.0.0.1", 80, false},
		{"x", "169.254.169.254", 80, false},
	} {
		if err := g.Check(tt.host, netip.MustParseAddr(tt.addr), tt.port); (err == nil) != tt.ok {
			t.Errorf("Check(%s, %s, %d) = %v, want ok=%v", tt.host, tt.addr, tt.port, err, tt.ok)
		}
	}
}
