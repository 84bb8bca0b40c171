package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"pizzabot/agent"
	"pizzabot/connections"
	"pizzabot/db"
	"pizzabot/extensions"
	"pizzabot/jobs"
	"pizzabot/netguard"
)

// connectionsKeyFile is the key sealing users' connection tokens when
// PIZZA_SECRET_KEY is unset: created once in the data root, mode 0600.
const connectionsKeyFile = "connections.key"

// connectionsKey is PIZZA_SECRET_KEY, else the data root's key file
// (created on first use).
func connectionsKey(cfg config) ([]byte, error) {
	if cfg.SecretKey != nil {
		return cfg.SecretKey, nil
	}
	if cfg.DataRoot == "" {
		return nil, errors.New("no PIZZA_SECRET_KEY and no data root for a key file")
	}
	path := filepath.Join(cfg.DataRoot, connectionsKeyFile)
	if raw, err := os.ReadFile(path); err == nil {
		k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(raw)))
		if err != nil || len(k) != db.SecretKeySize {
			return nil, fmt.Errorf("%s is not base64 of 32 bytes", path)
		}
		return k, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	k := make([]byte, db.SecretKeySize)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return connectionsKey(cfg) // another process made it first
	}
	if err != nil {
		return nil, err
	}
	if _, err := f.WriteString(base64.StdEncoding.EncodeToString(k) + "\n"); err != nil {
		f.Close()
		return nil, err
	}
	return k, f.Close()
}

// newConnections is each user's sign-ins to the configured HTTP MCP
// servers (connections/). rt is read when a connection is made: the
// runtime is built after this, with the service as its Credentials.
func newConnections(cfg config, st *store, ext *extensions.Extensions, rt **jobs.Runtime, log *slog.Logger) (*connections.Service, error) {
	key, err := connectionsKey(cfg)
	if err != nil {
		return nil, err
	}
	box, err := db.NewSecretBox(key)
	if err != nil {
		return nil, err
	}
	// Authorization servers are reached over https; on a server whose
	// public URL is loopback (a laptop, a test) loopback ones too.
	guard := &netguard.Guard{}
	if u, err := url.Parse(cfg.PublicURL); err == nil && isLoopback(u.Hostname()) {
		guard.Loopback = true
	}
	server := func(name string) (extensions.ServerEntry, bool) {
		for _, s := range ext.State().Servers {
			// A stdio server takes each person's values in its env: only
			// those, never a sign-in (it has no URL).
			if s.Name == name && s.Running && (s.Expanded.Type == agent.MCPHTTP || s.Expanded.Type == agent.MCPSSE || len(s.Expanded.UserSecrets()) > 0) {
				return s, true
			}
		}
		return extensions.ServerEntry{}, false
	}
	return connections.New(connections.Config{
		Pool: st.pool, Box: box, Guard: guard, PublicURL: cfg.PublicURL, Logger: log.With("component", "connections"),
		Servers: func(_ context.Context, name string) (connections.Server, error) {
			s, ok := server(name)
			if !ok {
				return connections.Server{}, fmt.Errorf("no running HTTP MCP server named %q", name)
			}
			out := connections.Server{Name: name, URL: s.Expanded.URL, Secrets: s.Expanded.UserSecrets()}
			out.OAuth = s.Expanded.OAuth != nil
			if o := s.Expanded.OAuth; o != nil {
				out.ClientID, out.ClientSecret, out.Scopes = o.ClientID, o.ClientSecret, o.Scopes
			}
			return out, nil
		},
		Names: func(context.Context) []string {
			var names []string
			for _, s := range ext.State().Servers {
				if s.Running && (s.Expanded.OAuth != nil || len(s.Expanded.UserSecrets()) > 0) {
					names = append(names, s.Name)
				}
			}
			return names
		},
		Ready: func(ctx context.Context, userID int64, server string) error {
			if *rt == nil {
				return nil
			}
			return (*rt).ConnectionReady(ctx, userID, server)
		},
	})
}
