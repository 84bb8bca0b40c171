package agent_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"pizzabot/agent"
	"pizzabot/cron"
)

func TestParseSkill(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		folder  string
		data    string
		want    *agent.Skill
		wantErr string
		// wantWarn is a warning the skill loads with (want unchecked).
		wantWarn string
	}{
		{
			name:   "full",
			folder: "research-brief",
			data: `---
name: research-brief
description: >
  Researches a topic and publishes a brief.
license: Apache-2.0
compatibility: Needs network access
metadata:
  author: team
  version: "1.0"
allowed-tools: web_search publish_brief, Bash(git status:*)
interruptOn:
  write_file: true
  delete_file: false
  publish_brief:
    allowedDecisions: [approve, reject]
    description: Publishing is visible to the whole company
schedule:
  cron: "0 9 * * 1-5"
  prompt: Write today's brief
user-invocable: true
---

# Research

Do the research.
`,
			want: &agent.Skill{
				Name:          "research-brief",
				Description:   "Researches a topic and publishes a brief.",
				License:       "Apache-2.0",
				Compatibility: "Needs network access",
				Metadata:      map[string]any{"author": "team", "version": "1.0"},
				AllowedTools:  []string{"web_search", "publish_brief", "Bash(git status:*)"},
				DeclaresTools: true,
				InterruptOn: map[string]agent.Interrupt{
					"write_file":    {AllowedDecisions: []string{"approve", "edit", "reject"}},
					"publish_brief": {AllowedDecisions: []string{"approve", "reject"}, Description: "Publishing is visible to the whole company"},
				},
				Schedule: &agent.Schedule{Cron: "0 9 * * 1-5", Prompt: "Write today's brief"},
				Body:     "# Research\n\nDo the research.",
				Warnings: []string{`unknown field "user-invocable", ignored (not part of the Agent Skills format; put tool-specific keys under metadata) (line 20)`},
			},
		},
		{
			name:   "allowed-tools as a list, CRLF, schedule string",
			folder: "a1",
			data:   "---\r\nname: a1\r\ndescription: Does a thing.\r\nallowed-tools:\r\n  - read_file\r\n  - mcp__github__create_issue\r\n  - read_file\r\nschedule: '@daily'\r\n---\r\nBody\r\n",
			want: &agent.Skill{
				Name: "a1", Description: "Does a thing.",
				AllowedTools: []string{"read_file", "mcp__github__create_issue"}, DeclaresTools: true,
				Schedule: &agent.Schedule{Cron: "@daily"},
				Body:     "Body",
			},
		},
		{
			name:   "allowed-tools naming every tool of MCP servers",
			folder: "prep",
			data:   "---\nname: prep\ndescription: Prepares meetings.\nallowed-tools: read_file mcp__calendar, mcp__crm__*\n---\nBody\n",
			want: &agent.Skill{
				Name: "prep", Description: "Prepares meetings.",
				AllowedTools: []string{"read_file", "mcp__calendar", "mcp__crm__*"}, DeclaresTools: true,
				Body: "Body",
			},
		},
		{
			name:   "minimal, empty body",
			folder: "x",
			data:   "---\nname: x\ndescription: d\n---\n",
			want:   &agent.Skill{Name: "x", Description: "d"},
		},
		{
			name:   "empty allowed-tools declares no tools; model pinned",
			folder: "x",
			data:   "---\nname: x\ndescription: d\nallowed-tools: []\nmodel: Anthropic:claude-sonnet-4-5\n---\n",
			want:   &agent.Skill{Name: "x", Description: "d", DeclaresTools: true, Model: "anthropic:claude-sonnet-4-5"},
		},
		{
			name:   "compactAt",
			folder: "x",
			data:   "---\nname: x\ndescription: d\ncompactAt: 0.6\n---\n",
			want:   &agent.Skill{Name: "x", Description: "d", CompactAt: 0.6},
		},
		{name: "compactAt above the limit", folder: "x", data: "---\nname: x\ndescription: d\ncompactAt: 1.5\n---\n", wantErr: `compactAt "1.5" is not a share of the context window above 0 and at most 0.95, e.g. 0.6 (line 4)`},
		{
			name:   "effort",
			folder: "x",
			data:   "---\nname: x\ndescription: d\neffort: High\n---\n",
			want:   &agent.Skill{Name: "x", Description: "d", Effort: "high"},
		},
		{name: "effort unknown", folder: "x", data: "---\nname: x\ndescription: d\neffort: extreme\n---\n", wantErr: `effort "extreme" is not one of none, minimal, low, medium, high, xhigh, max`},
		{name: "compactAt not a number", folder: "x", data: "---\nname: x\ndescription: d\ncompactAt: 60%\n---\n", wantErr: `compactAt "60%" is not a share`},
		{name: "model with an unknown provider", folder: "x", data: "---\nname: x\ndescription: d\nmodel: openia:gpt-4.1\n---\n", wantErr: `model "openia:gpt-4.1": unknown provider "openia"`},
		{name: "model without a provider", folder: "x", data: "---\nname: x\ndescription: d\nmodel: gpt-4.1\n---\n", wantErr: `model "gpt-4.1" has no provider`},
		{name: "missing front matter", folder: "x", data: "# Just markdown\n", wantErr: `missing front matter: SKILL.md must start with a line "---"`},
		{name: "unclosed front matter", folder: "x", data: "---\nname: x\ndescription: d\n", wantErr: `front matter: no closing line "---"`},
		{name: "empty front matter", folder: "x", data: "---\n---\nbody", wantErr: "front matter: empty; name and description are required"},
		{name: "not a mapping", folder: "x", data: "---\n- a\n---\n", wantErr: "front matter: must be a YAML mapping of fields (line 2)"},
		{name: "bad YAML", folder: "x", data: "---\nname: x\ndescription: a: b: c\n---\n", wantErr: "front matter: line 3: mapping values are not allowed in this context"},
		{name: "uppercase name", folder: "Foo", data: "---\nname: Foo\ndescription: d\n---\n", wantErr: `front matter: name "Foo" must be lowercase letters, digits and hyphens, without a leading, trailing or double hyphen (line 2)`},
		{name: "leading hyphen", folder: "-x", data: "---\nname: -x\ndescription: d\n---\n", wantErr: `name "-x" must be lowercase letters`},
		{name: "double hyphen", folder: "a--b", data: "---\nname: a--b\ndescription: d\n---\n", wantErr: `name "a--b" must be lowercase letters`},
		{name: "trailing hyphen", folder: "a-", data: "---\nname: a-\ndescription: d\n---\n", wantErr: `name "a-" must be lowercase letters`},
		{name: "too long name", folder: strings.Repeat("a", 65), data: "---\nname: " + strings.Repeat("a", 65) + "\ndescription: d\n---\n", wantErr: "is longer than 64 characters"},
		{name: "name differs from folder", folder: "other", data: "---\nname: x\ndescription: d\n---\n", wantErr: `name "x" must match the folder name "other" (line 2)`},
		{name: "missing name and description", folder: "x", data: "---\nlicense: MIT\n---\n", wantErr: `front matter: name is required (the folder name, "x"); description is required`},
		// Soft rules: the skill loads, with a warning.
		{name: "too long description", folder: "x", data: "---\nname: x\ndescription: " + strings.Repeat("é", 1025) + "\n---\n", wantWarn: "description is 1025 characters, more than the format's 1024: other tools may refuse it (line 3)"},
		{name: "too long compatibility", folder: "x", data: "---\nname: x\ndescription: d\ncompatibility: " + strings.Repeat("c", 501) + "\n---\n", wantWarn: "compatibility is 501 characters, more than the format's 500 (line 4)"},
		{name: "unknown keys", folder: "x", data: "---\nname: x\ndescription: d\nlicense: MIT\nsections: [a]\nwidth: 80\n---\n", wantWarn: `unknown field "sections", ignored (not part of the Agent Skills format; put tool-specific keys under metadata) (line 5)`},
		{name: "near miss of a format key", folder: "x", data: "---\nname: x\ndescription: d\nLicense: MIT\n---\n", wantWarn: `unknown field "License", ignored: did you mean "license"? (line 4)`},
		{name: "metadata not a mapping", folder: "x", data: "---\nname: x\ndescription: d\nmetadata: [a]\n---\n", wantWarn: "metadata should be a mapping of keys to values, not a list: ignored (line 4)"},
		{name: "license not a string", folder: "x", data: "---\nname: x\ndescription: d\nlicense: {spdx: MIT}\n---\n", wantWarn: "license should be a string, not a mapping: ignored (line 4)"},
		{name: "no description, a body", folder: "x", data: "---\nname: x\n---\n# Title\nFills PDF forms.\n\nMore.\n", want: &agent.Skill{Name: "x", Description: "Fills PDF forms.", Body: "# Title\nFills PDF forms.\n\nMore.",
			Warnings: []string{"description is missing: the first paragraph of the instructions is used instead"}}},
		{name: "no description, no body", folder: "x", data: "---\nname: x\n---\n", wantErr: "description is required (what the skill does and when to use it), and the instructions have no text to use instead"},
		{name: "description not a string", folder: "x", data: "---\nname: x\ndescription: {a: b}\n---\n", wantErr: "description must be a string, not a mapping (line 3)"},
		{name: "bad interruptOn decision", folder: "x", data: "---\nname: x\ndescription: d\ninterruptOn:\n  publish_brief:\n    allowedDecisions: [approve, aprove]\n---\n", wantErr: `interruptOn.publish_brief.allowedDecisions: unknown decision "aprove" (want approve, edit, reject, respond) (line 6)`},
		{name: "empty allowedDecisions", folder: "x", data: "---\nname: x\ndescription: d\ninterruptOn:\n  t:\n    allowedDecisions: []\n---\n", wantErr: "interruptOn.t.allowedDecisions is empty (use false to not interrupt)"},
		{name: "interruptOn unknown key", folder: "x", data: "---\nname: x\ndescription: d\ninterruptOn:\n  t:\n    allowed_decisions: [approve]\n---\n", wantErr: `interruptOn.t: unknown key "allowed_decisions"`},
		{name: "interruptOn scalar", folder: "x", data: "---\nname: x\ndescription: d\ninterruptOn:\n  t: yes please\n---\n", wantErr: `interruptOn.t must be true, false or {allowedDecisions, description, approvers, distinctApprover, timeout, onTimeout, remindAfter, escalateTo, escalateAfter}`},
		{
			name: "timeout, reject by default", folder: "x",
			data: "---\nname: x\ndescription: d\ninterruptOn:\n  t:\n    timeout: 3d\n---\nDo.\n",
			want: &agent.Skill{Name: "x", Description: "d", Body: "Do.",
				InterruptOn: map[string]agent.Interrupt{"t": {AllowedDecisions: agent.DefaultDecisions, Timeout: 72 * time.Hour, OnTimeout: agent.OnTimeoutReject}}},
		},
		{
			name: "timeout, cancel", folder: "x",
			data: "---\nname: x\ndescription: d\ninterruptOn:\n  t:\n    timeout: 1d12h\n    onTimeout: cancel\n---\nDo.\n",
			want: &agent.Skill{Name: "x", Description: "d", Body: "Do.",
				InterruptOn: map[string]agent.Interrupt{"t": {AllowedDecisions: agent.DefaultDecisions, Timeout: 36 * time.Hour, OnTimeout: agent.OnTimeoutCancel}}},
		},
		{name: "malformed timeout", folder: "x", data: "---\nname: x\ndescription: d\ninterruptOn:\n  t:\n    timeout: 4 hours\n---\n", wantErr: `interruptOn.t.timeout: timeout "4 hours": write a duration such as 30m, 4h or 3d (line 6)`},
		{name: "timeout too short", folder: "x", data: "---\nname: x\ndescription: d\ninterruptOn:\n  t:\n    timeout: 10s\n---\n", wantErr: `interruptOn.t.timeout: timeout "10s" is shorter than a minute`},
		{name: "timeout not a scalar", folder: "x", data: "---\nname: x\ndescription: d\ninterruptOn:\n  t:\n    timeout: [4h]\n---\n", wantErr: `interruptOn.t.timeout: must be a duration such as 30m, 4h or 3d, not a list`},
		{name: "unknown onTimeout", folder: "x", data: "---\nname: x\ndescription: d\ninterruptOn:\n  t:\n    timeout: 4h\n    onTimeout: ignore\n---\n", wantErr: `interruptOn.t.onTimeout "ignore": want reject, cancel, approve, escalate (line 7)`},
		{
			name: "remind and escalate", folder: "x",
			data: "---\nname: x\ndescription: d\ninterruptOn:\n  t:\n    timeout: 1d\n    onTimeout: escalate\n    remindAfter: 1h\n    escalateTo: [group:leads, Ana@Example.com]\n    escalateAfter: 4h\n---\nDo.\n",
			want: &agent.Skill{Name: "x", Description: "d", Body: "Do.",
				InterruptOn: map[string]agent.Interrupt{"t": {AllowedDecisions: agent.DefaultDecisions, Timeout: 24 * time.Hour, OnTimeout: agent.OnTimeoutEscalate,
					RemindAfter: time.Hour, EscalateTo: []string{"group:leads", "user:ana@example.com"}, EscalateAfter: 4 * time.Hour}}},
		},
		{name: "escalate to nobody", folder: "x", data: "---\nname: x\ndescription: d\ninterruptOn:\n  t:\n    timeout: 4h\n    onTimeout: escalate\n---\n", wantErr: `interruptOn.t: onTimeout: escalate needs escalateTo`},
		{name: "escalateTo never", folder: "x", data: "---\nname: x\ndescription: d\ninterruptOn:\n  t:\n    escalateTo: group:leads\n---\n", wantErr: `interruptOn.t: escalateTo needs escalateAfter`},
		{name: "escalateAfter past the deadline", folder: "x", data: "---\nname: x\ndescription: d\ninterruptOn:\n  t:\n    timeout: 1h\n    escalateTo: group:leads\n    escalateAfter: 2h\n---\n", wantErr: `escalateAfter 2h is not before the timeout 1h`},
		{name: "bad escalateTo", folder: "x", data: "---\nname: x\ndescription: d\ninterruptOn:\n  t:\n    escalateTo: leads\n    escalateAfter: 2h\n---\n", wantErr: `interruptOn.t.escalateTo: "leads" is neither an email`},
		{name: "remindAfter too short", folder: "x", data: "---\nname: x\ndescription: d\ninterruptOn:\n  t:\n    remindAfter: 5s\n---\n", wantErr: `interruptOn.t.remindAfter: remindAfter "5s" is shorter than a minute`},
		{name: "onTimeout without timeout", folder: "x", data: "---\nname: x\ndescription: d\ninterruptOn:\n  t:\n    onTimeout: cancel\n---\n", wantErr: `interruptOn.t.onTimeout "cancel" needs a timeout, e.g. timeout: 4h`},
		{name: "bad approver", folder: "x", data: "---\nname: x\ndescription: d\ninterruptOn:\n  t:\n    approvers: [deploy-oncall]\n---\n", wantErr: `interruptOn.t.approvers: "deploy-oncall" is neither an email (user:ana@example.com) nor a group (group:deploy-oncall) (line 6)`},
		{name: "approvers not a list", folder: "x", data: "---\nname: x\ndescription: d\ninterruptOn:\n  t:\n    approvers: group:a\n---\n", wantErr: `interruptOn.t.approvers must be a list such as [group:deploy-oncall]`},
		{name: "distinctApprover not a bool", folder: "x", data: "---\nname: x\ndescription: d\ninterruptOn:\n  t:\n    distinctApprover: maybe\n---\n", wantErr: `interruptOn.t.distinctApprover must be true or false`},
		{
			name: "routed", folder: "x",
			data: "---\nname: x\ndescription: d\ninterruptOn:\n  deploy:\n    approvers: [group:deploy-oncall, Ana@Example.com]\n    distinctApprover: true\n---\nDo.\n",
			want: &agent.Skill{Name: "x", Description: "d", Body: "Do.",
				InterruptOn: map[string]agent.Interrupt{"deploy": {AllowedDecisions: agent.DefaultDecisions,
					Approvers: []string{"group:deploy-oncall", "user:ana@example.com"}, DistinctApprover: true}}},
		},
		{name: "near miss field", folder: "x", data: "---\nname: x\ndescription: d\nallowed_tools: a b\n---\n", wantErr: `unknown field "allowed_tools": did you mean "allowed-tools"? (refused: a misspelt allowed-tools would be silently ignored) (line 4)`},
		{name: "near miss of interruptOn", folder: "x", data: "---\nname: x\ndescription: d\ninterrupt_on:\n  t: true\n---\n", wantErr: `unknown field "interrupt_on": did you mean "interruptOn"?`},
		{name: "duplicate field", folder: "x", data: "---\nname: x\nname: x\ndescription: d\n---\n", wantErr: `field "name" appears twice (first on line 2)`},
		{name: "bad cron", folder: "x", data: "---\nname: x\ndescription: d\nschedule: 0 9 * *\n---\n", wantErr: `schedule: cron: Not a valid cron expression: expected exactly 5 fields, found 4`},
		// The shape of these passed the hand-written check SKILL.md files
		// had; the scheduler refused them.
		{name: "cron minute out of range", folder: "x", data: "---\nname: x\ndescription: d\nschedule: 61 * * * *\n---\n", wantErr: `schedule: cron: Not a valid cron expression: end of range (61) above maximum (59)`},
		{name: "cron never due", folder: "x", data: "---\nname: x\ndescription: d\nschedule: 0 0 30 2 *\n---\n", wantErr: `schedule: cron: This expression never comes due`},
		{name: "cron zone Local", folder: "x", data: "---\nname: x\ndescription: d\nschedule: {cron: '@daily', timezone: Local}\n---\n", wantErr: `schedule: timezone: Name the zone itself`},
		{name: "allowed-tools mapping", folder: "x", data: "---\nname: x\ndescription: d\nallowed-tools: {a: b}\n---\n", wantErr: "allowed-tools must be a space-separated string or a list, not a mapping"},
		{name: "too large", folder: "x", data: "---\nname: x\ndescription: d\n---\n" + strings.Repeat("x", agent.MaxSkillFileSize), wantErr: "larger than the 256 KiB limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := agent.ParseSkill(tt.folder, []byte(tt.data))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v\nwant it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantWarn != "" {
				if !slices.Contains(got.Warnings, tt.wantWarn) {
					t.Errorf("warnings = %q, want %q among them", got.Warnings, tt.wantWarn)
				}
				return
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// A SKILL.md schedule loads exactly when the scheduler would accept it:
// the two read it with the same parser.
func TestSkillScheduleIsTheSchedulersCron(t *testing.T) {
	t.Parallel()
	for _, expr := range []string{
		"0 9 * * 1-5", "@daily", "@midnight", "@every 2h", "@every 30s", "*/15 * * * *", "0 9 * * MON-FRI",
		"0 9 * *", "61 * * * *", "0 24 * * *", "0 0 30 2 *", "0 9 * * 8", "0 9 ? * 1", "@fortnightly", "0 0 8 * * 1-5",
	} {
		_, want := cron.Parse(expr, "UTC", time.Now())
		_, got := agent.ParseSkill("x", []byte("---\nname: x\ndescription: d\nschedule: '"+expr+"'\n---\n"))
		if (got == nil) != (want == nil) {
			t.Errorf("schedule %q: SKILL.md says %v, the scheduler says %v", expr, got, want)
		}
	}
}

func skillFile(name, desc string) string {
	return "---\nname: " + name + "\ndescription: " + desc + "\n---\nInstructions of " + name + ".\n"
}

func TestLoadSkills(t *testing.T) {
	t.Parallel()
	builtin := fstest.MapFS{
		"embed.go":                 {Data: []byte("package skills")},
		"pizza-guide/SKILL.md":     {Data: []byte(skillFile("pizza-guide", "Built-in guide."))},
		"pizza-guide/reference.md": {Data: []byte("more")},
		"researcher/SKILL.md":      {Data: []byte(skillFile("researcher", "Built-in researcher."))},
		"translator/SKILL.md":      {Data: []byte(skillFile("translator", "Built-in translator."))},
		"broken-builtin/SKILL.md":  {Data: []byte("no front matter")},
		".hidden/SKILL.md":         {Data: []byte("ignored")},
		"no-skill-file/notes.md":   {Data: []byte("x")},
	}
	custom := t.TempDir()
	write := func(rel, data string) {
		t.Helper()
		p := filepath.Join(custom, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("researcher/SKILL.md", skillFile("researcher", "Custom researcher."))        // replaces the built-in
	write("translator/SKILL.md", "---\nname: Translator\ndescription: Broken.\n---\n") // malformed: built-in stays
	write("my-notes/SKILL.md", skillFile("my-notes", "Custom notes."))
	write("README.md", "not a skill")

	set := agent.LoadSkills(builtin, custom)

	type row struct{ name, source, desc string }
	var got []row
	for _, s := range set.Skills {
		got = append(got, row{s.Name, s.Source, s.Description})
	}
	want := []row{
		{"my-notes", "custom", "Custom notes."},
		{"pizza-guide", "builtin", "Built-in guide."},
		{"researcher", "custom", "Custom researcher."},
		{"translator", "builtin", "Built-in translator."},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("skills = %v\nwant     %v", got, want)
	}

	var gotErrs []string
	for _, e := range set.Errors {
		gotErrs = append(gotErrs, e.Source+" "+e.Error())
	}
	wantErrs := []string{
		`builtin skills/broken-builtin/SKILL.md: missing front matter: SKILL.md must start with a line "---", then YAML with name and description, then a line "---"`,
		`builtin skills/no-skill-file/SKILL.md: missing: a skill folder needs a SKILL.md`,
		`custom ` + filepath.Join(custom, "translator", "SKILL.md") + `: front matter: name "Translator" must be lowercase letters, digits and hyphens, without a leading, trailing or double hyphen (line 2) (the built-in skill "translator" is used instead)`,
	}
	if !reflect.DeepEqual(gotErrs, wantErrs) {
		t.Errorf("errors =\n%s\nwant\n%s", strings.Join(gotErrs, "\n"), strings.Join(wantErrs, "\n"))
	}

	r, ok := set.Get("researcher")
	if !ok || !r.ReplacesBuiltin || r.Path != filepath.Join(custom, "researcher", "SKILL.md") {
		t.Errorf("Get(researcher) = %+v, %v; want the custom skill replacing the built-in", r, ok)
	}
	g, ok := set.Get("pizza-guide")
	if !ok || g.Path != "skills/pizza-guide/SKILL.md" || g.Body != "Instructions of pizza-guide." {
		t.Fatalf("Get(pizza-guide) = %+v, %v", g, ok)
	}
	if data, err := fs.ReadFile(g.Files, "reference.md"); err != nil || string(data) != "more" {
		t.Errorf("bundled file = %q, %v; want %q", data, err, "more")
	}
	if _, ok := set.Get("nope"); ok {
		t.Error("Get(nope) found a skill")
	}
	var se agent.SkillError
	if !errors.As(error(set.Errors[0]), &se) || se.Name != "broken-builtin" {
		t.Errorf("error 0 = %+v, want folder broken-builtin", set.Errors[0])
	}
}

func TestLoadSkillsWithoutCustomDir(t *testing.T) {
	t.Parallel()
	builtin := fstest.MapFS{"pizza-guide/SKILL.md": {Data: []byte(skillFile("pizza-guide", "Guide."))}}
	set := agent.LoadSkills(builtin, filepath.Join(t.TempDir(), "does-not-exist"))
	if len(set.Skills) != 1 || len(set.Errors) != 0 {
		t.Errorf("set = %+v, want the one built-in and no errors", set)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	set = agent.LoadSkills(builtin, file)
	if len(set.Errors) != 1 || !strings.Contains(set.Errors[0].Error(), "not a directory") {
		t.Errorf("errors = %v, want the custom path reported as not a directory", set.Errors)
	}
}

// One rule for a skill's name, for SKILL.md, plugins and the settings form.
func TestValidSkillName(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", agent.MaxSkillNameLen)
	for name, want := range map[string]bool{
		"researcher": true, "weekly-report-2": true, long: true, "a": true,
		"": false, "-a": false, "a-": false, "a--b": false, "Foo": false, "a_b": false, "a b": false, long + "a": false,
	} {
		if got := agent.ValidSkillName(name); got != want {
			t.Errorf("ValidSkillName(%q) = %v, want %v", name, got, want)
		}
	}
}
