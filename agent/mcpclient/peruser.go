package mcpclient

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"pizzabot/agent"
)

// Servers each user signs in to (docs/mcp.md, issue 30). A server whose
// configuration has an "oauth" block, or that answered our first
// connection with 401 (the MCP authorization spec's challenge), has no
// connection of its own: each user's calls go over a session of theirs,
// opened with their own access token (Signer, the connections service),
// never with a credential of the configuration. A session is reopened when
// the token changes (a refresh) and closed after sessionIdle unused. A 401
// tells the Signer (the connection then waits for Reconnect) and is an
// *agent.NeedsConnection: the server refused the call, which did not run.
//
// The server's tools are those its last session listed, offered to every
// run; whether a run's user may use them is the runtime's to decide
// (SignInServers, OpenAs).

// StateSignIn: each user signs in to the server; there is no shared
// connection (see above).
const StateSignIn = "sign_in"

// sessionIdle is how long a user's unused session stays open.
const sessionIdle = 10 * time.Minute

// Signer gives the tokens of the servers users sign in to;
// agent.Credentials is one.
type Signer interface {
	// Token is userID's live access token for server, or a
	// *agent.NeedsConnection.
	Token(ctx context.Context, userID int64, server string) (string, error)
	// Rejected tells that server answered 401 to token.
	Rejected(ctx context.Context, userID int64, server, token string) error
	// Secret is userID's value of ${user:name} for server, or a
	// *agent.NeedsConnection naming it.
	Secret(ctx context.Context, userID int64, server, name string) (string, error)
}

// session is one user's connection to a server they signed in to.
type session struct {
	mu    sync.Mutex // one dial at a time
	conn  *conn
	token string
	// key is what the session was opened with (token and values): a
	// change reopens it.
	key  string
	used time.Time
	// refused is the key of ${user:NAME} values the server answered 401
	// to: not tried again until the user enters others.
	refused string
}

// creds are what userID's session to s is opened with: their access token
// (a server they sign in to) and their value of each ${user:NAME}; a
// *agent.NeedsConnection when one is missing.
type creds struct {
	token  string
	values map[string]string
}

func (c creds) key() string {
	var b strings.Builder
	b.WriteString(c.token)
	for _, n := range slices.Sorted(maps.Keys(c.values)) {
		b.WriteString("\x00" + n + "=" + c.values[n])
	}
	return b.String()
}

func (s *server) creds(ctx context.Context, signer Signer, userID int64) (creds, error) {
	s.mu.Lock()
	oauth, secrets := s.oauth, s.secrets
	s.mu.Unlock()
	var c creds
	if oauth {
		tok, err := signer.Token(ctx, userID, s.spec.Name)
		if err != nil {
			return c, err
		}
		c.token = tok
	}
	for _, n := range secrets {
		v, err := signer.Secret(ctx, userID, s.spec.Name, n)
		if err != nil {
			return c, err
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return c, &agent.NeedsConnection{Server: s.spec.Name, Secret: n, Reason: "your " + n + " is not a valid header value"}
		}
		if c.values == nil {
			c.values = map[string]string{}
		}
		c.values[n] = v
	}
	return c, nil
}

// Credentialed reports whether userID has what server needs for a session
// (a token, their ${user:NAME} values), without reaching the server: nil
// when they do or server is not one used with each user's own; else a
// *agent.NeedsConnection.
func (m *Manager) Credentialed(ctx context.Context, signer Signer, userID int64, server string) error {
	sv := m.serverNamed(server)
	if sv == nil || !sv.isPerUser() {
		return nil
	}
	cr, err := sv.creds(ctx, signer, userID)
	if err != nil {
		return err
	}
	sv.mu.Lock()
	us := sv.sessions[userID]
	sv.mu.Unlock()
	if us != nil {
		us.mu.Lock()
		refused := us.refused != "" && us.refused == cr.key()
		us.mu.Unlock()
		if refused {
			return sv.refusedValues()
		}
	}
	return nil
}

// refusedValues is the error of a server that refused a user's ${user:NAME}
// values (it has no token of theirs).
func (s *server) refusedValues() error {
	return &agent.NeedsConnection{Server: s.spec.Name, Secret: s.secrets[0], Reason: "the server refused your " + strings.Join(s.secrets, ", ")}
}

// markRefused records that the server refused userID's values key.
func (s *server) markRefused(userID int64, key string) {
	s.mu.Lock()
	us := s.sessions[userID]
	s.mu.Unlock()
	if us != nil {
		us.mu.Lock()
		us.refused = key
		us.mu.Unlock()
	}
}

// refused is the error of a server that answered 401 to userID's token,
// after telling signer.
func (s *server) refused(ctx context.Context, signer Signer, userID int64, token string) error {
	if token == "" {
		// Only ${user:NAME} values: the server refused them, to be
		// entered again (session.refused).
		return s.refusedValues()
	}
	if err := signer.Rejected(context.WithoutCancel(ctx), userID, s.spec.Name, token); err != nil {
		s.m.log.Warn("record a refused token", "mcp_server", s.spec.Name, "user", userID, "err", err)
	}
	return &agent.NeedsConnection{Server: s.spec.Name, Reason: "the server refused the token"}
}

// signIn makes s a server each user signs in to.
func (s *server) signIn() {
	s.mu.Lock()
	s.perUser = true
	s.conn = nil
	s.state, s.err, s.since = StateSignIn, "", time.Now()
	s.downSince = time.Time{}
	s.mu.Unlock()
	s.m.changed()
}

// closeSessions ends every user's session.
func (s *server) closeSessions() {
	s.mu.Lock()
	sessions := s.sessions
	s.sessions = nil
	s.mu.Unlock()
	for _, us := range sessions {
		us.mu.Lock()
		if us.conn != nil {
			us.conn.close()
			us.conn = nil
		}
		us.mu.Unlock()
	}
}

// userConn is userID's live session to s, opened (and its tools listed)
// with their current token when there is none or the token changed.
func (s *server) userConn(ctx context.Context, signer Signer, userID int64) (c *conn, tok, key string, err error) {
	cr, err := s.creds(ctx, signer, userID)
	if err != nil {
		return nil, "", "", err
	}
	tok, key = cr.token, cr.key()
	now := time.Now()
	s.mu.Lock()
	if s.ctx.Err() != nil {
		s.mu.Unlock()
		return nil, "", "", &CallError{Server: s.spec.Name, Msg: fmt.Sprintf("MCP server %q is stopped", s.spec.Name)}
	}
	if s.sessions == nil {
		s.sessions = map[int64]*session{}
	}
	var idle []*session
	for id, other := range s.sessions {
		if id != userID && other.mu.TryLock() {
			if now.Sub(other.used) > sessionIdle {
				delete(s.sessions, id)
				idle = append(idle, other)
			}
			other.mu.Unlock()
		}
	}
	us := s.sessions[userID]
	if us == nil {
		us = &session{}
		s.sessions[userID] = us
	}
	s.mu.Unlock()
	for _, other := range idle {
		if other.conn != nil {
			other.conn.close()
		}
	}

	us.mu.Lock()
	defer us.mu.Unlock()
	us.used = now
	if tok == "" && us.refused == key {
		return nil, "", "", s.refusedValues()
	}
	if us.conn != nil {
		select {
		case <-us.conn.dead:
		default:
			if us.key == key {
				return us.conn, tok, key, nil
			}
		}
		us.conn.close()
		us.conn = nil
	}
	cfg := s.spec.Config
	cfg.Headers = maps.Clone(cfg.Headers)
	if cfg.Headers == nil {
		cfg.Headers = map[string]string{}
	}
	for k, v := range cfg.Headers {
		for n, val := range cr.values {
			v = strings.ReplaceAll(v, agent.UserSecretRef(n), val)
		}
		cfg.Headers[k] = v
	}
	if cr.token != "" {
		for k := range cfg.Headers {
			if strings.EqualFold(k, "Authorization") {
				delete(cfg.Headers, k) // the user's token, never the configuration's
			}
		}
		cfg.Headers["Authorization"] = "Bearer " + tok
	}
	log := s.m.log.With("mcp_server", s.spec.Name)
	c, err = dial(s.ctx, cfg, s.ring, log)
	if err != nil {
		return nil, "", "", &CallError{Server: s.spec.Name, Msg: fmt.Sprintf("MCP server %q could not be reached: %v", s.spec.Name, err)}
	}
	hctx, cancel := context.WithTimeout(ctx, s.m.opts.ConnectTimeout)
	defer cancel()
	info, tools, err := handshake(hctx, c)
	if err != nil {
		c.close()
		if errors.Is(err, transport.ErrAuthorizationRequired) {
			if tok == "" {
				us.refused = key
			}
			return nil, "", "", s.refused(ctx, signer, userID, tok)
		}
		return nil, "", "", &CallError{Server: s.spec.Name, Msg: fmt.Sprintf("MCP server %q could not be reached: %v", s.spec.Name, err)}
	}
	us.conn, us.token, us.key = c, tok, key
	s.learn(info, tools)
	return c, tok, key, nil
}

// learn records the tools a user's session listed as the server's.
func (s *server) learn(info *mcp.InitializeResult, tools []mcp.Tool) {
	offered, skipped := convertTools(s.spec.Name, tools)
	s.mu.Lock()
	changed := !slices.EqualFunc(s.tools, offered, func(a, b Tool) bool { return a.Spec.Name == b.Spec.Name && a.Spec.Description == b.Spec.Description })
	s.tools, s.skipped = offered, skipped
	s.byName = map[string]Tool{}
	for _, t := range offered {
		s.byName[t.Spec.Name] = t
	}
	if info != nil {
		s.info = strings.TrimSpace(info.ServerInfo.Name + " " + info.ServerInfo.Version)
	}
	s.mu.Unlock()
	if changed {
		s.m.changed()
	}
}

// callAs runs one call over userID's session.
func (s *server) callAs(ctx context.Context, signer Signer, userID int64, tool Tool, args map[string]any) (*mcp.CallToolResult, error) {
	c, tok, key, err := s.userConn(ctx, signer, userID)
	if err != nil {
		return nil, err
	}
	res, err := s.callOn(ctx, c, tool, args)
	var ce *CallError
	if errors.As(err, &ce) && ce.unauthorized {
		s.dropSession(userID, c)
		if tok == "" {
			s.markRefused(userID, key)
		}
		return nil, s.refused(ctx, signer, userID, tok)
	}
	return res, err
}

// dropSession closes userID's session if it is still c.
func (s *server) dropSession(userID int64, c *conn) {
	s.mu.Lock()
	us := s.sessions[userID]
	s.mu.Unlock()
	if us == nil {
		return
	}
	us.mu.Lock()
	if us.conn == c {
		us.conn = nil
	}
	us.mu.Unlock()
	c.close()
}

// SignInServers lists the servers each user signs in to, sorted.
func (m *Manager) SignInServers() []string {
	var out []string
	for _, sv := range m.serverList() {
		sv.mu.Lock()
		if sv.perUser {
			out = append(out, sv.spec.Name)
		}
		sv.mu.Unlock()
	}
	slices.Sort(out)
	return out
}

// OpenAs opens userID's session to server, a server each user signs in to,
// with their token from signer: its tools are then listed (Tools). A
// *agent.NeedsConnection when userID has not connected it (or the server
// refused the token); nil for a server users do not sign in to.
func (m *Manager) OpenAs(ctx context.Context, signer Signer, userID int64, server string) error {
	sv := m.serverNamed(server)
	if sv == nil || !sv.isPerUser() {
		return nil
	}
	_, _, _, err := sv.userConn(ctx, signer, userID)
	return err
}

// CallAs is Call made for userID: a tool of a server each user signs in to
// goes over userID's own session, with their token from signer; other
// tools as Call. A *agent.NeedsConnection when userID has no live
// connection to the server, or the server refused their token (401): the
// call did not run.
func (m *Manager) CallAs(ctx context.Context, signer Signer, userID int64, name string, args map[string]any) (*mcp.CallToolResult, error) {
	if server, ok := agent.MCPServerOfTool(name); ok && signer != nil {
		if sv := m.serverNamed(server); sv != nil && sv.isPerUser() {
			sv.mu.Lock()
			tool, known := sv.byName[name]
			sv.mu.Unlock()
			if !known {
				// This process has not listed the server's tools yet
				// (another replica did): the user's session lists them.
				if _, _, _, err := sv.userConn(ctx, signer, userID); err != nil {
					return nil, err
				}
				sv.mu.Lock()
				tool, known = sv.byName[name]
				sv.mu.Unlock()
			}
			if !known {
				return nil, &CallError{Server: server, Tool: name, Msg: fmt.Sprintf("tool %s is not available: MCP server %q does not offer it", name, server)}
			}
			return sv.callAs(ctx, signer, userID, tool, args)
		}
	}
	return m.Call(ctx, name, args)
}

func (m *Manager) serverNamed(name string) *server {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.servers[name]
}

func (s *server) isPerUser() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.perUser
}
