package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"pizzabot/agent"
	"pizzabot/db"
)

// The skill folder view of the scratch file tools. A run of a skill, and a
// sub-agent of such a run, sees its skill's folder read-only at
// /skills/<name>/ (agent.SkillMount) through ls and read_file: SKILL.md's
// bundled files (examples/, reference.md, scripts/) are opened the way
// their authors meant. A relative path not in the scratch space that is
// in the skill's folder is read from there too, so that "examples/a.md" as
// written in SKILL.md works. Writes under /skills/ are refused: the
// scratch space keeps that prefix free.

// skillViewPrefix is the scratch path prefix of the view (scratchPath drops
// the leading slash).
var skillViewPrefix = strings.TrimPrefix(agent.SkillMount, "/") + "/"

// inSkillView reports whether a cleaned scratch path is under /skills/, and
// splits it into the skill's name and the path inside its folder.
func inSkillView(p string) (name, rel string, ok bool) {
	if p == strings.TrimSuffix(skillViewPrefix, "/") {
		return "", ".", true
	}
	rest, ok := strings.CutPrefix(p, skillViewPrefix)
	if !ok {
		return "", "", false
	}
	name, rel, _ = strings.Cut(rest, "/")
	if rel == "" {
		rel = "."
	}
	return name, rel, true
}

// errSkillReadOnly refuses a write into the view.
func errSkillReadOnly(p string) error {
	return fmt.Errorf("/%s is inside %s/, the skill's own folder, which is read-only: write your files elsewhere in the scratch space (e.g. out/%s)",
		p, agent.SkillMount, p[strings.LastIndexByte(p, '/')+1:])
}

// runSkills returns the skills whose folders a run sees: its own skill and
// its parent run's (a sub-agent started by a skill run), first its own.
// Outside the runtime (no call environment) it sees none.
func runSkills(ctx context.Context, q db.Querier, run Run) ([]*agent.Skill, error) {
	if run.Host == nil {
		return nil, nil
	}
	var out []*agent.Skill
	id := run.ThreadID
	for depth := 0; depth < 4; depth++ { // sub-agents are one level deep; a bound all the same
		t, err := db.GetRunThread(ctx, q, id)
		if err != nil {
			return nil, err
		}
		if t.Skill != "" {
			s, ok, err := run.Host.RunSkill(ctx, q, t.ID, t.Skill)
			if err != nil {
				return nil, err
			}
			if ok && s.Files != nil && !containsSkill(out, s.Name) {
				out = append(out, s)
			}
		}
		if t.ParentThreadID == nil {
			break
		}
		id = *t.ParentThreadID
	}
	return out, nil
}

func containsSkill(ss []*agent.Skill, name string) bool {
	for _, s := range ss {
		if s.Name == name {
			return true
		}
	}
	return false
}

// skillLs lists /skills/ or a folder inside a skill's.
func skillLs(skills []*agent.Skill, name, rel string) (string, error) {
	if name == "" {
		if len(skills) == 0 {
			return "", errors.New("no skill folder is visible to this run: /skills/ shows the folder of the skill the run belongs to")
		}
		var b strings.Builder
		for _, s := range skills {
			fmt.Fprintf(&b, "%s/%s/\t(read-only) %s\n", agent.SkillMount, s.Name, s.Description)
		}
		return b.String(), nil
	}
	s, err := viewSkill(skills, name)
	if err != nil {
		return "", err
	}
	rel, err = agent.CleanSkillPath(rel)
	if err != nil {
		return "", err
	}
	files, truncated, err := agent.ListSkillFiles(s)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	base := agent.SkillMount + "/" + s.Name + "/"
	fmt.Fprintf(&b, "%s (read-only: the skill's own files)\n", base)
	shown := 0
	for _, f := range files {
		if rel != "." && f.Path != rel && !strings.HasPrefix(f.Path, rel+"/") {
			continue
		}
		shown++
		if f.Dir {
			fmt.Fprintf(&b, "%s%s/\n", base, f.Path)
			continue
		}
		if f.Kind == agent.FileRefused {
			fmt.Fprintf(&b, "%s%s\t(%s)\n", base, f.Path, f.Note())
			continue
		}
		fmt.Fprintf(&b, "%s%s\t%d bytes", base, f.Path, f.Size)
		if note := f.Note(); note != "" {
			b.WriteString("\t(" + note + ")")
		}
		b.WriteString("\n")
	}
	if shown == 0 {
		return "", fmt.Errorf("no file or folder %q in the skill %s", rel, s.Name)
	}
	if truncated {
		fmt.Fprintf(&b, "… (listing cut at %d entries)\n", agent.MaxSkillFolderFiles)
	}
	return b.String(), nil
}

func viewSkill(skills []*agent.Skill, name string) (*agent.Skill, error) {
	for _, s := range skills {
		if s.Name == name {
			return s, nil
		}
	}
	if len(skills) == 0 {
		return nil, fmt.Errorf("no skill folder is visible to this run (%s/%s/ is not its skill)", agent.SkillMount, name)
	}
	return nil, fmt.Errorf("%s/%s/ is not visible to this run: it sees %s/%s/ only", agent.SkillMount, name, agent.SkillMount, skills[0].Name)
}

// skillRead reads a file of a visible skill.
func skillRead(skills []*agent.Skill, name, rel string) (string, error) {
	s, err := viewSkill(skills, name)
	if err != nil {
		return "", err
	}
	return agent.ReadSkillFile(s, rel)
}

// SkillFolderPrompt is the line the system prompt gives a run of a skill:
// where its folder is and what runs there.
func SkillFolderPrompt(s *agent.Skill) string {
	if s == nil || s.Files == nil {
		return ""
	}
	base := agent.SkillMount + "/" + s.Name + "/"
	return "The skill's folder is " + base + " (read-only): list it with ls {\"path\": \"" + base + "\"} and open the files these instructions mention with read_file; " +
		"relative paths in them (such as examples/x.md) are inside it. JavaScript files there run with run_js {\"file\": \"" + base + "…\"}; scripts in other languages (Python, shell) cannot run here: follow what they do from their text instead."
}

// skillProgram is what run_js runs: code, or a file of the run's skill,
// with the JavaScript of the skills the run sees as loadable modules. The
// sandbox gets their text as data; it never opens a file.
func skillProgram(ctx context.Context, run Run, code, file string, argv any) (agent.ScriptProgram, error) {
	prog := agent.ScriptProgram{Code: code}
	host, err := run.host()
	if err != nil {
		if file != "" {
			return prog, errors.New("file runs a skill's script, and this run has no skill")
		}
		return prog, nil
	}
	skills, err := runSkills(ctx, host.Pool(), run) // no transaction is held here
	if err != nil {
		return prog, err
	}
	if len(skills) == 0 {
		if file != "" {
			return prog, fmt.Errorf("file runs a skill's script (%s/<name>/...), and this run has no skill", agent.SkillMount)
		}
		return prog, nil
	}
	prog.Root = agent.SkillMount + "/" + skills[0].Name + "/"
	prog.Modules = map[string]string{}
	for _, s := range skills {
		mods, err := agent.SkillModules(s)
		if err != nil {
			return prog, err
		}
		for k, v := range mods {
			prog.Modules[k] = v
		}
	}
	if file == "" {
		return prog, nil
	}
	clean, err := scratchPath(file)
	if err != nil {
		return prog, err
	}
	name, rel, ok := inSkillView(clean)
	if !ok {
		// "scripts/x.js", as SKILL.md writes it: in the run's skill.
		name, rel = skills[0].Name, clean
	}
	s, err := viewSkill(skills, name)
	if err != nil {
		return prog, err
	}
	if !agent.IsSkillScript(rel) {
		return prog, fmt.Errorf("%s/%s/%s is not JavaScript: only .js, .mjs and .cjs files run here; scripts in other languages cannot run, so do what it does another way", agent.SkillMount, name, rel)
	}
	prog.Main = agent.SkillMount + "/" + s.Name + "/" + rel
	if _, ok := prog.Modules[prog.Main]; !ok {
		if _, err := agent.ReadSkillFile(s, rel); err != nil {
			return prog, err
		}
		return prog, fmt.Errorf("%s cannot be loaded (the skill's JavaScript is over its size limit)", prog.Main)
	}
	prog.Code = ""
	if list, ok := argv.([]any); ok {
		for _, a := range list {
			str, _ := a.(string)
			prog.Argv = append(prog.Argv, str)
		}
	}
	return prog, nil
}
