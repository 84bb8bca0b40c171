package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/agent"
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
}

// envVar documents one variable; the table drives --help and must match the README.
type envVar struct{ name, def, help string }

var envVars = []envVar{
	{"PIZZA_ADDR", "127.0.0.1:8080", "address to listen on; anything but loopback requires SSO (not available yet)"},
	{"PIZZA_DATA_ROOT", "~/.pizza-bot (root: /var/lib/pizza-bot)", "where skills, files and the private PostgreSQL live"},
	{"DATABASE_URL", "(unset: private PostgreSQL under the data root)", "PostgreSQL URL, e.g. postgres://user:pass@host/db"},
	{"PIZZA_MODEL", "(none)", "default model as <provider>:<model-id>, e.g. openai:gpt-4.1-mini"},
	{"PIZZA_LOG_LEVEL", "info", "debug, info, warn or error"},
	{"PIZZA_LOG_FORMAT", "text", "text or json"},
	{"PIZZA_SHUTDOWN_TIMEOUT", "30s", "how long a stopping server waits for requests and running steps"},
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
	if host, _, err := net.SplitHostPort(c.Addr); err != nil {
		errs = append(errs, fmt.Errorf("PIZZA_ADDR %q: want host:port, e.g. 127.0.0.1:8080", c.Addr))
	} else if !isLoopback(host) {
		errs = append(errs, fmt.Errorf("PIZZA_ADDR %q is not a loopback address: serving a network needs SSO sign-in and an origin allowlist, which this build does not have yet; bind to 127.0.0.1", c.Addr))
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
	return c, errors.Join(errs...)
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
