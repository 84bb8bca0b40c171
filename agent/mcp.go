package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// MCP transports, as written in a .mcp.json "type".
const (
	// MCPStdio is a server the Pizza Bot process starts as a command and
	// talks to over its standard input and output.
	MCPStdio = "stdio"
	// MCPHTTP is a server reached over the streamable HTTP transport.
	MCPHTTP = "http"
	// MCPSSE is a server reached over the legacy HTTP+SSE transport.
	MCPSSE = "sse"
)

// Where an MCP server is configured.
const (
	// MCPSourceFile is <PIZZA_DATA_ROOT>/.mcp.json.
	MCPSourceFile = "file"
	// MCPSourceSettings is the settings page (stored in the database).
	MCPSourceSettings = "settings"
	// MCPSourcePlugin is a plugin's .mcp.json.
	MCPSourcePlugin = "plugin"
	// MCPSourceBuiltin is a server Pizza Bot ships (the browser): the
	// lowest layer, replaced by any other server of the same name.
	MCPSourceBuiltin = "builtin"
)

// MCPConfigFile is the name of the file that configures MCP servers, at the
// data root and at the root of a plugin.
const MCPConfigFile = ".mcp.json"

// MaxMCPConfigSize bounds a .mcp.json.
const MaxMCPConfigSize = 1 << 20

// MCPServerConfig is one server entry of a .mcp.json, in Claude Code's
// format, as written: ${VAR} references are not expanded yet.
//
//	{"command": "npx", "args": ["-y", "@scope/server"], "env": {"TOKEN": "${TOKEN}"}, "cwd": "/srv"}
//	{"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}}
type MCPServerConfig struct {
	// Type is MCPStdio, MCPHTTP or MCPSSE once normalized; as written it may
	// be empty (stdio with a command, http with a url) or an alias
	// (streamable-http, streamable_http, streamableHttp).
	Type    string            `json:"type,omitempty"`
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// OAuth marks an HTTP server each user signs in to themselves
	// (docs/mcp.md), with the client an admin registered there, if any.
	// A server that answers 401 with WWW-Authenticate needs no mark.
	OAuth *MCPOAuth `json:"oauth,omitempty"`
	// PerUser marks a server whose state must never be shared between
	// users (the built-in browser: its cookies, sign-ins and tabs): each
	// user gets a connection of their own (a process of their own, for
	// stdio, run in a folder of their own under cwd), never another's
	// (docs/mcp.md). ${user:NAME} in a stdio server's env, or in an http
	// or sse server's headers, implies it.
	PerUser bool `json:"perUser,omitempty"`
}

// MCPOAuth is a server's per-user sign-in: client_secret may be ${VAR}.
type MCPOAuth struct {
	ClientID     string   `json:"client_id,omitempty"`
	ClientSecret string   `json:"client_secret,omitempty"`
	Scopes       []string `json:"scopes,omitempty"`
}

// MCPServer is a configured MCP server: its name, where it is configured and
// its configuration, or the reason it cannot be used.
type MCPServer struct {
	// Name is the key in "mcpServers"; its tools are offered as
	// mcp__<Name>__<tool>. A plugin's server is named
	// plugin_<plugin>_<server>.
	Name string `json:"name"`
	// Source is MCPSourceFile, MCPSourceSettings, MCPSourcePlugin or
	// MCPSourceBuiltin.
	Source string `json:"source"`
	// Plugin names the plugin of a MCPSourcePlugin server.
	Plugin string `json:"plugin,omitempty"`
	// Path is the file the server is configured in (file and plugin
	// sources).
	Path string `json:"path,omitempty"`
	// Config is the configuration as written (normalized Type, ${VAR}
	// references kept).
	Config MCPServerConfig `json:"config"`
	// Err is why the entry cannot be used: malformed, or (after Expand) an
	// unset variable. Such a server is listed with its error, never
	// silently dropped.
	Err error `json:"-"`
}

// mcpNamePattern is what a server name may be: it becomes part of tool
// names, which model providers restrict to [A-Za-z0-9_-].
var mcpNamePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidMCPServerName reports whether name can name an MCP server.
func ValidMCPServerName(name string) error {
	if !mcpNamePattern.MatchString(name) {
		return fmt.Errorf("server name %q must be 1 to 64 letters, digits, hyphens or underscores", name)
	}
	if strings.Contains(name, "__") {
		return fmt.Errorf("server name %q must not contain a double underscore: it separates the server from the tool in mcp__<server>__<tool>", name)
	}
	if strings.HasSuffix(name, "_") {
		// mcp__a___x would be both a's tool _x and a_'s tool x.
		return fmt.Errorf("server name %q must not end with an underscore: its tool names could be another server's (mcp__a___x is both a's _x and a_'s x)", name)
	}
	return nil
}

// ParseMCPConfig reads a .mcp.json: {"mcpServers": {name: entry, ...}}.
// With bare set, an object of entries without the "mcpServers" wrapper is
// accepted too (the other form of a plugin's .mcp.json). A file that is not
// valid JSON is an error (with its line and column); an entry that is
// malformed is returned with its Err set and does not affect the others.
// Servers are sorted by name; Source and Path are left for the caller.
func ParseMCPConfig(data []byte, bare bool) ([]MCPServer, error) {
	if len(data) > MaxMCPConfigSize {
		return nil, fmt.Errorf("larger than the %d KiB limit", MaxMCPConfigSize>>10)
	}
	data = bytes.TrimPrefix(data, []byte("\uFEFF"))
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	var top map[string]json.RawMessage
	if err := strictUnmarshal(data, &top); err != nil {
		return nil, jsonPositionError(data, err)
	}
	if top == nil {
		return nil, errors.New(`want a JSON object {"mcpServers": {...}}`)
	}
	raw, ok := top["mcpServers"]
	if !ok {
		if !bare {
			if len(top) == 0 {
				return nil, nil
			}
			return nil, errors.New(`no "mcpServers" object: write {"mcpServers": {"name": {"command": ...}}}`)
		}
		raw = data
	}
	var entries map[string]json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil || entries == nil && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, errors.New(`"mcpServers" must be an object mapping server names to their configuration`)
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	servers := make([]MCPServer, 0, len(names))
	for _, name := range names {
		s := MCPServer{Name: name}
		if err := ValidMCPServerName(name); err != nil {
			s.Err = err
		} else if cfg, err := parseMCPEntry(entries[name]); err != nil {
			s.Err = err
		} else {
			s.Config = cfg
		}
		servers = append(servers, s)
	}
	return servers, nil
}

// strictUnmarshal decodes one JSON value and refuses trailing text.
func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &json.SyntaxError{Offset: dec.InputOffset()}
	}
	return nil
}

// jsonPositionError says where in data a decoding error is.
func jsonPositionError(data []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var off int64 = -1
	msg := err.Error()
	switch {
	case errors.As(err, &syn):
		off = syn.Offset
		if msg == "" {
			msg = "unexpected text after the JSON object"
		}
	case errors.As(err, &typ):
		off = typ.Offset
		msg = `want a JSON object {"mcpServers": {...}}`
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		off = int64(len(data))
		msg = "unexpected end of the file (an object or string is not closed)"
	}
	if off < 0 {
		return fmt.Errorf("not valid JSON: %s", msg)
	}
	line, col := 1, 1
	for _, b := range data[:min(int(off), len(data))] {
		if b == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return fmt.Errorf("not valid JSON at line %d, column %d: %s", line, col, msg)
}

// ParseMCPEntry reads one server entry (the object under its name in
// "mcpServers"), as the settings page stores it, and normalizes it.
func ParseMCPEntry(raw []byte) (MCPServerConfig, error) { return parseMCPEntry(raw) }

// parseMCPEntry decodes and normalizes one server entry, reporting every
// problem at once.
func parseMCPEntry(raw json.RawMessage) (MCPServerConfig, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return MCPServerConfig{}, errors.New(`must be an object such as {"command": "...", "args": [...]} or {"type": "http", "url": "..."}`)
	}
	var cfg MCPServerConfig
	var errs []string
	str := func(key string, dst *string) {
		if v, ok := fields[key]; ok {
			if err := json.Unmarshal(v, dst); err != nil {
				errs = append(errs, fmt.Sprintf("%s must be a string", key))
			}
		}
	}
	strMap := func(key string, dst *map[string]string) {
		if v, ok := fields[key]; ok {
			if err := json.Unmarshal(v, dst); err != nil {
				errs = append(errs, fmt.Sprintf("%s must be an object of string values", key))
			}
		}
	}
	str("type", &cfg.Type)
	str("command", &cfg.Command)
	str("cwd", &cfg.Cwd)
	str("url", &cfg.URL)
	strMap("env", &cfg.Env)
	strMap("headers", &cfg.Headers)
	if v, ok := fields["args"]; ok {
		if err := json.Unmarshal(v, &cfg.Args); err != nil {
			errs = append(errs, "args must be an array of strings")
		}
	}
	if v, ok := fields["perUser"]; ok {
		if err := json.Unmarshal(v, &cfg.PerUser); err != nil {
			errs = append(errs, "perUser must be true or false")
		}
	}
	if v, ok := fields["oauth"]; ok {
		if err := strictUnmarshal(v, &cfg.OAuth); err != nil {
			errs = append(errs, `oauth must be an object such as {"client_id": "...", "client_secret": "${SECRET}", "scopes": ["..."]}`)
		}
	}
	if len(errs) > 0 {
		return MCPServerConfig{}, errors.New(strings.Join(errs, "; "))
	}
	return cfg.Normalize()
}

// Normalize resolves the type (its default and aliases) and checks that the
// fields fit it. Every problem is reported at once.
func (c MCPServerConfig) Normalize() (MCPServerConfig, error) {
	c.Command = strings.TrimSpace(c.Command)
	c.URL = strings.TrimSpace(c.URL)
	c.Cwd = strings.TrimSpace(c.Cwd)
	switch t := strings.ToLower(strings.TrimSpace(c.Type)); t {
	case "":
		switch {
		case c.Command != "":
			c.Type = MCPStdio
		case c.URL != "":
			c.Type = MCPHTTP
		default:
			return c, errors.New(`give a "command" (a stdio server) or a "url" (an http or sse server)`)
		}
	case "stdio", "http", "sse":
		c.Type = t
	case "streamable-http", "streamable_http", "streamablehttp":
		c.Type = MCPHTTP
	default:
		return c, fmt.Errorf(`type %q: want "stdio", "http" (or "streamable-http") or "sse"`, c.Type)
	}
	var errs []string
	switch c.Type {
	case MCPStdio:
		if c.Command == "" {
			errs = append(errs, `a stdio server needs a "command"`)
		}
		if c.URL != "" {
			errs = append(errs, `a stdio server has no "url" (set "type": "http" for a remote server)`)
		}
		if len(c.Headers) > 0 {
			errs = append(errs, `a stdio server has no "headers" (pass secrets in "env")`)
		}
	default:
		if c.URL == "" {
			errs = append(errs, fmt.Sprintf(`an %s server needs a "url"`, c.Type))
		}
		if c.Command != "" || len(c.Args) > 0 || c.Cwd != "" {
			errs = append(errs, fmt.Sprintf(`an %s server has no "command", "args" or "cwd"`, c.Type))
		}
		if len(c.Env) > 0 {
			errs = append(errs, fmt.Sprintf(`an %s server has no "env" (use "headers")`, c.Type))
		}
	}
	for k := range c.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			errs = append(errs, fmt.Sprintf("env name %q is not a valid variable name", k))
		}
	}
	for k := range c.Headers {
		if !validHeaderName(k) {
			errs = append(errs, fmt.Sprintf("header name %q is not valid", k))
		}
	}
	if len(errs) > 0 {
		slices.Sort(errs)
		return c, errors.New(strings.Join(errs, "; "))
	}
	return c, nil
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r > 126 || r <= 32 || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return false
		}
	}
	return true
}

// Expand replaces ${VAR} and ${VAR:-default} in the command, args, env
// values, cwd, url and header values with lookup's values. A variable that
// is unset (or empty) takes its default; one with no default is an error
// naming every such variable. The URL must then be http or https.
func (c MCPServerConfig) Expand(lookup func(string) (string, bool)) (MCPServerConfig, error) {
	ex := expander{lookup: lookup}
	out := c
	out.Command = ex.expand(c.Command)
	out.Cwd = ex.expand(c.Cwd)
	out.URL = ex.expand(c.URL)
	if c.Args != nil {
		out.Args = make([]string, len(c.Args))
		for i, a := range c.Args {
			out.Args[i] = ex.expand(a)
		}
	}
	out.Env = ex.expandEnv(c)
	out.Headers = ex.expandHeaders(c)
	if c.OAuth != nil {
		o := *c.OAuth
		o.ClientSecret = ex.expand(o.ClientSecret)
		out.OAuth = &o
	}
	var errs []string
	if len(ex.missing) > 0 {
		slices.Sort(ex.missing)
		errs = append(errs, fmt.Sprintf("environment variable %s is not set (set it in the server's environment, or write ${NAME:-default})",
			strings.Join(slices.Compact(ex.missing), ", ")))
	}
	errs = append(errs, ex.errs...)
	if len(errs) == 0 && out.Type != MCPStdio && out.URL != "" {
		u, err := url.Parse(out.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Sprintf("url %q is not an http:// or https:// URL", redactURL(out.URL)))
		}
	}
	if len(errs) > 0 {
		return c, errors.New(strings.Join(errs, "; "))
	}
	return out, nil
}

// redactURL drops the user info and query of a URL for error messages, in
// case they hold a secret.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable)"
	}
	u.User = nil
	u.RawQuery = ""
	return u.String()
}

// CheckSyntax reports malformed ${...} references, whatever the
// environment holds.
func (c MCPServerConfig) CheckSyntax() error {
	ex := expander{lookup: func(string) (string, bool) { return "", true }}
	ex.expand(c.Command)
	ex.expand(c.Cwd)
	ex.expand(c.URL)
	for _, a := range c.Args {
		ex.expand(a)
	}
	ex.expandEnv(c)
	ex.expandHeaders(c)
	if c.OAuth != nil {
		ex.expand(c.OAuth.ClientSecret)
	}
	if len(ex.errs) > 0 {
		return errors.New(strings.Join(ex.errs, "; "))
	}
	return nil
}

// References lists the variables the configuration refers to, sorted.
func (c MCPServerConfig) References() []string {
	ex := expander{lookup: func(string) (string, bool) { return "", true }, collect: true}
	ex.expand(c.Command)
	ex.expand(c.Cwd)
	ex.expand(c.URL)
	for _, a := range c.Args {
		ex.expand(a)
	}
	ex.expandEnv(c)
	ex.expandHeaders(c)
	if c.OAuth != nil {
		ex.expand(c.OAuth.ClientSecret)
	}
	slices.Sort(ex.refs)
	return slices.Compact(ex.refs)
}

// UserSecrets lists the NAMEs of the ${user:NAME} references in the
// headers of an HTTP or SSE server, or in the env of a stdio server,
// sorted: each user's own values (docs/mcp.md), filled per user session
// (for stdio, a process of that user's), which makes the server one used
// with each user's own credentials. Elsewhere (command, args, cwd, url,
// oauth) such a reference is an error of Expand and CheckSyntax: args are
// visible to every local user of the machine, and the others name what
// runs.
func (c MCPServerConfig) UserSecrets() []string {
	ex := expander{lookup: func(string) (string, bool) { return "", true }}
	ex.expandHeaders(c)
	ex.expandEnv(c)
	slices.Sort(ex.userRefs)
	return slices.Compact(ex.userRefs)
}

// EachUser reports whether the server is used with a connection of each
// user's own: marked PerUser, signed in to with OAuth, or taking
// ${user:NAME} values.
func (c MCPServerConfig) EachUser() bool {
	return c.PerUser || c.OAuth != nil || len(c.UserSecrets()) > 0
}

// UserSecretRef is how a header or env value refers to each user's own
// value name.
func UserSecretRef(name string) string { return "${user:" + name + "}" }

type expander struct {
	lookup  func(string) (string, bool)
	missing []string
	errs    []string
	collect bool
	refs    []string
	// userPlace: ${user:NAME} is kept for each user's session (the
	// headers of an HTTP or SSE server, the env of a stdio server);
	// userRefs collects the NAMEs.
	userPlace bool
	userRefs  []string
}

// expandHeaders expands c's header values, keeping ${user:NAME} when c
// is an HTTP or SSE server.
func (ex *expander) expandHeaders(c MCPServerConfig) map[string]string {
	ex.userPlace = c.Type != MCPStdio && c.Command == ""
	defer func() { ex.userPlace = false }()
	return ex.expandMap(c.Headers)
}

// expandEnv expands c's env values, keeping ${user:NAME} when c is a
// stdio server.
func (ex *expander) expandEnv(c MCPServerConfig) map[string]string {
	ex.userPlace = c.Type == MCPStdio || c.Type == "" && c.Command != ""
	defer func() { ex.userPlace = false }()
	return ex.expandMap(c.Env)
}

func (ex *expander) expandMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out[k] = ex.expand(m[k])
	}
	return out
}

// expand rewrites one string. "$" not followed by "{" is kept as is, like
// Claude Code does, so "$HOME" stays literal.
func (ex *expander) expand(s string) string {
	if !strings.Contains(s, "${") {
		return s
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		rest := s[i+2:]
		j := strings.IndexByte(rest, '}')
		if j < 0 {
			ex.errs = append(ex.errs, fmt.Sprintf("%q has a ${ without its closing }", s))
			b.WriteString(s[i:])
			return b.String()
		}
		expr := rest[:j]
		name, def, hasDef := strings.Cut(expr, ":-")
		if user, ok := strings.CutPrefix(expr, "user:"); ok {
			switch {
			case !validVarName(user):
				ex.errs = append(ex.errs, fmt.Sprintf("${%s}: %q is not a name (${user:NAME}, letters, digits and _)", expr, user))
			case !ex.userPlace:
				ex.errs = append(ex.errs, fmt.Sprintf("${%s} is filled with each user's own value only in the headers of an http or sse server or the env of a stdio server, not in a command, args, cwd, url or oauth", expr))
			default:
				ex.userRefs = append(ex.userRefs, user)
				b.WriteString(UserSecretRef(user)) // filled per user session
			}
		} else if !validVarName(name) {
			ex.errs = append(ex.errs, fmt.Sprintf("${%s}: %q is not a variable name", expr, name))
		} else {
			ex.refs = append(ex.refs, name)
			v, ok := ex.lookup(name)
			switch {
			case ok && (v != "" || !hasDef):
				b.WriteString(v)
			case hasDef:
				b.WriteString(def)
			default:
				ex.missing = append(ex.missing, name)
			}
		}
		s = rest[j+1:]
	}
}

func validVarName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z':
		case i > 0 && r >= '0' && r <= '9':
		default:
			return false
		}
	}
	return true
}

// MaxToolNameLen is the longest tool name model providers accept.
const MaxToolNameLen = 64

// MCPToolName is the name a tool of an MCP server is offered under:
// mcp__<server>__<tool>. Characters providers refuse in tool names become
// "_"; a name longer than MaxToolNameLen is shortened and given a hash
// suffix so it stays unique.
func MCPToolName(server, tool string) string {
	name := MCPFullName(server, tool)
	if len(name) <= MaxToolNameLen {
		return name
	}
	sum := sha256.Sum256([]byte(server + "\x00" + tool))
	return name[:MaxToolNameLen-9] + "_" + hex.EncodeToString(sum[:4])
}

// MCPFullName is a server's tool's name as MCPToolName writes it before
// it shortens a name over MaxToolNameLen: mcp__<server>__<tool>, whatever
// its length. A tool policy entry is matched against it too (Verdict), so
// that the entries an admin writes by the server's name hold for its
// tools when their offered names lost the prefix.
func MCPFullName(server, tool string) string {
	return "mcp__" + sanitizeToolName(server) + "__" + sanitizeToolName(tool)
}

// MCPServerOfTool returns the server part of an mcp__<server>__<tool> name.
func MCPServerOfTool(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "mcp__")
	if !ok {
		return "", false
	}
	server, _, ok := strings.Cut(rest, "__")
	return server, ok && server != ""
}

// MCPToolOf reports whether name can be the name of a tool of server
// (MCPToolName(server, t) for some t), for a process that has not listed
// the server's tools: it starts with mcp__<server>__, or it was shortened
// with a hash from a name that did (a server name of more than 48
// characters loses the prefix). Where the tools are listed, their record
// (tools.Tool.Server) tells, not this.
func MCPToolOf(name, server string) bool {
	prefix := MCPFullName(server, "")
	if len(name) > len(prefix) && len(name) <= MaxToolNameLen && strings.HasPrefix(name, prefix) {
		return true
	}
	cut := MaxToolNameLen - 9
	if len(name) != MaxToolNameLen || name[cut] != '_' || !isLowerHex(name[cut+1:]) {
		return false
	}
	kept := name[:cut]
	return strings.HasPrefix(kept, prefix) || strings.HasPrefix(prefix, kept)
}

func isLowerHex(s string) bool {
	for _, c := range []byte(s) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return s != ""
}

// MCPServerWildcard reports whether an allowed-tools entry stands for
// every tool of one MCP server, "mcp__<server>" or "mcp__<server>__*", and
// returns the server. Its tools are those the toolbox records as the
// server's (tools.Tool.Server), whatever their names: MCPToolName shortens
// the names of a server whose name is longer than 48 characters with a
// hash, and they lose the "mcp__<server>__" prefix.
func MCPServerWildcard(entry string) (string, bool) {
	rest, ok := strings.CutPrefix(entry, "mcp__")
	if !ok {
		return "", false
	}
	server, tool, cut := strings.Cut(rest, "__")
	if cut && tool != "*" {
		return "", false
	}
	if ValidMCPServerName(server) != nil {
		return "", false
	}
	return server, true
}

func sanitizeToolName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

// PluginServerName is the name a plugin's server runs under, so that two
// plugins (or a plugin and the settings) never clash: plugin_<plugin>_<server>.
func PluginServerName(plugin, server string) string {
	return "plugin_" + plugin + "_" + server
}

// MCPInheritedEnv lists the variables a stdio server inherits from the Pizza
// Bot process; anything else (provider keys, DATABASE_URL) it gets only
// through its "env". The list is the MCP SDKs' default.
var MCPInheritedEnv = []string{"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TMPDIR", "TZ"}
