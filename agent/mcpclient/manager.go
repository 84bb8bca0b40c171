// Package mcpclient keeps Pizza Bot connected to its MCP servers: it starts
// stdio servers and restarts them with exponential backoff when they die,
// connects to streamable HTTP and legacy SSE servers, lists their tools and
// calls them. It is the outbound side of MCP, like the model client: no
// HTTP server, database or queue here.
//
// A Manager is told the servers that should run (Apply) and reconciles: new
// ones start, removed ones stop, changed ones restart. Tools are offered as
// mcp__<server>__<tool>.
package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"pizzabot/agent"
)

// Server states.
const (
	// StateStarting: connecting (starting the process, the handshake).
	StateStarting = "starting"
	// StateConnected: the handshake succeeded and the tools are listed.
	StateConnected = "connected"
	// StateRestarting: the connection failed or was lost; the next
	// attempt is due at Status.NextAttempt.
	StateRestarting = "restarting"
	// StateStopped: the manager stopped the server.
	StateStopped = "stopped"
)

// Options tune a Manager. Zero values take the defaults.
type Options struct {
	Logger *slog.Logger
	// CallTimeout bounds one tool call (default 2 minutes).
	CallTimeout time.Duration
	// ConnectTimeout bounds starting a server, its handshake and listing
	// its tools (default 60 seconds: npx may first download the server).
	ConnectTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait before a restart, doubling
	// on each consecutive failure (defaults 1 second and 5 minutes).
	MinBackoff, MaxBackoff time.Duration
	// StableAfter is how long a connection must last for its restart to
	// start the backoff over (default 1 minute).
	StableAfter time.Duration
	// Grace is how long the tools of a server that went down stay offered
	// while it restarts (default 1 minute): calls in that time get a tool
	// error, and runs of skills that need them are not failed by a restart.
	Grace time.Duration
	// StderrBytes is how much of a stdio server's standard error is kept
	// (default 16 KiB).
	StderrBytes int
	// SessionIdle is how long a user's unused session to a server used
	// with each user's own connection stays open (default 10 minutes):
	// for a stdio server, their process (peruser.go).
	SessionIdle time.Duration
	// MaxUserProcesses bounds the live per-user processes of one stdio
	// server (default 8): a new user's process first closes the one idle
	// longest.
	MaxUserProcesses int
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.CallTimeout, 2*time.Minute)
	def(&o.ConnectTimeout, time.Minute)
	def(&o.MinBackoff, time.Second)
	def(&o.MaxBackoff, 5*time.Minute)
	def(&o.StableAfter, time.Minute)
	def(&o.Grace, time.Minute)
	if o.StderrBytes <= 0 {
		o.StderrBytes = 16 << 10
	}
	def(&o.SessionIdle, sessionIdle)
	if o.MaxUserProcesses <= 0 {
		o.MaxUserProcesses = maxUserProcesses
	}
	return o
}

// Spec is a server to run: its name and its expanded, normalized
// configuration (see agent.MCPServerConfig.Expand).
type Spec struct {
	Name   string
	Config agent.MCPServerConfig
}

// Tool is a tool of a connected server.
type Tool struct {
	// Server is the server's name.
	Server string
	// Name is the tool's name on its server.
	Name string
	// Spec is what the model is offered: Name is mcp__<server>__<tool>.
	Spec agent.ToolSpec
	// Title is the tool's display name, when the server gives one.
	Title string
	// ReadOnly is the server's hint that the tool changes nothing. It is
	// only a hint: calls are treated as having effects regardless.
	ReadOnly bool
}

// Status is what the settings page shows of a server.
type Status struct {
	Name  string
	Type  string
	State string
	// Err is the last failure: why the connection failed or was lost.
	Err string
	// Tools are the server's tools, offered to runs while Offered.
	Tools []Tool
	// Offered reports whether the tools are offered now: connected, or
	// down for less than the grace period.
	Offered bool
	// Skipped lists tools that cannot be offered, with the reason.
	Skipped []string
	// Stderr is the tail of a stdio server's standard error.
	Stderr string
	// Restarts counts the connections lost since the server was applied.
	Restarts int
	// Since is when the server entered State.
	Since time.Time
	// NextAttempt is when a restarting server is tried again.
	NextAttempt time.Time
	// ServerInfo is the name and version the server reported.
	ServerInfo string
	// PID is a stdio server's process id while it runs (none for a
	// server used with each user's own connection).
	PID int
	// Sessions is how many users' own sessions of the server are open
	// (for stdio, their processes).
	Sessions int
}

// Manager supervises the MCP servers. Its methods are safe for concurrent
// use.
type Manager struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	servers  map[string]*server
	closed   bool
	onChange []func()
}

// New returns a Manager with no servers.
func New(opts Options) *Manager {
	opts = opts.withDefaults()
	return &Manager{opts: opts, log: opts.Logger, servers: map[string]*server{}}
}

// OnChange registers fn, called (on its own goroutine) whenever a server's
// state or tools change.
func (m *Manager) OnChange(fn func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.onChange = append(m.onChange, fn)
}

func (m *Manager) changed() {
	m.mu.Lock()
	fns := slices.Clone(m.onChange)
	m.mu.Unlock()
	for _, fn := range fns {
		go fn()
	}
}

// Apply makes specs the servers that run: servers not in specs stop, new
// ones start, and those whose configuration changed restart. Servers whose
// configuration is unchanged keep running undisturbed.
func (m *Manager) Apply(specs []Spec) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	want := map[string]Spec{}
	for _, s := range specs {
		want[s.Name] = s
	}
	var stop []*server
	for name, sv := range m.servers {
		if s, ok := want[name]; !ok || !reflect.DeepEqual(s.Config, sv.spec.Config) {
			stop = append(stop, sv)
			delete(m.servers, name)
		}
	}
	var start []*server
	for name, s := range want {
		if _, ok := m.servers[name]; ok {
			continue
		}
		sv := m.newServer(s)
		m.servers[name] = sv
		start = append(start, sv)
	}
	m.mu.Unlock()
	for _, sv := range stop {
		sv.stop()
	}
	for _, sv := range start {
		go sv.run()
	}
	if len(stop)+len(start) > 0 {
		m.changed()
	}
}

// Restart drops the connection of the named server and connects again at
// once (the settings page's "Restart").
func (m *Manager) Restart(name string) bool {
	m.mu.Lock()
	sv, ok := m.servers[name]
	if !ok {
		m.mu.Unlock()
		return false
	}
	delete(m.servers, name)
	nsv := m.newServer(sv.spec)
	nsv.ring = sv.ring
	sv.mu.Lock()
	nsv.restarts = sv.restarts
	sv.mu.Unlock()
	m.servers[name] = nsv
	m.mu.Unlock()
	sv.stop()
	nsv.ring.Note("--- restarted from the settings page ---")
	go nsv.run()
	m.changed()
	return true
}

// Close stops every server and waits for their processes to end.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	servers := m.servers
	m.servers = map[string]*server{}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, sv := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sv.stop()
		}()
	}
	wg.Wait()
}

// Status returns the state of every server, sorted by name.
func (m *Manager) Status() []Status {
	m.mu.Lock()
	servers := make([]*server, 0, len(m.servers))
	for _, sv := range m.servers {
		servers = append(servers, sv)
	}
	m.mu.Unlock()
	out := make([]Status, 0, len(servers))
	for _, sv := range servers {
		st := sv.status()
		// Tools whose names another server's tools share are not offered.
		st.Tools = slices.DeleteFunc(st.Tools, func(t Tool) bool {
			owners := m.serversOf(t.Spec.Name)
			if len(owners) < 2 {
				return false
			}
			st.Skipped = append(st.Skipped, fmt.Sprintf("%s: its name becomes %s, like a tool of %s; neither is offered (rename one of the servers)",
				t.Name, t.Spec.Name, strings.Join(slices.DeleteFunc(owners, func(o string) bool { return o == st.Name }), ", ")))
			return true
		})
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Tools returns the tools offered now, sorted by name: those of connected
// servers, and of servers down for less than the grace period. A name two
// servers' tools share (mcp__a___x is both a's "_x" and a_'s "x") is not
// offered at all: a call to it could reach a server other than the one a
// person approved. Status lists it under Skipped.
func (m *Manager) Tools() []Tool {
	var out []Tool
	now := time.Now()
	for _, sv := range m.serverList() {
		sv.mu.Lock()
		if sv.offered(now) {
			out = append(out, sv.tools...)
		}
		sv.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b Tool) int { return strings.Compare(a.Spec.Name, b.Spec.Name) })
	return slices.DeleteFunc(out, func(t Tool) bool { return len(m.serversOf(t.Spec.Name)) > 1 })
}

// ServerNames lists the servers in use, as Status does, without their
// status: a look at a map, for callers that only ask which there are.
func (m *Manager) ServerNames() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := make([]string, 0, len(m.servers))
	for name := range m.servers {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func (m *Manager) serverList() []*server {
	m.mu.Lock()
	defer m.mu.Unlock()
	servers := make([]*server, 0, len(m.servers))
	for _, sv := range m.servers {
		servers = append(servers, sv)
	}
	return servers
}

// serversOf returns the servers that have a tool named name (mcp__...),
// sorted by name.
func (m *Manager) serversOf(name string) []string {
	var out []string
	for _, sv := range m.serverList() {
		sv.mu.Lock()
		if _, ok := sv.byName[name]; ok {
			out = append(out, sv.spec.Name)
		}
		sv.mu.Unlock()
	}
	slices.Sort(out)
	return out
}

// CallError is a failed call that never reached a result: the server is
// down, timed out, or lost the connection during the call. Its text is
// written for the model.
type CallError struct {
	Server string
	Tool   string
	Msg    string
	// unauthorized: the server answered 401 (see callAs).
	unauthorized bool
}

func (e *CallError) Error() string { return e.Msg }

// Call calls a tool by its offered name (mcp__<server>__<tool>) with the
// per-call timeout. A tool that reports an error (IsError) is a result, not
// an error; a server that is down or does not answer in time is a
// *CallError.
func (m *Manager) Call(ctx context.Context, name string, args map[string]any) (*mcp.CallToolResult, error) {
	var sv *server
	var tool Tool
	var owners []string
	for _, s := range m.serverList() {
		s.mu.Lock()
		t, ok := s.byName[name]
		s.mu.Unlock()
		if ok {
			sv, tool = s, t
			owners = append(owners, s.spec.Name)
		}
	}
	if len(owners) > 1 {
		// Never guess: the call was shown (and maybe approved) by name only.
		slices.Sort(owners)
		return nil, &CallError{Tool: name, Msg: fmt.Sprintf("tool %s is not available: servers %s both offer a tool of that name; an admin must rename one server", name, strings.Join(owners, " and "))}
	}
	if sv == nil {
		return nil, &CallError{Tool: name, Msg: fmt.Sprintf("tool %s is not available: its MCP server is not configured any more", name)}
	}
	return sv.call(ctx, tool, args)
}

// server is one supervised server.
type server struct {
	m      *Manager
	spec   Spec
	ring   *Ring
	ctx    context.Context
	stopFn context.CancelFunc
	done   chan struct{}
	// kick asks the supervisor to check the connection (a call failed).
	kick chan struct{}

	mu        sync.Mutex
	state     string
	err       string
	conn      *conn
	tools     []Tool
	byName    map[string]Tool
	skipped   []string
	restarts  int
	since     time.Time
	downSince time.Time
	next      time.Time
	info      string
	// perUser: each user has a connection of their own (peruser.go);
	// sessions are their connections.
	perUser  bool
	sessions map[int64]*session
	// oauth: a user's session carries their access token (an "oauth"
	// block, or the server's 401 challenge); secrets are the NAMEs of
	// the ${user:NAME} in its headers or env, filled with each user's
	// values.
	oauth   bool
	secrets []string
}

func (m *Manager) newServer(s Spec) *server {
	ctx, cancel := context.WithCancel(context.Background())
	return &server{
		m: m, spec: s, ring: NewRing(m.opts.StderrBytes),
		ctx: ctx, stopFn: cancel, done: make(chan struct{}), kick: make(chan struct{}, 1),
		state: StateStarting, since: time.Now(), byName: map[string]Tool{},
		// Known at once: runs ask SignInServers before it first runs.
		perUser: s.Config.EachUser(),
		oauth:   s.Config.OAuth != nil, secrets: s.Config.UserSecrets(),
	}
}

// offered reports whether the tools are offered at now; s.mu is held.
func (s *server) offered(now time.Time) bool {
	switch s.state {
	case StateConnected, StateSignIn:
		return true
	case StateRestarting, StateStarting:
		return !s.downSince.IsZero() && now.Sub(s.downSince) < s.m.opts.Grace
	}
	return false
}

func (s *server) status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{
		Name: s.spec.Name, Type: s.spec.Config.Type, State: s.state, Err: s.err,
		Tools: slices.Clone(s.tools), Offered: s.offered(time.Now()), Skipped: slices.Clone(s.skipped),
		Restarts: s.restarts, Since: s.since, ServerInfo: s.info,
	}
	if s.state == StateRestarting {
		st.NextAttempt = s.next
	}
	if s.conn != nil {
		st.PID = s.conn.pid
	}
	st.Sessions = s.sessionCount()
	if s.spec.Config.Type == agent.MCPStdio {
		st.Stderr = s.ring.String()
	}
	return st
}

func (s *server) setState(state, errMsg string) {
	s.mu.Lock()
	changed := s.state != state || s.err != errMsg
	s.state, s.err = state, errMsg
	if changed {
		s.since = time.Now()
	}
	s.mu.Unlock()
	if changed {
		s.m.changed()
	}
}

func (s *server) stop() {
	s.stopFn()
	<-s.done
}

// run connects and reconnects until the server is stopped.
func (s *server) run() {
	defer close(s.done)
	log := s.m.log.With("mcp_server", s.spec.Name)
	if s.spec.Config.OAuth != nil || len(s.secrets) > 0 {
		// No connection without a user's token or values.
		s.waitSignedIn()
		return
	}
	// perUser without a token or values (the built-in browser): the
	// connection below only lists the tools, and is closed; each user's
	// calls go over a session of theirs.
	isolated := s.spec.Config.PerUser
	failures := 0
	for {
		s.setState(StateStarting, s.currentErr())
		c, info, tools, err := s.connect()
		if s.ctx.Err() != nil {
			if c != nil {
				c.close()
			}
			s.finish()
			return
		}
		if errors.Is(err, transport.ErrAuthorizationRequired) {
			// The MCP authorization spec's challenge: each user signs in.
			log.Info("mcp server asks each user to sign in")
			s.mu.Lock()
			s.oauth = true
			s.mu.Unlock()
			s.waitSignedIn()
			return
		}
		if err != nil {
			failures++
			delay := backoff(s.m.opts, failures)
			log.Warn("mcp server failed to start", "err", err, "retry_in", delay.String())
			s.ring.Note(fmt.Sprintf("--- %s: %v; retrying in %s ---", time.Now().Format(time.TimeOnly), err, delay.Round(time.Millisecond)))
			s.down(err.Error(), delay)
			if !sleep(s.ctx, delay) {
				s.finish()
				return
			}
			continue
		}
		if isolated {
			c.close()
			s.up(nil, info, tools)
			log.Info("mcp server listed its tools; each user gets a session of their own", "tools", len(tools))
			s.serveSessions()
			s.finish()
			return
		}
		s.up(c, info, tools)
		log.Info("mcp server connected", "tools", len(tools), "pid", c.pid)
		up := time.Now()
		s.watch(c)
		c.close()
		if s.ctx.Err() != nil {
			s.finish()
			return
		}
		lost := c.err()
		if time.Since(up) >= s.m.opts.StableAfter {
			failures = 0
		}
		failures++
		delay := backoff(s.m.opts, failures)
		s.mu.Lock()
		s.restarts++
		s.mu.Unlock()
		log.Warn("mcp server connection lost", "err", lost, "retry_in", delay.String())
		s.ring.Note(fmt.Sprintf("--- %s: connection lost: %v; restarting in %s ---", time.Now().Format(time.TimeOnly), lost, delay.Round(time.Millisecond)))
		s.down(fmt.Sprintf("connection lost: %v", lost), delay)
		if !sleep(s.ctx, delay) {
			s.finish()
			return
		}
	}
}

func (s *server) currentErr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// connect starts the server and does the handshake within ConnectTimeout.
func (s *server) connect() (*conn, *mcp.InitializeResult, []mcp.Tool, error) {
	c, err := dial(s.ctx, s.spec.Config, s.ring, s.m.log.With("mcp_server", s.spec.Name))
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.m.opts.ConnectTimeout)
	defer cancel()
	ctx, stop := withDeath(ctx, c)
	defer stop()
	info, tools, err := handshake(ctx, c)
	if err != nil {
		if derr := deathReason(c); derr != nil && !errors.Is(derr, errClosedByUs) {
			err = fmt.Errorf("%v (%v)", err, derr)
		} else if ctx.Err() != nil && s.ctx.Err() == nil {
			err = fmt.Errorf("no answer within %s", s.m.opts.ConnectTimeout)
		}
		c.close()
		return nil, nil, nil, err
	}
	return c, info, tools, nil
}

var errClosedByUs = errors.New("closed")

// deathReason is why a connection whose handshake failed is gone. A process
// that exits makes the handshake fail (a broken pipe) a moment before its
// exit status is collected: wait briefly for it, since "exited with status
// 7" tells an admin far more than "transport closed".
func deathReason(c *conn) error {
	select {
	case <-c.dead:
	case <-time.After(250 * time.Millisecond):
	}
	return c.err()
}

// withDeath cancels ctx when the connection dies, so a handshake with a
// process that exited fails at once instead of at the timeout.
func withDeath(ctx context.Context, c *conn) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-c.dead:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// up records a new connection and its tools.
func (s *server) up(c *conn, info *mcp.InitializeResult, tools []mcp.Tool) {
	offered, skipped := convertTools(s.spec.Name, tools)
	s.mu.Lock()
	s.conn = c
	s.state, s.err, s.since = StateConnected, "", time.Now()
	s.downSince = time.Time{}
	s.tools, s.skipped = offered, skipped
	s.byName = map[string]Tool{}
	for _, t := range offered {
		s.byName[t.Spec.Name] = t
	}
	if info != nil {
		s.info = strings.TrimSpace(info.ServerInfo.Name + " " + info.ServerInfo.Version)
	}
	s.mu.Unlock()
	s.m.changed()
}

// down records a failure and when the next attempt is due.
func (s *server) down(msg string, delay time.Duration) {
	s.mu.Lock()
	s.conn = nil
	if s.downSince.IsZero() && s.state == StateConnected {
		s.downSince = time.Now()
	}
	s.state, s.err, s.since, s.next = StateRestarting, msg, time.Now(), time.Now().Add(delay)
	if !s.offered(time.Now()) {
		s.byName = map[string]Tool{}
	}
	s.mu.Unlock()
	s.m.changed()
}

// waitSignedIn serves the server's users' sessions until it is stopped.
func (s *server) waitSignedIn() {
	s.signIn()
	s.serveSessions()
	s.finish()
}

func (s *server) finish() {
	s.closeSessions()
	s.mu.Lock()
	s.conn = nil
	s.state, s.since = StateStopped, time.Now()
	s.byName = map[string]Tool{}
	s.mu.Unlock()
}

// watch waits until the connection is lost or the server stopped. When a
// call reports trouble, it checks the connection by listing the tools
// again (which also picks up a changed tool list).
func (s *server) watch(c *conn) {
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-c.dead:
			return
		case <-s.kick:
			ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
			tools, err := listTools(ctx, c)
			cancel()
			if s.ctx.Err() != nil {
				return
			}
			if err != nil {
				c.markDead(fmt.Errorf("it stopped answering: %v", err))
				return
			}
			s.up(c, nil, tools)
		}
	}
}

func (s *server) nudge() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// call runs one tool call on the current connection.
func (s *server) call(ctx context.Context, tool Tool, args map[string]any) (*mcp.CallToolResult, error) {
	s.mu.Lock()
	c, state, lastErr := s.conn, s.state, s.err
	next, perUser := s.next, s.perUser
	s.mu.Unlock()
	if perUser {
		return nil, &CallError{Server: s.spec.Name, Tool: tool.Name, Msg: fmt.Sprintf("MCP server %q is used with each person's own sign-in, and this call was made for nobody. The call did not run.", s.spec.Name)}
	}
	if c == nil {
		msg := fmt.Sprintf("MCP server %q is not connected (%s", s.spec.Name, state)
		if lastErr != "" {
			msg += ": " + lastErr
		}
		if state == StateRestarting && !next.IsZero() {
			msg += fmt.Sprintf("; next attempt in %s", time.Until(next).Round(time.Second))
		}
		msg += "). The call did not run; try again later or do without this tool."
		return nil, &CallError{Server: s.spec.Name, Tool: tool.Name, Msg: msg}
	}
	return s.callOn(ctx, c, tool, args)
}

// callOn runs one tool call on connection c.
func (s *server) callOn(ctx context.Context, c *conn, tool Tool, args map[string]any) (*mcp.CallToolResult, error) {
	cctx, cancel := context.WithTimeout(ctx, s.m.opts.CallTimeout)
	defer cancel()
	cctx, stop := withDeath(cctx, c)
	defer stop()
	res, err := c.client.CallTool(cctx, mcp.CallToolRequest{Params: mcp.CallToolParams{Name: tool.Name, Arguments: args}})
	if err == nil {
		return res, nil
	}
	if ctx.Err() != nil {
		// The caller gave up (shutdown, cancel): not the server's fault.
		return nil, ctx.Err()
	}
	if errors.Is(err, transport.ErrTransportClosed) && s.spec.Config.Type == agent.MCPStdio {
		// The process closed its output: it is exiting. Give its exit a
		// moment to be seen, to say how it ended.
		select {
		case <-c.dead:
		case <-time.After(2 * time.Second):
		}
	}
	select {
	case <-c.dead:
		return nil, &CallError{Server: s.spec.Name, Tool: tool.Name, Msg: fmt.Sprintf(
			"MCP server %q stopped during the call (%v); it is being restarted. The call may or may not have taken effect.", s.spec.Name, c.err())}
	default:
	}
	if errors.Is(cctx.Err(), context.DeadlineExceeded) {
		s.nudge()
		return nil, &CallError{Server: s.spec.Name, Tool: tool.Name, Msg: fmt.Sprintf(
			"MCP tool %s on server %q did not answer within %s; it may or may not have taken effect.", tool.Name, s.spec.Name, s.m.opts.CallTimeout)}
	}
	if errors.Is(err, transport.ErrAuthorizationRequired) {
		return nil, &CallError{Server: s.spec.Name, Tool: tool.Name, unauthorized: true, Msg: fmt.Sprintf(
			"MCP server %q refused the credentials (401); the call did not run.", s.spec.Name)}
	}
	var terr *transport.Error
	if errors.As(err, &terr) || errors.Is(err, transport.ErrTransportClosed) {
		s.nudge()
		return nil, &CallError{Server: s.spec.Name, Tool: tool.Name, Msg: fmt.Sprintf(
			"MCP server %q could not be reached for the call: %v", s.spec.Name, err)}
	}
	// A JSON-RPC error from the server (unknown tool, invalid params).
	return nil, &CallError{Server: s.spec.Name, Tool: tool.Name, Msg: fmt.Sprintf("MCP server %q refused the call: %v", s.spec.Name, err)}
}

// convertTools turns a server's tools into offered tools; those that cannot
// be offered are listed with the reason.
func convertTools(server string, tools []mcp.Tool) ([]Tool, []string) {
	var out []Tool
	var skipped []string
	seen := map[string]string{}
	for _, t := range tools {
		name := agent.MCPToolName(server, t.Name)
		if other, dup := seen[name]; dup {
			skipped = append(skipped, fmt.Sprintf("%s: its name becomes %s, like %s's", t.Name, name, other))
			continue
		}
		var params []byte
		var err error
		if len(t.RawInputSchema) > 0 {
			params = t.RawInputSchema
		} else {
			params, err = json.Marshal(t.InputSchema)
		}
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("%s: input schema: %v", t.Name, err))
			continue
		}
		spec := agent.ToolSpec{Name: name, Description: describe(t), Parameters: params}
		if err := spec.CheckSchema(); err != nil {
			skipped = append(skipped, fmt.Sprintf("%s: %v", t.Name, err))
			continue
		}
		seen[name] = t.Name
		ro := t.Annotations.ReadOnlyHint != nil && *t.Annotations.ReadOnlyHint
		out = append(out, Tool{Server: server, Name: t.Name, Spec: spec, Title: t.Title, ReadOnly: ro})
	}
	slices.SortFunc(out, func(a, b Tool) int { return strings.Compare(a.Spec.Name, b.Spec.Name) })
	return out, skipped
}

// maxDescription bounds a tool's description sent to the model.
const maxDescription = 4096

func describe(t mcp.Tool) string {
	d := strings.TrimSpace(t.Description)
	if d == "" {
		d = strings.TrimSpace(t.Title)
	}
	if len(d) > maxDescription {
		d = strings.ToValidUTF8(d[:maxDescription], "") + "…"
	}
	return d
}

// backoff is the wait before attempt n (n >= 1) after failures.
func backoff(o Options, n int) time.Duration {
	d := o.MinBackoff
	for i := 1; i < n && d < o.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, o.MaxBackoff)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Probe connects to a server once, lists its tools and disconnects: the
// settings page's "Test". The returned status has the tools (or the error)
// and, for stdio, what the server wrote on its standard error.
func Probe(ctx context.Context, spec Spec, opts Options) Status {
	opts = opts.withDefaults()
	ring := NewRing(opts.StderrBytes)
	st := Status{Name: spec.Name, Type: spec.Config.Type, State: StateConnected, Since: time.Now()}
	fail := func(err error) Status {
		st.State, st.Err = StateStopped, err.Error()
		if spec.Config.Type == agent.MCPStdio {
			st.Stderr = ring.String()
		}
		return st
	}
	life, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	c, err := dial(life, spec.Config, ring, opts.Logger)
	if err != nil {
		return fail(err)
	}
	defer c.close()
	hctx, hcancel := context.WithTimeout(ctx, opts.ConnectTimeout)
	defer hcancel()
	hctx, stop := withDeath(hctx, c)
	defer stop()
	info, tools, err := handshake(hctx, c)
	if err != nil {
		if derr := deathReason(c); derr != nil {
			err = fmt.Errorf("%v (%v)", err, derr)
		}
		return fail(err)
	}
	st.Tools, st.Skipped = convertTools(spec.Name, tools)
	st.Offered = true
	if info != nil {
		st.ServerInfo = strings.TrimSpace(info.ServerInfo.Name + " " + info.ServerInfo.Version)
	}
	if spec.Config.Type == agent.MCPStdio {
		st.Stderr = ring.String()
	}
	return st
}
