package mcpclient

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"pizzabot/agent"
)

// Servers used with each user's own connection (docs/mcp.md, issues 30
// and 31). A server is one when its configuration says so
// (agent.MCPServerConfig.EachUser): an "oauth" block, ${user:NAME} in an
// HTTP server's headers or a stdio server's env, or "perUser" (the
// built-in browser, whose cookies and tabs are its user's); or when it
// answered our first connection with 401 (the MCP authorization spec's
// challenge). Such a server has no shared connection: each user's calls go
// over a session of theirs, and for a stdio server a session is a process
// of theirs, started with their values filled into its env (a perUser one
// in a folder of theirs under its cwd).
//
// Invariants:
//   - A session belongs to one user and is never used for another's call.
//   - One dial at a time per session (session.mu); server.mu is never
//     held over a dial, and under it a session's lock is only tried
//     (TryLock), never waited for: one user's slow start never holds up
//     another's calls.
//   - A session is reopened when what it was opened with changes (a
//     refreshed token, another value), restarted on the next call when
//     its process died, and closed after SessionIdle unused (the server's
//     reaper), or when a new user's process needs room under
//     MaxUserProcesses (the one idle longest goes first; none that is in a
//     call or starting).
//   - A session that could not be opened is not tried again before its
//     backoff (MinBackoff doubling to MaxBackoff, as a shared server's
//     restarts), unless its user's values changed meanwhile.
//   - The tools offered are the server's (one program or URL for
//     everyone): the union of what its open sessions listed, and, when
//     none is open, what the last one listed. Only a successful session
//     changes them; a user's failure never does. A user's call of a tool
//     their own session does not list is refused without running.
//
// A 401 tells the Signer (the connection then waits for Reconnect) and is
// an *agent.NeedsConnection: the server refused the call, which did not
// run. Whether a run's user may use the tools at all is the runtime's to
// decide (SignInServers, OpenAs).

// StateSignIn: each user signs in to the server (or enters their values);
// there is no shared connection (see above).
const StateSignIn = "sign_in"

// sessionIdle is how long a user's unused session stays open by default.
const sessionIdle = 10 * time.Minute

// maxUserProcesses is how many per-user processes one stdio server runs at
// most by default.
const maxUserProcesses = 8

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

// session is one user's connection to a server used with each user's own.
type session struct {
	mu   sync.Mutex // one dial at a time; guards the fields below but the last ones
	conn *conn
	// key is what the session was opened with (token and values): a
	// change reopens it.
	key string
	// gone: the session left the server's map (evicted, or the server
	// stopped); whoever locks it then looks the user's session up again.
	gone bool
	// refused is the key of ${user:NAME} values the server answered 401
	// to: not tried again until the user enters others.
	refused string
	// failures counts the consecutive failed opens with failKey; the
	// next is not tried before next.
	failures int
	failKey  string
	next     time.Time
	lastErr  string
	// ring keeps the standard error of the user's process: never shown
	// (it may hold their values), only its end is written when a start
	// fails.
	ring *Ring

	// Guarded by server.mu: the tools the open session listed (listed
	// false when none is open), how many calls use conn now, and when it
	// was last used.
	tools  []Tool
	listed bool
	inUse  int
	used   time.Time
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

// needsCreds reports whether a session needs a token or values; s.mu is
// held.
func (s *server) needsCreds() bool { return s.oauth || len(s.secrets) > 0 }

func (s *server) creds(ctx context.Context, signer Signer, userID int64) (creds, error) {
	s.mu.Lock()
	oauth, secrets := s.oauth, s.secrets
	s.mu.Unlock()
	var c creds
	if userID <= 0 || (oauth || len(secrets) > 0) && signer == nil {
		return c, &CallError{Server: s.spec.Name, Msg: fmt.Sprintf("MCP server %q is used with each person's own connection, and this call was made for nobody. The call did not run.", s.spec.Name)}
	}
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

// serveSessions closes the sessions left unused for SessionIdle (and those
// whose process died) until the server is stopped.
func (s *server) serveSessions() {
	every := min(max(s.m.opts.SessionIdle/4, 10*time.Millisecond), time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case now := <-t.C:
			s.reap(now)
		}
	}
}

// reap closes the sessions idle since before now-SessionIdle and forgets
// those whose process died.
func (s *server) reap(now time.Time) {
	var closing []*conn
	s.mu.Lock()
	for id, us := range s.sessions {
		if us.inUse > 0 || !us.mu.TryLock() {
			continue // in a call, or opening
		}
		idle := now.Sub(us.used) > s.m.opts.SessionIdle
		if us.conn != nil && (idle || us.conn.isDead()) {
			closing = append(closing, us.conn)
			us.conn = nil
			us.tools, us.listed = nil, false
		}
		if idle && us.refused == "" && us.failures == 0 {
			// Nothing worth remembering: the user's next call starts over.
			delete(s.sessions, id)
			us.gone = true
		}
		us.mu.Unlock()
	}
	changed := len(closing) > 0 && s.relearnLocked()
	s.mu.Unlock()
	for _, c := range closing {
		c.close()
	}
	if changed {
		s.m.changed()
	}
}

// closeSessions ends every user's session, waiting for their processes.
func (s *server) closeSessions() {
	s.mu.Lock()
	sessions := s.sessions
	s.sessions = nil
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, us := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			us.mu.Lock()
			c := us.conn
			us.conn, us.gone = nil, true
			us.mu.Unlock()
			if c != nil {
				c.close()
			}
		}()
	}
	wg.Wait()
}

// userConn is userID's live session to s, opened (and its tools listed)
// with their current token and values when there is none, its process
// died, or what it was opened with changed. The caller must call release
// once done with the connection: until then it is in use, and neither
// closed as idle nor to make room.
func (s *server) userConn(ctx context.Context, signer Signer, userID int64) (c *conn, us *session, cr creds, release func(), err error) {
	cr, err = s.creds(ctx, signer, userID)
	if err != nil {
		return nil, nil, cr, nil, err
	}
	for {
		s.mu.Lock()
		if s.ctx.Err() != nil {
			s.mu.Unlock()
			return nil, nil, cr, nil, &CallError{Server: s.spec.Name, Msg: fmt.Sprintf("MCP server %q is stopped", s.spec.Name)}
		}
		if s.sessions == nil {
			s.sessions = map[int64]*session{}
		}
		us = s.sessions[userID]
		if us == nil {
			us = &session{ring: NewRing(s.m.opts.StderrBytes)}
			s.sessions[userID] = us
		}
		s.mu.Unlock()

		us.mu.Lock()
		if us.gone {
			us.mu.Unlock()
			continue // evicted meanwhile: look again
		}
		c, err = s.open(ctx, signer, userID, us, cr)
		if err == nil {
			s.mu.Lock()
			us.inUse++
			s.mu.Unlock()
		}
		us.mu.Unlock()
		if err != nil {
			return nil, nil, cr, nil, err
		}
		var once sync.Once
		release = func() {
			once.Do(func() {
				s.mu.Lock()
				us.inUse--
				us.used = time.Now()
				s.mu.Unlock()
			})
		}
		return c, us, cr, release, nil
	}
}

// open returns us's connection, opening it when needed; us.mu is held.
func (s *server) open(ctx context.Context, signer Signer, userID int64, us *session, cr creds) (*conn, error) {
	key := cr.key()
	now := time.Now()
	s.mu.Lock()
	us.used = now
	s.mu.Unlock()
	if cr.token == "" && us.refused != "" && us.refused == key {
		return nil, s.refusedValues()
	}
	if us.conn != nil {
		if !us.conn.isDead() && us.key == key {
			return us.conn, nil
		}
		// Its process died (it starts again now), or the user's token
		// or values changed.
		old := us.conn
		us.conn = nil
		s.forget(us)
		old.close()
	}
	if us.failures > 0 && us.failKey == key && now.Before(us.next) {
		return nil, &CallError{Server: s.spec.Name, Msg: fmt.Sprintf("MCP server %q could not be reached (%s); the next attempt is in %s. The call did not run.",
			s.spec.Name, us.lastErr, time.Until(us.next).Round(time.Second))}
	}
	cfg, err := s.userConfig(cr, userID)
	if err != nil {
		return nil, s.failed(us, key, err)
	}
	if cfg.Type == agent.MCPStdio {
		if err := s.makeRoom(us); err != nil {
			return nil, err
		}
	}
	log := s.m.log.With("mcp_server", s.spec.Name)
	c, err := dial(s.ctx, cfg, us.ring, log)
	if err != nil {
		return nil, s.failed(us, key, err)
	}
	hctx, cancel := context.WithTimeout(ctx, s.m.opts.ConnectTimeout)
	defer cancel()
	hctx, stop := withDeath(hctx, c)
	defer stop()
	info, tools, err := handshake(hctx, c)
	if err != nil {
		if errors.Is(err, transport.ErrAuthorizationRequired) {
			c.close()
			if cr.token == "" {
				us.refused = key
			}
			return nil, s.refused(ctx, signer, userID, cr.token)
		}
		if ctx.Err() != nil {
			c.close()
			return nil, ctx.Err() // the caller gave up: not the server's failure
		}
		if derr := deathReason(c); derr != nil && !errors.Is(derr, errClosedByUs) {
			err = fmt.Errorf("%v (%v)", err, derr)
		}
		c.close()
		return nil, s.failed(us, key, err)
	}
	us.conn, us.key = c, key
	us.failures, us.failKey, us.lastErr = 0, "", ""
	s.learn(us, info, tools)
	return c, nil
}

// failed records that us could not be opened with key, and when it may be
// tried again; us.mu is held.
func (s *server) failed(us *session, key string, err error) error {
	if us.failKey != key {
		us.failures = 0
	}
	us.failures++
	us.failKey = key
	delay := backoff(s.m.opts, us.failures)
	us.next = time.Now().Add(delay)
	us.lastErr = err.Error()
	// The server's stderr tail says that a user's session failed, not
	// whose, nor what their process wrote (it may hold their values).
	s.ring.Note(fmt.Sprintf("--- %s: a person's session failed: %v; their next attempt in %s ---", time.Now().Format(time.TimeOnly), err, delay.Round(time.Millisecond)))
	s.m.log.Warn("open a user's mcp session", "mcp_server", s.spec.Name, "err", err, "retry_in", delay.String())
	return &CallError{Server: s.spec.Name, Msg: fmt.Sprintf("MCP server %q could not be reached: %v. The call did not run.", s.spec.Name, err)}
}

// userConfig is s's configuration for userID's session: their values in
// the headers (HTTP, SSE) or env (stdio), their token as the bearer, and a
// perUser stdio server's cwd a folder of theirs.
func (s *server) userConfig(cr creds, userID int64) (agent.MCPServerConfig, error) {
	cfg := s.spec.Config
	fill := func(m map[string]string) map[string]string {
		out := maps.Clone(m)
		for k, v := range out {
			for n, val := range cr.values {
				v = strings.ReplaceAll(v, agent.UserSecretRef(n), val)
			}
			out[k] = v
		}
		return out
	}
	cfg.Headers = fill(cfg.Headers)
	cfg.Env = fill(cfg.Env)
	if cr.token != "" {
		if cfg.Headers == nil {
			cfg.Headers = map[string]string{}
		}
		for k := range cfg.Headers {
			if strings.EqualFold(k, "Authorization") {
				delete(cfg.Headers, k) // the user's token, never the configuration's
			}
		}
		cfg.Headers["Authorization"] = "Bearer " + cr.token
	}
	if cfg.Type == agent.MCPStdio && cfg.PerUser && cfg.Cwd != "" {
		// What one user's process writes (downloads, screenshots) is
		// never in another's folder.
		cfg.Cwd = filepath.Join(cfg.Cwd, "user-"+strconv.FormatInt(userID, 10))
		if err := os.MkdirAll(cfg.Cwd, 0o700); err != nil {
			return cfg, fmt.Errorf("the user's folder: %w", err)
		}
	}
	return cfg, nil
}

// makeRoom closes the live process idle longest among the other sessions
// of s when they have MaxUserProcesses; us.mu is held. When every one is
// in a call or starting, the call is refused.
func (s *server) makeRoom(us *session) error {
	s.mu.Lock()
	live := 0
	var oldest *session
	for _, o := range s.sessions {
		if o == us {
			continue
		}
		if !o.mu.TryLock() {
			live++ // starting, most likely
			continue
		}
		if o.conn != nil && !o.conn.isDead() {
			live++
			if o.inUse == 0 && (oldest == nil || o.used.Before(oldest.used)) {
				oldest = o
			}
		}
		o.mu.Unlock()
	}
	if live < s.m.opts.MaxUserProcesses {
		s.mu.Unlock()
		return nil
	}
	var c *conn
	if oldest != nil && oldest.inUse == 0 && oldest.mu.TryLock() {
		c = oldest.conn
		oldest.conn = nil
		oldest.tools, oldest.listed = nil, false
		oldest.mu.Unlock()
	}
	s.mu.Unlock()
	if c == nil {
		return &CallError{Server: s.spec.Name, Msg: fmt.Sprintf("MCP server %q already runs %d processes for other people, all busy; try again shortly. The call did not run.", s.spec.Name, live)}
	}
	s.ring.Note(fmt.Sprintf("--- %s: closed the process idle longest, to stay within %d per-user processes ---", time.Now().Format(time.TimeOnly), s.m.opts.MaxUserProcesses))
	c.close()
	return nil
}

// learn records the tools us's new session listed, and the server's tools
// anew.
func (s *server) learn(us *session, info *mcp.InitializeResult, tools []mcp.Tool) {
	offered, skipped := convertTools(s.spec.Name, tools)
	s.mu.Lock()
	us.tools, us.listed = offered, true
	s.skipped = skipped
	if info != nil {
		s.info = strings.TrimSpace(info.ServerInfo.Name + " " + info.ServerInfo.Version)
	}
	changed := s.relearnLocked()
	s.mu.Unlock()
	if changed {
		s.m.changed()
	}
}

// forget drops the tools of us's session, which closed; us.mu is held.
func (s *server) forget(us *session) {
	s.mu.Lock()
	us.tools, us.listed = nil, false
	changed := s.relearnLocked()
	s.mu.Unlock()
	if changed {
		s.m.changed()
	}
}

// relearnLocked makes the server's tools the union of those its open
// sessions listed (the most recently used session's description of a
// tool wins); with none open it keeps the last ones. s.mu is held; it
// reports whether they changed.
func (s *server) relearnLocked() bool {
	var open []*session
	for _, us := range s.sessions {
		if us.listed {
			open = append(open, us)
		}
	}
	if len(open) == 0 {
		return false
	}
	slices.SortFunc(open, func(a, b *session) int { return b.used.Compare(a.used) })
	byName := map[string]Tool{}
	var all []Tool
	for _, us := range open {
		for _, t := range us.tools {
			if _, dup := byName[t.Spec.Name]; !dup {
				byName[t.Spec.Name] = t
				all = append(all, t)
			}
		}
	}
	slices.SortFunc(all, func(a, b Tool) int { return strings.Compare(a.Spec.Name, b.Spec.Name) })
	changed := !slices.EqualFunc(s.tools, all, func(a, b Tool) bool { return a.Spec.Name == b.Spec.Name && a.Spec.Description == b.Spec.Description })
	s.tools, s.byName = all, byName
	return changed
}

// callAs runs one call of the tool offered as name over userID's session.
func (s *server) callAs(ctx context.Context, signer Signer, userID int64, name string, args map[string]any) (*mcp.CallToolResult, error) {
	c, us, cr, release, err := s.userConn(ctx, signer, userID)
	if err != nil {
		return nil, err
	}
	defer release()
	s.mu.Lock()
	tool, known := s.byName[name]
	mine := slices.ContainsFunc(us.tools, func(t Tool) bool { return t.Spec.Name == name })
	s.mu.Unlock()
	if !known {
		return nil, &CallError{Server: s.spec.Name, Tool: name, Msg: fmt.Sprintf("tool %s is not available: MCP server %q does not offer it", name, s.spec.Name)}
	}
	if !mine {
		// Another user's session lists it; the server gives this user
		// other tools (their account's permissions, say).
		return nil, &CallError{Server: s.spec.Name, Tool: name, Msg: fmt.Sprintf("tool %s is not available to this run: MCP server %q does not offer it to its person. The call did not run.", name, s.spec.Name)}
	}
	res, err := s.callOn(ctx, c, tool, args)
	var ce *CallError
	if errors.As(err, &ce) && ce.unauthorized {
		s.dropSession(us, c)
		if cr.token == "" {
			us.mu.Lock()
			us.refused = cr.key()
			us.mu.Unlock()
		}
		return nil, s.refused(ctx, signer, userID, cr.token)
	}
	return res, err
}

// dropSession closes us's connection if it is still c.
func (s *server) dropSession(us *session, c *conn) {
	us.mu.Lock()
	if us.conn == c {
		us.conn = nil
		s.forget(us)
	}
	us.mu.Unlock()
	c.close()
}

// SignInServers lists the servers each user signs in to (a token, or
// ${user:NAME} values), sorted: a run of a user who has not is not offered
// their tools, or waits. A server marked perUser that needs neither is not
// one: every user's calls work, each over their own session.
func (m *Manager) SignInServers() []string {
	var out []string
	for _, sv := range m.serverList() {
		sv.mu.Lock()
		if sv.perUser && sv.needsCreds() {
			out = append(out, sv.spec.Name)
		}
		sv.mu.Unlock()
	}
	slices.Sort(out)
	return out
}

// OpenAs opens userID's session to server, a server each user signs in to,
// with their token and values from signer: its tools are then listed
// (Tools). A *agent.NeedsConnection when userID has not connected it (or
// the server refused the token); nil for a server users do not sign in to.
// A stdio server whose tools are known is not started for this: its
// process starts on the user's first call.
func (m *Manager) OpenAs(ctx context.Context, signer Signer, userID int64, server string) error {
	sv := m.serverNamed(server)
	if sv == nil || !sv.isPerUser() {
		return nil
	}
	sv.mu.Lock()
	known := len(sv.byName) > 0 && sv.spec.Config.Type == agent.MCPStdio
	sv.mu.Unlock()
	if known {
		return m.Credentialed(ctx, signer, userID, server)
	}
	_, _, _, release, err := sv.userConn(ctx, signer, userID)
	if err == nil {
		release()
	}
	return err
}

// CallAs is Call made for userID: a tool of a server used with each user's
// own connection goes over userID's own session (for stdio, their own
// process), with their token and values from signer; other tools as Call.
// A *agent.NeedsConnection when userID has no live connection to the
// server, or the server refused their token (401): the call did not run.
func (m *Manager) CallAs(ctx context.Context, signer Signer, userID int64, name string, args map[string]any) (*mcp.CallToolResult, error) {
	sv, owners := m.serverOfTool(name)
	if owners == 0 {
		// This process has not listed the server's tools yet (another
		// replica did): the user's session lists them.
		if server, ok := agent.MCPServerOfTool(name); ok {
			sv = m.serverNamed(server)
		}
		if sv == nil {
			// A name shortened with a hash has no server part: the one
			// server used with each user's own whose tool it can be.
			sv = m.perUserServerOf(name)
		}
	}
	if owners <= 1 && sv != nil && sv.isPerUser() {
		return sv.callAs(ctx, signer, userID, name, args)
	}
	return m.Call(ctx, name, args)
}

// perUserServerOf is the one server used with each user's own
// connection that a tool named name can be of (agent.MCPToolOf), or nil
// when none or several can.
func (m *Manager) perUserServerOf(name string) *server {
	var out *server
	for _, sv := range m.serverList() {
		if !sv.isPerUser() || !agent.MCPToolOf(name, sv.spec.Name) {
			continue
		}
		if out != nil {
			return nil
		}
		out = sv
	}
	return out
}

// serverOfTool is the server offering a tool named name (mcp__...), and
// how many do.
func (m *Manager) serverOfTool(name string) (*server, int) {
	var out *server
	n := 0
	for _, sv := range m.serverList() {
		sv.mu.Lock()
		_, ok := sv.byName[name]
		sv.mu.Unlock()
		if ok {
			out = sv
			n++
		}
	}
	return out, n
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

// sessionCount is how many users' sessions are open; s.mu is held.
func (s *server) sessionCount() int {
	n := 0
	for _, us := range s.sessions {
		if us.listed {
			n++
		}
	}
	return n
}
