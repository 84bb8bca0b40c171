package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"pizzabot/agent"
	"pizzabot/tools"
)

// fence is a fenced code block of a Markdown file: its info string and
// text, without the indentation of a list item.
type fence struct {
	file, info, text string
	line             int
}

var fenceOpen = regexp.MustCompile("^(\\s*)```(.*)$")

func fences(t *testing.T, file string) []fence {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []fence
	lines := strings.Split(string(raw), "\n")
	for i := 0; i < len(lines); i++ {
		m := fenceOpen.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent, f := m[1], fence{file: file, info: strings.TrimSpace(m[2]), line: i + 1}
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, strings.TrimPrefix(lines[i], indent))
		}
		f.text = strings.Join(body, "\n") + "\n"
		out = append(out, f)
	}
	return out
}

// documented lists the Markdown files whose examples people copy: the
// README, docs/ and the built-in skills (the guide shows examples too).
func documented(t *testing.T) []string {
	t.Helper()
	files := []string{"../README.md"}
	for _, glob := range []string{"*.md", "../skills/*/SKILL.md"} {
		m, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	return files
}

// Every SKILL.md and .mcp.json example of the README and docs/ loads with
// the real loaders, and every tool a skill example names exists: a
// built-in or workspace tool, or a tool of an MCP server a documented
// .mcp.json example configures. A block meant to show a mistake says so in
// its info string ("```yaml invalid") and is skipped.
func TestDocumentedExamplesLoad(t *testing.T) {
	t.Parallel()
	toolbox, err := tools.NewToolbox(tools.WorkspaceTools(tools.Workspace{})...)
	if err != nil {
		t.Fatal(err)
	}
	servers := map[string]bool{}
	type skillEx struct {
		f     fence
		skill *agent.Skill
	}
	var skills []skillEx
	nSkills, nMCP := 0, 0
	for _, file := range documented(t) {
		for _, f := range fences(t, file) {
			if strings.Contains(f.info, "invalid") {
				continue
			}
			where := f.file + ":" + strconv.Itoa(f.line)
			switch {
			case strings.HasPrefix(f.text, "---\n") && strings.Contains(f.text, "\nname:"):
				nSkills++
				name := regexp.MustCompile(`(?m)^name:\s*(\S+)`).FindStringSubmatch(f.text)[1]
				text := f.text
				if strings.Count(text, "---\n") < 2 { // front matter shown alone
					text += "---\n"
				}
				s, err := agent.ParseSkill(name, []byte(text))
				if err != nil {
					t.Errorf("%s: skill example %s does not load: %v", where, name, err)
					continue
				}
				skills = append(skills, skillEx{f, s})
			case strings.HasPrefix(strings.TrimSpace(f.text), "{") && strings.Contains(f.text, `"mcpServers"`):
				nMCP++
				ss, err := agent.ParseMCPConfig([]byte(f.text), false)
				if err != nil {
					t.Errorf("%s: .mcp.json example does not load: %v", where, err)
					continue
				}
				for _, s := range ss {
					if s.Err != nil {
						t.Errorf("%s: .mcp.json example: server %s: %v", where, s.Name, s.Err)
					}
					servers[s.Name] = true
				}
			}
		}
	}
	for _, ex := range skills {
		for _, tool := range ex.skill.AllowedTools {
			server, ok := agent.MCPServerWildcard(tool)
			if !ok {
				server, ok = agent.MCPServerOfTool(tool)
			}
			if ok {
				if !servers[server] {
					t.Errorf("%s:%d: skill %s names %s, but no documented .mcp.json example configures %q", ex.f.file, ex.f.line, ex.skill.Name, tool, server)
				}
				continue
			}
			if _, ok := toolbox.Get(tool); !ok {
				t.Errorf("%s:%d: skill %s names %s, which is not a tool (toolbox: %s)", ex.f.file, ex.f.line, ex.skill.Name, tool, strings.Join(toolbox.Names(), " "))
			}
		}
		for tool := range ex.skill.InterruptOn {
			if _, ok := toolbox.Get(tool); !ok && !strings.HasPrefix(tool, "mcp__") {
				t.Errorf("%s:%d: skill %s gates %s, which is not a tool", ex.f.file, ex.f.line, ex.skill.Name, tool)
			}
		}
	}
	if nSkills < 2 || nMCP < 2 {
		t.Errorf("found %d skill and %d .mcp.json examples: the extraction is broken", nSkills, nMCP)
	}
}
