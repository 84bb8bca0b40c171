package main

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// env returns a getenv over m.
func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func key(n int) string { return base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", n))) }

// teamEnv is a complete team configuration on all interfaces.
func teamEnv() map[string]string {
	return map[string]string{
		"PIZZA_ADDR":               "0.0.0.0:8080",
		"PIZZA_DATA_ROOT":          "/tmp/pizza-config-test",
		"PIZZA_OIDC_ISSUER":        "https://login.example.com/realms/acme",
		"PIZZA_OIDC_CLIENT_ID":     "pizza-bot",
		"PIZZA_OIDC_CLIENT_SECRET": "s3cret",
		"PIZZA_PUBLIC_URL":         "https://pizza.example.com/",
		"PIZZA_ALLOWED_ORIGINS":    "https://pizza.example.com, https://intranet.example.com:443",
		"PIZZA_SESSION_KEYS":       key(48) + "," + key(32),
		"PIZZA_ADMIN_EMAILS":       "Ada@Example.com, bob@example.com",
		"PIZZA_SECRET_KEY":         key(32),
	}
}

func TestConfigNonLoopbackNeedsSignIn(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		drop    []string
		want    []string // in the error
		wantNot []string
	}{
		{"no OIDC", []string{"PIZZA_OIDC_ISSUER", "PIZZA_OIDC_CLIENT_ID", "PIZZA_OIDC_CLIENT_SECRET"},
			[]string{"not a loopback address", "PIZZA_OIDC_ISSUER"}, []string{"PIZZA_ALLOWED_ORIGINS (", "PIZZA_SESSION_KEYS ("}},
		{"no origins", []string{"PIZZA_ALLOWED_ORIGINS"}, []string{"PIZZA_ALLOWED_ORIGINS"}, []string{"PIZZA_OIDC_ISSUER,"}},
		{"no session keys", []string{"PIZZA_SESSION_KEYS"}, []string{"PIZZA_SESSION_KEYS"}, nil},
		{"nothing", []string{"PIZZA_OIDC_ISSUER", "PIZZA_OIDC_CLIENT_ID", "PIZZA_OIDC_CLIENT_SECRET", "PIZZA_ALLOWED_ORIGINS", "PIZZA_SESSION_KEYS", "PIZZA_PUBLIC_URL"},
			[]string{"PIZZA_OIDC_ISSUER", "PIZZA_ALLOWED_ORIGINS", "PIZZA_SESSION_KEYS", "bind to 127.0.0.1"}, nil},
		{"OIDC without client id", []string{"PIZZA_OIDC_CLIENT_ID"}, []string{"PIZZA_OIDC_CLIENT_ID is not set"}, nil},
		{"OIDC without public URL", []string{"PIZZA_PUBLIC_URL"}, []string{"PIZZA_PUBLIC_URL is not set"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := teamEnv()
			for _, k := range tt.drop {
				delete(e, k)
			}
			_, err := loadConfig(env(e))
			if err == nil {
				t.Fatal("the configuration was accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			for _, w := range tt.wantNot {
				if strings.Contains(err.Error(), w) {
					t.Errorf("error names %q, which is set:\n%v", w, err)
				}
			}
		})
	}
}

func TestConfigTeam(t *testing.T) {
	t.Parallel()
	c, err := loadConfig(env(teamEnv()))
	if err != nil {
		t.Fatal(err)
	}
	if !c.oidcEnabled() || c.PublicURL != "https://pizza.example.com" || c.OIDCClientSecret != "s3cret" {
		t.Errorf("oidc = %v %q %q", c.oidcEnabled(), c.PublicURL, c.OIDCClientSecret)
	}
	if got := strings.Join(c.AllowedOrigins, " "); got != "https://pizza.example.com https://intranet.example.com" {
		t.Errorf("origins = %q", got)
	}
	if len(c.SessionKeys) != 2 || len(c.SessionKeys[0]) != 48 || len(c.SecretKey) != 32 {
		t.Errorf("keys: %d session keys, secret key of %d bytes", len(c.SessionKeys), len(c.SecretKey))
	}
	if got := strings.Join(c.AdminEmails, " "); got != "ada@example.com bob@example.com" {
		t.Errorf("admins = %q", got)
	}

	// A loopback server needs none of it.
	if _, err := loadConfig(env(map[string]string{"PIZZA_DATA_ROOT": "/tmp/pizza-config-test"})); err != nil {
		t.Errorf("loopback without SSO: %v", err)
	}
}

func TestConfigSecrets(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte("from-a-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := teamEnv()
	delete(e, "PIZZA_OIDC_CLIENT_SECRET")
	e["PIZZA_OIDC_CLIENT_SECRET_FILE"] = file
	c, err := loadConfig(env(e))
	if err != nil || c.OIDCClientSecret != "from-a-file" {
		t.Errorf("secret from a file = %q, %v", c.OIDCClientSecret, err)
	}

	const leak = "c2hvcnQta2V5"
	for name, mod := range map[string]func(map[string]string){
		"short session key": func(e map[string]string) { e["PIZZA_SESSION_KEYS"] = leak },
		"short secret key":  func(e map[string]string) { e["PIZZA_SECRET_KEY"] = leak },
		"both secrets":      func(e map[string]string) { e["PIZZA_OIDC_CLIENT_SECRET_FILE"] = file },
		"origin with path":  func(e map[string]string) { e["PIZZA_ALLOWED_ORIGINS"] = "https://x.example/path" },
		"public URL path":   func(e map[string]string) { e["PIZZA_PUBLIC_URL"] = "https://x.example/pizza" },
	} {
		e := teamEnv()
		mod(e)
		_, err := loadConfig(env(e))
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.Contains(err.Error(), leak) {
			t.Errorf("%s: the error shows the key: %v", name, err)
		}
	}
}

// TestConfigTokenLifetimesAndQuota reads PIZZA_TOKEN_TTL,
// PIZZA_TOKEN_MAX_TTL and PIZZA_USER_QUOTA, and reports their problems
// together.
func TestConfigTokenLifetimesAndQuota(t *testing.T) {
	t.Parallel()
	c, err := loadConfig(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.TokenTTL != 90*24*time.Hour || c.TokenMaxTTL != 365*24*time.Hour || c.UserQuota != 1<<30 {
		t.Errorf("defaults: ttl %s, max %s, quota %d", c.TokenTTL, c.TokenMaxTTL, c.UserQuota)
	}
	c, err = loadConfig(env(map[string]string{"PIZZA_TOKEN_MAX_TTL": "720h", "PIZZA_USER_QUOTA": "500MiB"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.TokenTTL != 720*time.Hour || c.UserQuota != 500<<20 {
		t.Errorf("a lowered maximum: ttl %s; quota %d", c.TokenTTL, c.UserQuota)
	}
	for in, want := range map[string]int64{"0": 0, "2GiB": 2 << 30, "1.5G": 3 << 29, "10MB": 10_000_000, "4096": 4096} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	_, err = loadConfig(env(map[string]string{"PIZZA_TOKEN_TTL": "800h", "PIZZA_TOKEN_MAX_TTL": "720h", "PIZZA_USER_QUOTA": "lots"}))
	for _, want := range []string{"PIZZA_TOKEN_TTL 800h0m0s is longer than PIZZA_TOKEN_MAX_TTL", "PIZZA_USER_QUOTA"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %q", err, want)
		}
	}
}

func TestConfigWarnsOfPlainHTTPPublicURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		url  string
		warn bool
	}{
		{"http://pizza.corp.example", true},
		{"http://10.1.2.3:8080", true},
		{"https://pizza.corp.example", false},
		{"http://localhost:8080", false},
		{"http://127.0.0.1:8080", false},
		{"http://[::1]:8080", false},
		{"", false},
	} {
		got := config{PublicURL: c.url}.warnings()
		if (len(got) > 0) != c.warn {
			t.Errorf("%q: warnings %q, want a warning: %v", c.url, got, c.warn)
		}
	}
}
