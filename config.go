package main

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	// The zone database inside the binary: PIZZA_TIMEZONE must load on a
	// host (or image) without /usr/share/zoneinfo. cron imports it for the
	// schedules too; one copy is linked either way.
	_ "time/tzdata"

	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/agent"
	"pizzabot/db"
	"pizzabot/handlers"
	"pizzabot/notify"
	"pizzabot/tools"
)

// config is the server's configuration, read once from the environment.
type config struct {
	Addr            string
	DataRoot        string
	DatabaseURL     string // empty: run a private PostgreSQL under DataRoot
	Model           string
	LogLevel        slog.Level
	LogFormat       string
	ShutdownTimeout time.Duration

	// Sign-in (OIDC) and sessions: all set, or none on a loopback address.
	OIDCIssuer       string
	OIDCClientID     string
	OIDCClientSecret string
	PublicURL        string
	AdminEmails      []string
	OIDCAdminGroup   string
	SessionKeys      [][]byte
	SessionIdle      time.Duration
	SessionMaxAge    time.Duration
	// AllowedOrigins are trusted for state-changing requests.
	AllowedOrigins []string
	// SecretKey encrypts provider keys stored in the database; nil: none
	// can be stored.
	SecretKey []byte

	// TokenTTL is the default lifetime of a new API token, TokenMaxTTL the
	// longest allowed.
	TokenTTL    time.Duration
	TokenMaxTTL time.Duration
	// UserQuota is each user's storage limit in bytes (attachments, scratch
	// files, the sandbox journal); 0: none.
	UserQuota int64

	// Grants are the host folders agents may reach from PIZZA_GRANTS and
	// <data root>/grants.json (docs/workspace.md).
	Grants []db.GrantSpec

	// Capacity (loadCapacity): the database connections of the request
	// and worker pools, the steps one process runs at once, and the rate
	// limits of run starts and webhook deliveries per user.
	RequestConns, WorkerConns int
	// MetricsAddr serves /metrics (Prometheus) when set.
	MetricsAddr string
	// PprofAddr serves net/http/pprof on loopback when set (a debugging
	// aid, off by default).
	PprofAddr           string
	MaxSteps            int
	RunRate, HookRate   float64
	RunBurst, HookBurst int

	// Operations (loadOperations): the free-space floor of the data
	// root's file system, and the daily backups.
	DiskFloorBytes   uint64
	DiskFloorPercent float64
	BackupDir        string // empty: no daily backup
	BackupKeep       int    // days

	// Access and retention (loadAccessAndRetention): who the identity
	// provider may sign in, and how long archived threads are kept.
	OIDCAllowedDomains []string      // lowercase
	OIDCAllowedGroups  []string      // values of the groups claim
	Retention          time.Duration // 0: archived threads are kept

	// Zone is the time zone of usage reports' days and budgets' days and
	// months (PIZZA_TIMEZONE): a day starts at midnight there.
	Zone *time.Location

	// Publish is where publish_brief publishes (loadPublish).
	Publish tools.Publish

	// Web is web_fetch's guard and web_search's provider (loadWeb).
	Web tools.Web

	// Push is Web Push's configuration (loadPush).
	Push pushConfig

	// SMTP is where notification e-mail is sent from (loadNotify); nil:
	// no e-mail.
	SMTP *notify.SMTP
}

// oidcEnabled reports whether people sign in with SSO.
func (c config) oidcEnabled() bool { return c.OIDCIssuer != "" }

// envVar documents one variable; the table drives --help and must match
// docs/configuration.md (TestConfigurationTableMatchesHelp).
type envVar struct{ name, def, help string }

var envVars = []envVar{
	{"PIZZA_ADDR", "127.0.0.1:8080", "address to listen on; anything but loopback requires PIZZA_OIDC_*, PIZZA_PUBLIC_URL, PIZZA_ALLOWED_ORIGINS and PIZZA_SESSION_KEYS"},
	{"PIZZA_DATA_ROOT", "~/.pizza-bot (root: /var/lib/pizza-bot)", "where skills, files and the private PostgreSQL live"},
	{"DATABASE_URL", "(unset: private PostgreSQL under the data root)", "PostgreSQL URL, e.g. postgres://user:pass@host/db"},
	{"PIZZA_MODEL", "(none)", "default model as <provider>:<model-id>, e.g. openai:gpt-4.1-mini"},
	{"PIZZA_EFFORT", "(the model's)", "how hard models think: one effort (none, minimal, low, medium, high, xhigh, max) or per model, e.g. claude-sonnet-5=high,openai:gpt-5.6=medium,*=low; a skill's effort key wins"},
	{"PIZZA_CONTEXT_WINDOWS", "(known models', else 32768)", "context windows in tokens per model, e.g. my-model=65536,openai:gpt-4.1=1047576,*=131072; runs compact before they fill 80% of it (docs/context.md)"},
	{"PIZZA_LARGE_RESULT_TOKENS", "20000", "a tool result larger than this (estimated at 4 bytes a token) is kept as a scratch file and the model reads it in parts"},
	{"PIZZA_LOG_LEVEL", "info", "debug, info, warn or error"},
	{"PIZZA_LOG_FORMAT", "text", "text or json"},
	{"PIZZA_SHUTDOWN_TIMEOUT", "30s", "how long a stopping server waits for requests and running steps"},
	{"PIZZA_OIDC_ISSUER", "(unset: no sign-in, loopback only)", "OpenID Connect issuer URL of the identity provider, e.g. https://login.example.com/realms/acme"},
	{"PIZZA_OIDC_CLIENT_ID", "(none)", "client id registered at the identity provider"},
	{"PIZZA_OIDC_CLIENT_SECRET", "(none)", "client secret (or PIZZA_OIDC_CLIENT_SECRET_FILE: a file holding it)"},
	{"PIZZA_PUBLIC_URL", "(none)", "the URL people open, e.g. https://pizza.example.com; the redirect URL is <PIZZA_PUBLIC_URL>/auth/callback"},
	{"PIZZA_ADMIN_EMAILS", "(none)", "comma-separated emails of the users who sign in as admins"},
	{"PIZZA_OIDC_ADMIN_GROUP", "(none)", "a value of the ID token's groups claim that makes its members admins"},
	{"PIZZA_ALLOWED_ORIGINS", "(none)", "comma-separated origins trusted to post forms, e.g. https://pizza.example.com"},
	{"PIZZA_SESSION_KEYS", "(none)", "comma-separated base64 keys of 32+ bytes signing and encrypting cookies; the first signs, all are accepted (rotation)"},
	{"PIZZA_SESSION_IDLE_TIMEOUT", "72h", "a session unused this long ends"},
	{"PIZZA_SESSION_MAX_AGE", "336h", "a session ends this long after sign-in, however used"},
	{"PIZZA_SECRET_KEY", "(none: keys entered in settings cannot be stored)", "base64 of 32 bytes encrypting provider keys stored in the database (AES-256-GCM)"},
	{"PIZZA_TOKEN_TTL", "2160h (90 days)", "lifetime offered by default to a new API token"},
	{"PIZZA_TOKEN_MAX_TTL", "8760h (1 year)", "longest lifetime an API token can have; longer tokens are shortened at start"},
	{"PIZZA_USER_QUOTA", "1GiB", "storage per user (attachments, scratch files, run_js journal), e.g. 500MiB or 2GiB; 0 for none"},
	{"PIZZA_GRANTS", "(none)", "host folders agents may reach: comma-separated absolute paths, each :ro (default) or :rw, e.g. /srv/docs,/srv/out:rw; also read from <data root>/grants.json"},
	{"PIZZA_DB_CONNS", "16", "database connections for web and API requests (a pool of its own; a quarter of them may start runs at once; a start waits at most 100ms for its turn and must commit within 1.5s, else 503)"},
	{"PIZZA_DB_WORKER_CONNS", "16", "database connections for agent steps, the job queue and its sweeps (a pool of its own)"},
	{"PIZZA_MAX_STEPS", "100", "agent steps one server process runs at once"},
	{"PIZZA_RUN_RATE", "10/s", "run starts per user (API, form) as N/s or N/m, 0 for no limit; past it 429 with Retry-After"},
	{"PIZZA_RUN_BURST", "100", "run starts a user may make at once before PIZZA_RUN_RATE applies"},
	{"PIZZA_WEBHOOK_RATE", "10/s", "deliveries to one user's webhooks as N/s or N/m, 0 for no limit; past it 429 with Retry-After"},
	{"PIZZA_WEBHOOK_BURST", "100", "deliveries a user's webhooks take at once before PIZZA_WEBHOOK_RATE applies"},
	{"PIZZA_METRICS_ADDR", "(unset: off)", "host:port serving /metrics in the Prometheus text format, apart from the web address; keep it off the public network"},
	{"PIZZA_PPROF_ADDR", "(unset: off)", "debugging aid: a loopback host:port serving Go's profiles (net/http/pprof under /debug/pprof/)"},
	{"PIZZA_DISK_FLOOR", "1GiB", "free space the data root's disk keeps: below it new runs and uploads get 503 (decisions, reading, cancelling still work); bytes (500MB, 2GiB), a percentage (5%) or 0 for none"},
	{"PIZZA_BACKUP_DIR", "(none: no daily backup)", "directory for a daily pg_dump backup of the database (pizza-bot-<date>.dump)"},
	{"PIZZA_BACKUP_KEEP", "7", "days the daily backups in PIZZA_BACKUP_DIR are kept"},
	{"PIZZA_OIDC_ALLOWED_DOMAINS", "(none: anyone the provider signs in)", "comma-separated email domains, e.g. example.com: only people whose ID token has a verified email there (or a group of PIZZA_OIDC_ALLOWED_GROUPS) may sign in"},
	{"PIZZA_OIDC_ALLOWED_GROUPS", "(none)", "comma-separated values of the ID token's groups claim (Entra ID: group object ids) whose members may sign in"},
	{"PIZZA_RETENTION", "(none: archived threads are kept)", "archived threads are deleted this long after they were archived, e.g. 90d or 2160h (checked hourly)"},
	{"PIZZA_PUBLISH_FOLDER", "(none)", "publish_brief writes each brief as <title>.md into this absolute folder, which must lie in a writable folder grant (PIZZA_GRANTS)"},
	{"PIZZA_PUBLISH_WEBHOOK_URL", "(none)", "publish_brief posts each brief as JSON to this https URL, signed with Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature)"},
	{"PIZZA_PUBLISH_WEBHOOK_SECRET", "(none)", "the webhook's signing secret, whsec_ and base64 of 24 to 64 random bytes; required with PIZZA_PUBLISH_WEBHOOK_URL"},
	{"PIZZA_PUBLISH_ALLOW_INSECURE", "false", "tests and local receivers only: let the publish webhook be a loopback http URL"},
	{"PIZZA_FETCH_ALLOW", "(none)", "hosts, addresses or CIDRs inside the network web_fetch and the built-in browser may reach, each with an optional :port or :* (e.g. wiki.internal:8080, 10.1.0.0/16:*); everything else inside stays refused"},
	{"PIZZA_SEARCH_PROVIDER", "(none: no web_search)", "web_search's provider: searxng, brave or tavily"},
	{"PIZZA_SEARCH_URL", "(the provider's own)", "searxng: the instance's address (required); brave, tavily: an endpoint to use instead of the provider's"},
	{"PIZZA_SEARCH_KEY", "(none)", "the Brave or Tavily API key (or PIZZA_SEARCH_KEY_FILE: a file holding it); never logged"},
	{"PIZZA_VAPID_PRIVATE_KEY", "(none: a key pair created once and kept in the database)", "Web Push's VAPID private key, base64url of the 32-byte P-256 scalar; its public key is derived; never logged"},
	{"PIZZA_VAPID_SUBJECT", "mailto:admin@localhost", "the VAPID subject push services may contact about this server's pushes: mailto:you@example.com or an https URL"},
	{"PIZZA_SMTP_URL", "(none: no e-mail)", "the SMTP server notification e-mail goes through: smtp://user:password@host:587 (STARTTLS whenever the server offers it) or smtps://user:password@host:465; never logged"},
	{"PIZZA_SMTP_FROM", "(none; required with PIZZA_SMTP_URL)", "the sender of notification e-mail, e.g. Pizza Bot <pizza@example.com>"},
	{"PIZZA_NOTIFY_ALLOW_INSECURE", "false", "tests and local services only: let push endpoints and chat webhooks be loopback http URLs"},
	{"PIZZA_TIMEZONE", "UTC", "time zone of usage and budgets, an IANA name such as Europe/Berlin or America/Los_Angeles: a budget's day starts at midnight there, a month on the 1st; the usage report's days are its days"},
}

// loadConfig reads the configuration from getenv and reports every problem
// at once.
func loadConfig(getenv func(string) string) (config, error) {
	c := config{
		Addr:        strings.TrimSpace(getenv("PIZZA_ADDR")),
		DataRoot:    strings.TrimSpace(getenv("PIZZA_DATA_ROOT")),
		DatabaseURL: strings.TrimSpace(getenv("DATABASE_URL")),
		Model:       strings.TrimSpace(getenv("PIZZA_MODEL")),
		LogFormat:   strings.ToLower(strings.TrimSpace(getenv("PIZZA_LOG_FORMAT"))),
	}
	var errs []error
	if c.Addr == "" {
		c.Addr = "127.0.0.1:8080"
	}
	errs = append(errs, c.loadAuth(getenv)...)
	if host, _, err := net.SplitHostPort(c.Addr); err != nil {
		errs = append(errs, fmt.Errorf("PIZZA_ADDR %q: want host:port, e.g. 127.0.0.1:8080", c.Addr))
	} else if !isLoopback(host) {
		// A network sees the server: it must know who is asking, and
		// which sites may send it forms.
		var missing []string
		if !c.oidcEnabled() {
			missing = append(missing, "PIZZA_OIDC_ISSUER, PIZZA_OIDC_CLIENT_ID and PIZZA_PUBLIC_URL (SSO sign-in)")
		}
		if len(c.AllowedOrigins) == 0 {
			missing = append(missing, "PIZZA_ALLOWED_ORIGINS (the origins allowed to post forms, e.g. your PIZZA_PUBLIC_URL)")
		}
		if len(c.SessionKeys) == 0 {
			missing = append(missing, "PIZZA_SESSION_KEYS (e.g. the output of: openssl rand -base64 48)")
		}
		if len(missing) > 0 {
			errs = append(errs, fmt.Errorf("PIZZA_ADDR %q is not a loopback address, so sign-in is required; set %s, or bind to 127.0.0.1", c.Addr, strings.Join(missing, "; ")))
		}
	}

	if c.DataRoot == "" {
		root, err := defaultDataRoot()
		if err != nil {
			errs = append(errs, err)
		}
		c.DataRoot = root
	} else if strings.HasPrefix(c.DataRoot, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			c.DataRoot = filepath.Join(home, c.DataRoot[2:])
		}
	}
	if c.DataRoot != "" {
		abs, err := filepath.Abs(c.DataRoot)
		if err != nil {
			errs = append(errs, fmt.Errorf("PIZZA_DATA_ROOT %q: %v", c.DataRoot, err))
		}
		c.DataRoot = abs
	}

	if c.DatabaseURL != "" {
		if _, err := pgxpool.ParseConfig(c.DatabaseURL); err != nil {
			// pgx's message can echo the URL, password included: say what is wrong without it.
			errs = append(errs, errors.New("DATABASE_URL is not a valid PostgreSQL URL (want postgres://user:password@host:5432/dbname)"))
		}
	}

	if c.Model != "" {
		if _, err := agent.ParseModelSpec(c.Model); err != nil {
			errs = append(errs, fmt.Errorf("PIZZA_MODEL: %v", err))
		}
	}
	if _, err := agent.ParseEfforts(getenv("PIZZA_EFFORT")); err != nil {
		errs = append(errs, err)
	}
	if _, err := agent.ParseContextWindows(getenv("PIZZA_CONTEXT_WINDOWS")); err != nil {
		errs = append(errs, err)
	}
	if v := strings.TrimSpace(getenv("PIZZA_LARGE_RESULT_TOKENS")); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 1000 {
			errs = append(errs, fmt.Errorf("PIZZA_LARGE_RESULT_TOKENS: %q is not a number of tokens of at least 1000", v))
		}
	}

	switch lvl := strings.ToLower(strings.TrimSpace(getenv("PIZZA_LOG_LEVEL"))); lvl {
	case "", "info":
		c.LogLevel = slog.LevelInfo
	case "debug":
		c.LogLevel = slog.LevelDebug
	case "warn", "warning":
		c.LogLevel = slog.LevelWarn
	case "error":
		c.LogLevel = slog.LevelError
	default:
		errs = append(errs, fmt.Errorf("PIZZA_LOG_LEVEL %q: want debug, info, warn or error", lvl))
	}
	switch c.LogFormat {
	case "":
		c.LogFormat = "text"
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("PIZZA_LOG_FORMAT %q: want text or json", c.LogFormat))
	}

	c.ShutdownTimeout = 30 * time.Second
	if s := strings.TrimSpace(getenv("PIZZA_SHUTDOWN_TIMEOUT")); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("PIZZA_SHUTDOWN_TIMEOUT %q: want a positive duration such as 30s", s))
		} else {
			c.ShutdownTimeout = d
		}
	}
	errs = append(errs, c.loadLimits(getenv)...)
	errs = append(errs, c.loadGrants(getenv)...)
	errs = append(errs, c.loadCapacity(getenv)...)
	errs = append(errs, c.loadOperations(getenv)...)
	errs = append(errs, c.loadAccessAndRetention(getenv)...)
	errs = append(errs, c.loadZone(getenv)...)
	errs = append(errs, c.loadPublish(getenv)...)
	errs = append(errs, c.loadWeb(getenv)...)
	errs = append(errs, c.loadPush(getenv)...)
	errs = append(errs, c.loadNotify(getenv)...)
	return c, errors.Join(errs...)
}

// loadLimits reads the token lifetimes and the storage quota.
func (c *config) loadLimits(getenv func(string) string) []error {
	var errs []error
	c.TokenTTL, c.TokenMaxTTL = handlers.DefaultTokenTTL, handlers.DefaultTokenMaxTTL
	for _, d := range []struct {
		name string
		dst  *time.Duration
	}{{"PIZZA_TOKEN_TTL", &c.TokenTTL}, {"PIZZA_TOKEN_MAX_TTL", &c.TokenMaxTTL}} {
		if s := strings.TrimSpace(getenv(d.name)); s != "" {
			v, err := time.ParseDuration(s)
			if err != nil || v < 24*time.Hour {
				errs = append(errs, fmt.Errorf("%s %q: want a duration of at least 24h, such as 2160h (90 days)", d.name, s))
				continue
			}
			*d.dst = v
		}
	}
	if c.TokenTTL > c.TokenMaxTTL {
		if strings.TrimSpace(getenv("PIZZA_TOKEN_TTL")) == "" {
			c.TokenTTL = c.TokenMaxTTL // only the maximum was lowered
		} else {
			errs = append(errs, fmt.Errorf("PIZZA_TOKEN_TTL %s is longer than PIZZA_TOKEN_MAX_TTL %s", c.TokenTTL, c.TokenMaxTTL))
		}
	}
	c.UserQuota = db.DefaultUserQuota
	if s := strings.TrimSpace(getenv("PIZZA_USER_QUOTA")); s != "" {
		n, err := parseSize(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("PIZZA_USER_QUOTA %q: want a size such as 500MiB or 2GiB, or 0 for no limit", s))
		} else {
			c.UserQuota = n
		}
	}
	return errs
}

// loadCapacity reads the pool sizes, the step concurrency and the rate
// limits (handlers/admission.go).
func (c *config) loadCapacity(getenv func(string) string) []error {
	var errs []error
	ints := []struct {
		name     string
		def, min int
		dst      *int
	}{
		{"PIZZA_DB_CONNS", 16, 4, &c.RequestConns},
		{"PIZZA_DB_WORKER_CONNS", 16, 4, &c.WorkerConns},
		{"PIZZA_MAX_STEPS", 100, 1, &c.MaxSteps},
		{"PIZZA_RUN_BURST", 100, 1, &c.RunBurst},
		{"PIZZA_WEBHOOK_BURST", 100, 1, &c.HookBurst},
	}
	for _, v := range ints {
		*v.dst = v.def
		s := strings.TrimSpace(getenv(v.name))
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < v.min || n > 100000 {
			errs = append(errs, fmt.Errorf("%s %q: want a whole number from %d to 100000", v.name, s, v.min))
			continue
		}
		*v.dst = n
	}
	if c.MetricsAddr = strings.TrimSpace(getenv("PIZZA_METRICS_ADDR")); c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			errs = append(errs, fmt.Errorf("PIZZA_METRICS_ADDR %q: want host:port, e.g. 127.0.0.1:9100", c.MetricsAddr))
		} else if c.MetricsAddr == c.Addr {
			errs = append(errs, fmt.Errorf("PIZZA_METRICS_ADDR %q is PIZZA_ADDR: metrics need an address of their own", c.MetricsAddr))
		}
	}
	if c.PprofAddr = strings.TrimSpace(getenv("PIZZA_PPROF_ADDR")); c.PprofAddr != "" {
		if host, _, err := net.SplitHostPort(c.PprofAddr); err != nil {
			errs = append(errs, fmt.Errorf("PIZZA_PPROF_ADDR %q: want host:port, e.g. 127.0.0.1:6060", c.PprofAddr))
		} else if !isLoopback(host) {
			errs = append(errs, fmt.Errorf("PIZZA_PPROF_ADDR %q: profiles are served on loopback only, e.g. 127.0.0.1:6060", c.PprofAddr))
		} else if c.PprofAddr == c.Addr || c.PprofAddr == c.MetricsAddr {
			errs = append(errs, fmt.Errorf("PIZZA_PPROF_ADDR %q: profiles need an address of their own", c.PprofAddr))
		}
	}
	rates := []struct {
		name string
		dst  *float64
	}{{"PIZZA_RUN_RATE", &c.RunRate}, {"PIZZA_WEBHOOK_RATE", &c.HookRate}}
	for _, v := range rates {
		*v.dst = 10
		if s := strings.TrimSpace(getenv(v.name)); s != "" {
			r, err := parseRate(s)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s %q: %v", v.name, s, err))
				continue
			}
			*v.dst = r
		}
	}
	return errs
}

// parseSize reads a size in bytes: a number with an optional unit, B, KB,
// MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024); K, M,
// G and T alone are taken as binary.
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := s, ""
	if i >= 0 {
		num, unit = s[:i], strings.ToLower(strings.TrimSpace(s[i:]))
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	mult := map[string]float64{
		"": 1, "b": 1,
		"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
		"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
		"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
	}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("bad unit in %q", s)
	}
	if v*mult > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(v * mult), nil
}

// parseRate reads "N/s", "N/m" or "N/h" (N may have a fraction), or "0"
// for no limit, as events per second.
func parseRate(s string) (float64, error) {
	if s == "0" || strings.EqualFold(s, "off") {
		return 0, nil
	}
	num, unit, ok := strings.Cut(s, "/")
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if !ok || err != nil || n <= 0 || math.IsInf(n, 0) {
		return 0, errors.New("want a rate such as 10/s, 600/m or 0 for no limit")
	}
	switch strings.TrimSpace(unit) {
	case "s":
		return n, nil
	case "m":
		return n / 60, nil
	case "h":
		return n / 3600, nil
	}
	return 0, errors.New("want a rate such as 10/s, 600/m or 0 for no limit")
}

// loadGrants reads the folder grants of PIZZA_GRANTS and
// <data root>/grants.json; a folder in both takes the more permissive mode.
// No grant may reach into the data root.
func (c *config) loadGrants(getenv func(string) string) []error {
	var errs []error
	fromEnv, err := tools.ParseGrants(getenv("PIZZA_GRANTS"))
	if err != nil {
		errs = append(errs, err)
	}
	var fromFile []db.GrantSpec
	// A data root that is not a directory yet is reported when the server
	// prepares it.
	if fi, serr := os.Stat(c.DataRoot); c.DataRoot != "" && serr == nil && fi.IsDir() {
		if fromFile, err = tools.ReadGrantsFile(filepath.Join(c.DataRoot, "grants.json")); err != nil {
			errs = append(errs, err)
		}
	}
	index := map[string]int{}
	dataRoot := tools.NewProtected(c.DataRoot)
	for _, g := range append(fromEnv, fromFile...) {
		if dataRoot.Contains(g.Path) {
			errs = append(errs, fmt.Errorf("folder grant %s is inside PIZZA_DATA_ROOT, which agents must not reach", g.Path))
			continue
		}
		if i, ok := index[g.Path]; ok {
			c.Grants[i].Writable = c.Grants[i].Writable || g.Writable
			continue
		}
		index[g.Path] = len(c.Grants)
		c.Grants = append(c.Grants, g)
	}
	return errs
}

// defaultDataRoot is ~/.pizza-bot, except for root, whose home is out of
// reach of the unprivileged user that runs the private PostgreSQL: root gets
// the system location /var/lib/pizza-bot.
func defaultDataRoot() (string, error) {
	if os.Geteuid() == 0 {
		return "/var/lib/pizza-bot", nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		if u, uerr := user.Current(); uerr == nil && u.HomeDir != "" {
			home = u.HomeDir
		} else {
			return "", errors.New("PIZZA_DATA_ROOT is unset and there is no home directory: set PIZZA_DATA_ROOT")
		}
	}
	return filepath.Join(home, ".pizza-bot"), nil
}

// warnings are configurations that work but are likely mistakes, logged
// at start (serve.go).
func (c config) warnings() []string {
	var ws []string
	if u, err := url.Parse(c.PublicURL); c.PublicURL != "" && err == nil && u.Scheme == "http" && !isLoopback(u.Hostname()) {
		// Session cookies, sign-in codes and every page would cross the
		// network in clear text.
		ws = append(ws, fmt.Sprintf("PIZZA_PUBLIC_URL %s is plain http on a network address: sessions and sign-in travel unencrypted; serve it over https (a TLS proxy in front of Pizza Bot)", c.PublicURL))
	}
	return ws
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (c config) logger() *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.LogLevel}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// loadAuth reads the sign-in, session, origin and secret settings.
func (c *config) loadAuth(getenv func(string) string) []error {
	var errs []error
	c.OIDCIssuer = strings.TrimSpace(getenv("PIZZA_OIDC_ISSUER"))
	c.OIDCClientID = strings.TrimSpace(getenv("PIZZA_OIDC_CLIENT_ID"))
	c.OIDCClientSecret = strings.TrimSpace(getenv("PIZZA_OIDC_CLIENT_SECRET"))
	if file := strings.TrimSpace(getenv("PIZZA_OIDC_CLIENT_SECRET_FILE")); file != "" {
		if c.OIDCClientSecret != "" {
			errs = append(errs, errors.New("PIZZA_OIDC_CLIENT_SECRET and PIZZA_OIDC_CLIENT_SECRET_FILE are both set: keep one"))
		} else if b, err := os.ReadFile(file); err != nil {
			errs = append(errs, fmt.Errorf("PIZZA_OIDC_CLIENT_SECRET_FILE: %v", err))
		} else {
			c.OIDCClientSecret = strings.TrimSpace(string(b))
		}
	}
	c.PublicURL = strings.TrimRight(strings.TrimSpace(getenv("PIZZA_PUBLIC_URL")), "/")
	c.OIDCAdminGroup = strings.TrimSpace(getenv("PIZZA_OIDC_ADMIN_GROUP"))
	for _, e := range splitList(getenv("PIZZA_ADMIN_EMAILS")) {
		c.AdminEmails = append(c.AdminEmails, strings.ToLower(e))
	}

	if c.OIDCIssuer != "" || c.OIDCClientID != "" || c.OIDCClientSecret != "" {
		if u, err := url.Parse(c.OIDCIssuer); c.OIDCIssuer == "" || err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			errs = append(errs, fmt.Errorf("PIZZA_OIDC_ISSUER %q: want the identity provider's issuer URL, e.g. https://login.example.com/realms/acme", c.OIDCIssuer))
		}
		if c.OIDCClientID == "" {
			errs = append(errs, errors.New("PIZZA_OIDC_CLIENT_ID is not set: the client id registered at the identity provider"))
		}
		if c.PublicURL == "" {
			errs = append(errs, errors.New("PIZZA_PUBLIC_URL is not set: the URL people open (the identity provider redirects to <PIZZA_PUBLIC_URL>/auth/callback)"))
		}
	}
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			errs = append(errs, fmt.Errorf("PIZZA_PUBLIC_URL %q: want scheme://host[:port] with no path, e.g. https://pizza.example.com", c.PublicURL))
		}
	}

	for i, raw := range splitList(getenv("PIZZA_SESSION_KEYS")) {
		k, err := decodeKey(raw)
		if err != nil || len(k) < 32 {
			// Never echo the key.
			errs = append(errs, fmt.Errorf("PIZZA_SESSION_KEYS: key %d is not base64 of at least 32 bytes (make one with: openssl rand -base64 48)", i+1))
			continue
		}
		c.SessionKeys = append(c.SessionKeys, k)
	}
	if c.oidcEnabled() && len(c.SessionKeys) == 0 {
		errs = append(errs, errors.New("PIZZA_SESSION_KEYS is not set: sign-in needs a key for the session cookies (make one with: openssl rand -base64 48)"))
	}
	c.SessionIdle, c.SessionMaxAge = 72*time.Hour, 14*24*time.Hour
	for _, d := range []struct {
		name string
		dst  *time.Duration
	}{{"PIZZA_SESSION_IDLE_TIMEOUT", &c.SessionIdle}, {"PIZZA_SESSION_MAX_AGE", &c.SessionMaxAge}} {
		if s := strings.TrimSpace(getenv(d.name)); s != "" {
			v, err := time.ParseDuration(s)
			if err != nil || v < time.Minute {
				errs = append(errs, fmt.Errorf("%s %q: want a duration of at least 1m, such as 72h", d.name, s))
				continue
			}
			*d.dst = v
		}
	}

	for _, raw := range splitList(getenv("PIZZA_ALLOWED_ORIGINS")) {
		o, err := handlers.NormalizeOrigin(raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("PIZZA_ALLOWED_ORIGINS: %v", err))
			continue
		}
		c.AllowedOrigins = append(c.AllowedOrigins, o)
	}

	if raw := strings.TrimSpace(getenv("PIZZA_SECRET_KEY")); raw != "" {
		k, err := decodeKey(raw)
		if err != nil || len(k) != db.SecretKeySize {
			errs = append(errs, errors.New("PIZZA_SECRET_KEY is not base64 of exactly 32 bytes (make one with: openssl rand -base64 32)"))
		} else {
			c.SecretKey = k
		}
	}
	// deploy/demo.env's keys are published: they may serve the demo on
	// localhost, never a server people reach by another name.
	if u, err := url.Parse(c.PublicURL); c.PublicURL != "" && err == nil && !isLoopback(u.Hostname()) {
		for _, k := range append(slices.Clone(c.SessionKeys), c.SecretKey) {
			if bytes.HasPrefix(k, []byte(demoKeyPrefix)) {
				errs = append(errs, fmt.Errorf("PIZZA_SESSION_KEYS or PIZZA_SECRET_KEY is a published demo key (deploy/demo.env), and PIZZA_PUBLIC_URL %s is not localhost: set your own in .env (openssl rand -base64 48, and 32)", c.PublicURL))
				break
			}
		}
	}
	return errs
}

// demoKeyPrefix starts the decoded demo keys of deploy/demo.env.
const demoKeyPrefix = "DEMO "

// splitList splits a comma- or space-separated list, dropping empty items.
func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' })
}

// decodeKey reads a key written in standard or URL-safe base64, padded or
// not.
func decodeKey(s string) ([]byte, error) {
	s = strings.TrimRight(strings.TrimSpace(s), "=")
	if strings.ContainsAny(s, "-_") {
		return base64.RawURLEncoding.DecodeString(s)
	}
	return base64.RawStdEncoding.DecodeString(s)
}

// loadOperations reads the variables of docs/operations.md: the disk floor
// and the daily backups.
func (c *config) loadOperations(getenv func(string) string) []error {
	var errs []error
	floor := strings.TrimSpace(getenv("PIZZA_DISK_FLOOR"))
	if floor == "" {
		floor = "1GiB"
	}
	if pct, ok := strings.CutSuffix(floor, "%"); ok {
		f, err := strconv.ParseFloat(strings.TrimSpace(pct), 64)
		if err != nil || f < 0 || f >= 100 {
			errs = append(errs, fmt.Errorf("PIZZA_DISK_FLOOR %q: want a percentage from 0 to 99, e.g. 5%%", floor))
		}
		c.DiskFloorPercent = f
	} else if n, err := parseSize(floor); err != nil {
		errs = append(errs, fmt.Errorf("PIZZA_DISK_FLOOR %q: want a size such as 500MB or 2GiB, a percentage such as 5%%, or 0", floor))
	} else {
		c.DiskFloorBytes = uint64(n)
	}

	c.BackupDir = strings.TrimSpace(getenv("PIZZA_BACKUP_DIR"))
	if c.BackupDir != "" {
		abs, err := filepath.Abs(c.BackupDir)
		if err != nil {
			errs = append(errs, fmt.Errorf("PIZZA_BACKUP_DIR %q: %v", c.BackupDir, err))
		}
		c.BackupDir = abs
	}
	c.BackupKeep = 7
	if s := strings.TrimSpace(getenv("PIZZA_BACKUP_KEEP")); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("PIZZA_BACKUP_KEEP %q: want a number of days, at least 1", s))
		}
		c.BackupKeep = n
	}
	return errs
}

// loadAccessAndRetention reads who may sign in (PIZZA_OIDC_ALLOWED_DOMAINS,
// PIZZA_OIDC_ALLOWED_GROUPS) and how long archived threads are kept
// (PIZZA_RETENTION).
func (c *config) loadAccessAndRetention(getenv func(string) string) []error {
	var errs []error
	for _, d := range splitList(getenv("PIZZA_OIDC_ALLOWED_DOMAINS")) {
		d = strings.ToLower(strings.TrimPrefix(d, "@"))
		if d == "" || strings.ContainsAny(d, "@/: ") || !strings.Contains(d, ".") {
			errs = append(errs, fmt.Errorf("PIZZA_OIDC_ALLOWED_DOMAINS: %q is not an email domain such as example.com", d))
			continue
		}
		c.OIDCAllowedDomains = append(c.OIDCAllowedDomains, d)
	}
	c.OIDCAllowedGroups = splitList(getenv("PIZZA_OIDC_ALLOWED_GROUPS"))
	if (len(c.OIDCAllowedDomains) > 0 || len(c.OIDCAllowedGroups) > 0) && !c.oidcEnabled() {
		errs = append(errs, errors.New("PIZZA_OIDC_ALLOWED_DOMAINS and PIZZA_OIDC_ALLOWED_GROUPS restrict SSO sign-in: set PIZZA_OIDC_ISSUER too, or unset them"))
	}
	if s := strings.TrimSpace(getenv("PIZZA_RETENTION")); s != "" && s != "0" {
		d, err := parseRetention(s)
		if err != nil || d < time.Hour {
			errs = append(errs, fmt.Errorf("PIZZA_RETENTION %q: want a duration of at least an hour, in days (90d) or hours (2160h), or 0 for none", s))
		} else {
			c.Retention = d
		}
	}
	return errs
}

// parseRetention reads "90d" as days, anything else as a Go duration.
func parseRetention(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(strings.TrimSpace(days))
		if err != nil || n < 0 || n > 100*365 {
			return 0, fmt.Errorf("bad number of days %q", days)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

// loadZone reads PIZZA_TIMEZONE, the time zone of usage and budgets: UTC
// when unset. The name must be an IANA zone (the binary carries the zone
// database, time/tzdata); "Local" is refused, as it would change with the
// host the server runs on.
func (c *config) loadZone(getenv func(string) string) []error {
	c.Zone = time.UTC
	name := strings.TrimSpace(getenv("PIZZA_TIMEZONE"))
	if name == "" {
		return nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil || name == "Local" {
		return []error{fmt.Errorf("PIZZA_TIMEZONE %q is not a time zone: want an IANA name such as UTC, Europe/Berlin or America/Los_Angeles", name)}
	}
	c.Zone = loc
	return nil
}
