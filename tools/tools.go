package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/agent"
	"pizzabot/db"
)

// Run is the run a tool works for, and what the run service gives the
// tool for the call it executes. It is passed to every call explicitly.
type Run struct {
	ThreadID int64
	UserID   int64
	// Call is the tool call being executed; zero outside a step.
	Call db.ToolCallRow
	// Host is the run service executing the call; nil outside a step (a
	// tool called on its own), where tools that need it refuse or do less.
	Host Host
}

// Host is what the run service offers a tool while it executes one call.
type Host interface {
	// Pool serves reads outside any transaction. A Tx tool reads through
	// its transaction instead: see db.InTx.
	Pool() *pgxpool.Pool
	// Commit runs fn in a transaction under the step's lease.
	Commit(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error
	// RunSkill returns the skill named name as the run of thread threadID
	// sees it (the version it started with), through q.
	RunSkill(ctx context.Context, q db.Querier, threadID int64, name string) (*agent.Skill, bool, error)
	// Gate decides a call of tool name in thread threadID's run: the one
	// gate (jobs/gate.go), through q.
	Gate(ctx context.Context, q db.Querier, threadID int64, name string) (Gate, error)
	// Toolbox is the run service's tools (run_js offers them to scripts).
	Toolbox() *Toolbox
}

// host returns the run service executing the call, or an error for a tool
// called outside a run.
func (r Run) host() (Host, error) {
	if r.Host == nil {
		return nil, errors.New("this tool only runs inside a run")
	}
	return r.Host, nil
}

// Tool is a tool a run can call. Exactly one of Tx and Call is set, unless
// Ask is.
type Tool struct {
	Spec agent.ToolSpec
	// Tx runs the tool inside the transaction that records its result: its
	// effect and its result commit together, so a crash never leaves its
	// outcome unknown. Built-in tools that only touch the database use it.
	Tx func(ctx context.Context, tx pgx.Tx, run Run, args map[string]any) (string, error)
	// Call runs a tool whose effects live outside the database (an MCP
	// server, the network). If the process dies during Call, the outcome is
	// unknown: unless Idempotent, the run asks a human before calling again.
	Call func(ctx context.Context, run Run, args map[string]any) (string, error)
	// Idempotent says Call may be repeated safely (it only reads).
	Idempotent bool
	// Server is the MCP server a tool comes from ("" for the others): a
	// skill's mcp__<server> wildcard stands for its tools.
	Server string
	// Remote is the tool's name on its MCP server (with Server): its
	// full name (agent.MCPFullName) is what the tool policy matches
	// besides Spec.Name, which MCPToolName may have shortened.
	Remote string
	// Named tools are offered only to a skill that names them in
	// allowed-tools (by name or by their server's wildcard), never with
	// every tool to a run whose skill lists none: the built-in browser's
	// two dozen tools are its skill's, which other runs reach through task.
	Named bool
	// Ask marks ask_user: a call is a question that waits for the user's
	// answer, which becomes its result.
	Ask bool
}

// Toolbox holds the tools runs can be offered: fixed tools (the built-ins
// and those given to NewToolbox), and tools from sources that come and go
// while the server runs (MCP servers, see AddSource). It is safe for
// concurrent use.
type Toolbox struct {
	tools map[string]Tool

	mu      sync.RWMutex
	sources []func() []Tool
	explain func(server string) string
}

// NewToolbox returns a toolbox with the built-in tools and extra ones.
func NewToolbox(extra ...Tool) (*Toolbox, error) {
	tb := &Toolbox{tools: map[string]Tool{}}
	for _, t := range append(builtinTools(), extra...) {
		if err := t.Spec.CheckSchema(); err != nil {
			return nil, err
		}
		if _, dup := tb.tools[t.Spec.Name]; dup {
			return nil, fmt.Errorf("tool %q is defined twice", t.Spec.Name)
		}
		tb.tools[t.Spec.Name] = t
	}
	return tb, nil
}

// AddSource registers fn, which returns the tools a source offers now; it
// is called each time the toolbox is read, so its tools appear and vanish
// with it. fn must be fast and safe for concurrent use, and its tools'
// schemas already checked (agent.ToolSpec.CheckSchema). A name that a fixed
// tool or an earlier source has is ignored.
func (tb *Toolbox) AddSource(fn func() []Tool) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.sources = append(tb.sources, fn)
}

// ExplainServers registers fn, which says what an MCP server needs before
// it offers tools when its configuration tells (a built-in server's missing
// programs, a server turned off: extensions.Extensions.ServerNeeds), or ""
// when nothing is known. Needs uses its words instead of "connected".
func (tb *Toolbox) ExplainServers(fn func(server string) string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.explain = fn
}

// serverNeeds is what the registered explanation says of server.
func (tb *Toolbox) serverNeeds(server string) string {
	tb.mu.RLock()
	fn := tb.explain
	tb.mu.RUnlock()
	if fn == nil {
		return ""
	}
	return fn(server)
}

// snapshot returns every tool available now, fixed tools first.
func (tb *Toolbox) snapshot() map[string]Tool {
	tb.mu.RLock()
	sources := tb.sources
	tb.mu.RUnlock()
	if len(sources) == 0 {
		return tb.tools
	}
	all := make(map[string]Tool, len(tb.tools))
	for n, t := range tb.tools {
		all[n] = t
	}
	for _, src := range sources {
		for _, t := range src() {
			if _, taken := all[t.Spec.Name]; !taken {
				all[t.Spec.Name] = t
			}
		}
	}
	return all
}

// Get returns the tool of that name.
func (tb *Toolbox) Get(name string) (Tool, bool) {
	if t, ok := tb.tools[name]; ok {
		return t, true
	}
	t, ok := tb.snapshot()[name]
	return t, ok
}

// ServerOf returns a function that tells the MCP server of a tool by name,
// from one look at the toolbox: the server recorded for a tool it holds
// (Tool.Server, "" for a built-in), else the server part of an
// mcp__<server>__<tool> name (a tool of a server not listed yet). A name
// agent.MCPToolName shortened (a server name of more than 48 characters)
// has no server part: only the record tells.
func (tb *Toolbox) ServerOf() func(name string) (string, bool) {
	all := tb.snapshot()
	return func(name string) (string, bool) {
		if t, ok := all[name]; ok {
			return t.Server, t.Server != ""
		}
		return agent.MCPServerOfTool(name)
	}
}

// Names lists the tools available now, sorted.
func (tb *Toolbox) Names() []string {
	all := tb.snapshot()
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Offer returns the specs offered to a run: the tools a skill lists in
// allowed-tools (which must all exist: see Missing), or every tool when
// the run has no skill or its skill lists none (allowed-tools omitted, as
// public Agent Skills mostly do; an empty list offers nothing), except the
// Named ones. An entry
// "mcp__<server>" or "mcp__<server>__*" offers every tool that server
// offers now (agent.MCPServerWildcard). The caller then drops what the
// server policy denies (gateRules.offered), and every call still passes the
// gate: allowed-tools chooses what is offered, never what runs without
// asking.
func (tb *Toolbox) Offer(skill *agent.Skill) []agent.ToolSpec {
	all := tb.snapshot()
	var names []string
	if skill != nil && skill.DeclaresTools {
		names = expand(all, skill.AllowedTools)
	} else {
		names = make([]string, 0, len(all))
		for n, t := range all {
			if !t.Named {
				names = append(names, n)
			}
		}
		sort.Strings(names)
	}
	specs := make([]agent.ToolSpec, 0, len(names))
	for _, n := range names {
		if t, ok := all[n]; ok {
			specs = append(specs, t.Spec)
		}
	}
	return specs
}

// expand replaces the server wildcards of allowed-tools entries by the
// server's tools among all, sorted, and drops repeats: "mcp__crm
// mcp__crm__find" offers mcp__crm__find once.
func expand(all map[string]Tool, entries []string) []string {
	out := make([]string, 0, len(entries))
	seen := map[string]bool{}
	add := func(n string) {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	for _, e := range entries {
		server, ok := agent.MCPServerWildcard(e)
		if !ok {
			add(e)
			continue
		}
		for _, n := range serverTools(all, server) {
			add(n)
		}
	}
	return out
}

// serverTools lists the tools of MCP server server among all, sorted: those
// recorded as its (Tool.Server), not those whose name starts with
// mcp__<server>__, which a server name of more than 48 characters loses
// when agent.MCPToolName shortens its tools' names with a hash.
func serverTools(all map[string]Tool, server string) []string {
	var names []string
	for n, t := range all {
		if t.Server == server {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// Missing lists the tools a skill declares that the toolbox lacks now; a
// skill that declares none misses nothing. A server wildcard is missing
// while the server offers no tool.
func (tb *Toolbox) Missing(skill *agent.Skill) []string {
	return missingFrom(tb.snapshot(), skill)
}

func missingFrom(all map[string]Tool, skill *agent.Skill) []string {
	var missing []string
	for _, n := range skill.AllowedTools {
		if server, ok := agent.MCPServerWildcard(n); ok {
			if len(serverTools(all, server)) == 0 {
				missing = append(missing, n)
			}
			continue
		}
		if _, ok := all[n]; !ok {
			missing = append(missing, n)
		}
	}
	return missing
}

// Needs says, for people, what the server needs before the tools missing
// (Missing's answer) are there: one phrase each, for a list such as
// "needs a search provider (PIZZA_SEARCH_PROVIDER) and the MCP server
// calendar connected". publish_brief needs a publish destination, web_search
// a search provider, an MCP tool or server wildcard its server connected
// (all of a skill's servers in one phrase), or what the server itself
// needs when its configuration tells (ExplainServers: "Node.js (npx) on the
// server, for the built-in MCP server browser"); any other tool is named as
// is.
// It is the one place these reasons are written: the new-thread form and
// the settings page show them.
func (tb *Toolbox) Needs(missing []string) []string {
	var all map[string]Tool
	var out, servers []string
	serverAt := -1
	for _, n := range missing {
		switch n {
		case PublishTool:
			out = append(out, "a publish destination (PIZZA_PUBLISH_FOLDER or PIZZA_PUBLISH_WEBHOOK_URL)")
			continue
		case WebSearchTool:
			out = append(out, "a search provider (PIZZA_SEARCH_PROVIDER)")
			continue
		}
		server, ok := agent.MCPServerWildcard(n)
		if !ok {
			server, ok = agent.MCPServerOfTool(n)
			if ok {
				if all == nil {
					all = tb.snapshot()
				}
				if len(serverTools(all, server)) > 0 {
					// The server is there; this one tool is not.
					out = append(out, n+", which the MCP server "+server+" does not offer")
					continue
				}
			}
		}
		if !ok {
			out = append(out, n)
			continue
		}
		if why := tb.serverNeeds(server); why != "" {
			if !slices.Contains(out, why) {
				out = append(out, why)
			}
			continue
		}
		if serverAt < 0 {
			serverAt = len(out)
			out = append(out, "")
		}
		if !slices.Contains(servers, server) {
			servers = append(servers, server)
		}
	}
	if serverAt >= 0 {
		if len(servers) == 1 {
			out[serverAt] = "the MCP server " + servers[0] + " connected"
		} else {
			out[serverAt] = "the MCP servers " + strings.Join(servers[:len(servers)-1], ", ") + " and " + servers[len(servers)-1] + " connected"
		}
	}
	return out
}

// NeedsText is Needs as one phrase, for a sentence's "needs ...": "a
// search provider (PIZZA_SEARCH_PROVIDER) and the MCP server calendar
// connected".
func (tb *Toolbox) NeedsText(missing []string) string {
	needs := tb.Needs(missing)
	switch n := len(needs); n {
	case 0:
		return ""
	case 1:
		return needs[0]
	default:
		return strings.Join(needs[:n-1], ", ") + " and " + needs[n-1]
	}
}

// SkillStatus is a skill and whether it can be offered now.
type SkillStatus struct {
	Skill agent.Skill
	// Missing lists the tools the skill declares (allowed-tools) that are
	// not connected now; while any is, the skill is not offered.
	Missing []string
}

// Available reports whether the skill can be offered.
func (s SkillStatus) Available() bool { return len(s.Missing) == 0 }

// SkillAvailability says, for each skill of set, which declared tools are
// missing now, e.g. for the skills list ("needs mcp__github__create_issue,
// which is not connected"). Start refuses, and pickers should hide, the
// skills that are not Available.
func (tb *Toolbox) SkillAvailability(set agent.SkillSet) []SkillStatus {
	all := tb.snapshot()
	out := make([]SkillStatus, 0, len(set.Skills))
	for _, sk := range set.Skills {
		out = append(out, SkillStatus{Skill: sk, Missing: missingFrom(all, &sk)})
	}
	return out
}

// Scratch file limits.
const (
	maxScratchFile  = 1 << 20
	maxScratchFiles = 500
)

func schema(s string) json.RawMessage { return json.RawMessage(s) }

func builtinTools() []Tool {
	return []Tool{
		{
			Spec: agent.ToolSpec{
				Name:        "ls",
				Description: "List the files in this thread's scratch space, with their sizes. The scratch space is private to the thread and starts empty. A run of a skill also sees the skill's own folder, read-only, at /skills/<name>/: pass that path to list it.",
				Parameters: schema(`{"type":"object","properties":{
					"path":{"type":"string","description":"Optional: a folder under /skills/ to list instead of the scratch space"}},
					"additionalProperties":false}`),
			},
			Tx: func(ctx context.Context, tx pgx.Tx, run Run, args map[string]any) (string, error) {
				if p, _ := args["path"].(string); strings.Trim(p, "/ ") != "" {
					clean, err := scratchPath(p)
					if err != nil {
						return "", err
					}
					name, rel, ok := inSkillView(clean)
					if !ok {
						return "", fmt.Errorf("ls lists the scratch space (no path) or a skill's folder under /skills/; %q is neither", p)
					}
					skills, err := runSkills(ctx, tx, run)
					if err != nil {
						return "", err
					}
					return skillLs(skills, name, rel) // skills.go
				}
				files, err := db.ListScratch(ctx, tx, run.ThreadID)
				if err != nil {
					return "", err
				}
				skills, err := runSkills(ctx, tx, run)
				if err != nil {
					return "", err
				}
				var b strings.Builder
				if len(files) == 0 {
					b.WriteString("The scratch space is empty.\n")
				}
				for _, f := range files {
					fmt.Fprintf(&b, "%s\t%d bytes\n", f.Path, f.Size)
				}
				for _, s := range skills {
					fmt.Fprintf(&b, "%s/%s/\t(the skill's folder, read-only: ls it with its path)\n", agent.SkillMount, s.Name)
				}
				return strings.TrimRight(b.String(), "\n"), nil
			},
		},
		{
			Spec: agent.ToolSpec{
				Name:        "read_file",
				Description: "Read a file from this thread's scratch space. A file of up to 64 KiB is returned whole; a larger one in parts (in run_js scripts, whole): give offset and length (bytes) to read the part you want, the answer says which bytes it holds and what follows. Paths under /skills/<name>/ read the run's skill's own files (read-only).",
				Parameters: schema(`{"type":"object","properties":{
					"path":{"type":"string","description":"File path, e.g. notes/plan.md"},
					"offset":{"type":"integer","minimum":0,"description":"Optional: the first byte to read (default 0)"},
					"length":{"type":"integer","minimum":1,"description":"Optional: how many bytes to read (default: the rest, at most 64 KiB)"}},
					"required":["path"],"additionalProperties":false}`),
			},
			Tx: func(ctx context.Context, tx pgx.Tx, run Run, args map[string]any) (string, error) {
				p, err := scratchPath(args["path"])
				if err != nil {
					return "", err
				}
				if name, rel, ok := inSkillView(p); ok {
					skills, err := runSkills(ctx, tx, run)
					if err != nil {
						return "", err
					}
					return skillRead(skills, name, rel) // skills.go
				}
				content, err := db.ReadScratch(ctx, tx, run.ThreadID, p)
				if errors.Is(err, db.ErrNotFound) {
					// SKILL.md's relative references ("examples/a.md")
					// resolve in the skill's folder when the scratch
					// space has no such file.
					skills, serr := runSkills(ctx, tx, run)
					if serr != nil {
						return "", serr
					}
					for _, s := range skills {
						if text, rerr := agent.ReadSkillFile(s, p); rerr == nil {
							return text, nil
						}
					}
					return "", fmt.Errorf("no file %q in the scratch space (use ls to list files)", p)
				}
				if err != nil {
					return "", err
				}
				if run.Call.Name == RunJSTool {
					// A script's read: its result does not go to
					// the model, so a file comes whole unless it
					// asks for a part.
					return filePart(p, content, args, maxScratchFile)
				}
				return filePart(p, content, args, maxReadPart)
			},
		},
		{
			Spec: agent.ToolSpec{
				Name:        "write_file",
				Description: "Create or overwrite a file in this thread's scratch space (at most 1 MiB). Use it for notes, drafts and results you want to keep during the run.",
				Parameters: schema(`{"type":"object","properties":{
					"path":{"type":"string","description":"File path, e.g. notes/plan.md"},
					"content":{"type":"string","description":"The whole new content of the file"}},
					"required":["path","content"],"additionalProperties":false}`),
			},
			Tx: func(ctx context.Context, tx pgx.Tx, run Run, args map[string]any) (string, error) {
				p, err := scratchPath(args["path"])
				if err != nil {
					return "", err
				}
				content, _ := args["content"].(string)
				if err := writeScratch(ctx, tx, run.ThreadID, p, content); err != nil {
					return "", err
				}
				return fmt.Sprintf("Wrote %d bytes to %s.", len(content), p), nil
			},
		},
		{
			Spec: agent.ToolSpec{
				Name:        "edit_file",
				Description: "Replace text in a scratch file: old_string must occur exactly once unless replace_all is true. Read the file first to copy old_string exactly.",
				Parameters: schema(`{"type":"object","properties":{
					"path":{"type":"string"},
					"old_string":{"type":"string","minLength":1,"description":"Exact text to replace"},
					"new_string":{"type":"string","description":"Replacement text"},
					"replace_all":{"type":"boolean","description":"Replace every occurrence (default false)"}},
					"required":["path","old_string","new_string"],"additionalProperties":false}`),
			},
			Tx: func(ctx context.Context, tx pgx.Tx, run Run, args map[string]any) (string, error) {
				p, err := scratchPath(args["path"])
				if err != nil {
					return "", err
				}
				if _, _, ok := inSkillView(p); ok {
					return "", errSkillReadOnly(p)
				}
				content, err := db.ReadScratch(ctx, tx, run.ThreadID, p)
				if errors.Is(err, db.ErrNotFound) {
					return "", fmt.Errorf("no file %q in the scratch space", p)
				}
				if err != nil {
					return "", err
				}
				oldS, _ := args["old_string"].(string)
				newS, _ := args["new_string"].(string)
				all, _ := args["replace_all"].(bool)
				n := strings.Count(content, oldS)
				switch {
				case n == 0:
					return "", fmt.Errorf("old_string does not occur in %s", p)
				case n > 1 && !all:
					return "", fmt.Errorf("old_string occurs %d times in %s: give more context to make it unique, or set replace_all", n, p)
				}
				if all {
					content = strings.ReplaceAll(content, oldS, newS)
				} else {
					content = strings.Replace(content, oldS, newS, 1)
				}
				if err := writeScratch(ctx, tx, run.ThreadID, p, content); err != nil {
					return "", err
				}
				return fmt.Sprintf("Replaced %d occurrence(s) in %s.", max(1, n*boolInt(all)), p), nil
			},
		},
		{
			Spec: agent.ToolSpec{
				Name:        "ask_user",
				Description: "Ask the user a question and wait for their answer. The run pauses until they reply, possibly for days: ask only when you cannot proceed well without it, and ask everything you need at once.",
				Parameters: schema(`{"type":"object","properties":{
					"question":{"type":"string","minLength":1,"description":"The question, self-contained"}},
					"required":["question"],"additionalProperties":false}`),
			},
			Ask: true,
		},
		Task(), // the run service starts a sub-agent for it (jobs/task.go)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func writeScratch(ctx context.Context, tx pgx.Tx, threadID int64, p, content string) error {
	if _, _, ok := inSkillView(p); ok {
		return errSkillReadOnly(p) // skills.go
	}
	if len(content) > maxScratchFile {
		return fmt.Errorf("content is %d bytes; a scratch file holds at most %d", len(content), maxScratchFile)
	}
	if !utf8.ValidString(content) {
		return errors.New("content is not valid UTF-8 text")
	}
	return db.WriteScratch(ctx, tx, threadID, p, content, maxScratchFiles)
}

// maxReadPart is the most read_file returns at once: a part of a large
// file, so that reading it whole does not fill the model's context.
const maxReadPart = 64 << 10

// filePart is the part of a file's content that read_file's offset and
// length ask for (args; both optional, length def by default), moved to
// whole UTF-8 characters. A part that is not the whole file says which
// bytes it holds, and how to read on.
func filePart(p, content string, args map[string]any, def int) (string, error) {
	offset := int(intArg(args, "offset", 0, 0, 1<<31))
	length := int(intArg(args, "length", int64(def), 1, 1<<31))
	size := len(content)
	if offset == 0 && length >= size {
		return content, nil
	}
	if offset >= size && size > 0 {
		return "", fmt.Errorf("offset %d is past the end of %s, which is %d bytes", offset, p, size)
	}
	start := offset
	for start > 0 && start < size && !utf8.RuneStart(content[start]) {
		start-- // the character that byte belongs to
	}
	end := min(start+length, size)
	for end < size && !utf8.RuneStart(content[end]) {
		end-- // stop before a cut character
	}
	if end <= start {
		end = min(start+utf8.UTFMax, size)
	}
	part := content[start:end]
	note := fmt.Sprintf("[%s: bytes %d to %d of %d", p, start, end, size)
	if end < size {
		note += fmt.Sprintf("; %d more: read_file with offset %d]", size-end, end)
	} else {
		note += ", the end]"
	}
	return note + "\n" + part, nil
}

// scratchPath cleans a scratch file path: relative, no "..", no empty parts.
func scratchPath(v any) (string, error) {
	s, _ := v.(string)
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "/")
	if s == "" {
		return "", errors.New("path is empty")
	}
	if len(s) > 512 {
		return "", errors.New("path is longer than 512 bytes")
	}
	clean := path.Clean(s)
	if clean == "." || clean == ".." || strings.HasPrefix(clean, "../") || strings.ContainsRune(clean, 0) {
		return "", fmt.Errorf("path %q is not a file path inside the scratch space", s)
	}
	return clean, nil
}
