package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// InstalledSkill is a skill folder InstallSkills put in place.
type InstalledSkill struct {
	Name string
	// Warnings are the soft rules its SKILL.md breaks (it loads anyway).
	Warnings []string
	// Replaced reports that it replaced a custom skill of the same name.
	Replaced bool
}

// InstallSkills installs the skill folders in archive (a .zip, .tar.gz or
// .tar of one skill folder, of a folder of several, or of a skills/ folder)
// into skillsDir (a scratch folder the caller stores from), with the plugins' safe
// extraction: no absolute paths, no "..", no links or device files, at
// most MaxSkillFolderSize bytes. Every SKILL.md must parse (warnings
// allowed) before anything is installed: an archive installs whole or not
// at all, but for a failure while moving folders into place. A custom skill
// of the same name is replaced only when replace is set; the other files
// of skillsDir are never touched. fallbackName names a skill whose
// SKILL.md sits at the archive's root and whose front matter has no name.
func InstallSkills(skillsDir string, archive io.Reader, fallbackName string, replace bool) ([]InstalledSkill, error) {
	tmp, err := extractArchive(skillsDir, archive, MaxSkillFolderSize)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	root := tmp
	for range 3 { // unwrap "pdf-skill-main/skills/..." style top folders
		if hasFile(root, SkillFile) {
			break
		}
		if entries := visible(root); len(entries) == 1 && entries[0].IsDir() {
			root = filepath.Join(root, entries[0].Name())
			continue
		}
		if info, err := os.Stat(filepath.Join(root, "skills")); err == nil && info.IsDir() {
			root = filepath.Join(root, "skills")
		}
		break
	}

	type found struct{ dir, name string }
	var skills []found
	if hasFile(root, SkillFile) {
		name := filepath.Base(root)
		if root == tmp {
			name = frontMatterName(filepath.Join(root, SkillFile))
			if name == "" {
				name = fallbackName
			}
		}
		skills = append(skills, found{root, name})
	} else {
		for _, e := range visible(root) {
			if e.IsDir() && hasFile(filepath.Join(root, e.Name()), SkillFile) {
				skills = append(skills, found{filepath.Join(root, e.Name()), e.Name()})
			}
		}
	}
	if len(skills) == 0 {
		return nil, errors.New("the archive holds no skill: want a folder with a SKILL.md, or a folder of such folders")
	}

	var out []InstalledSkill
	var problems []string
	for _, s := range skills {
		data, err := readSkillFile(SkillFolderFS(s.dir), SkillFile)
		if err == nil {
			var sk *Skill
			if sk, err = ParseSkill(s.name, data); err == nil {
				out = append(out, InstalledSkill{Name: s.name, Warnings: sk.Warnings})
			}
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s/%s: %v", s.name, SkillFile, err))
			continue
		}
		if _, err := os.Lstat(filepath.Join(skillsDir, s.name)); err == nil {
			if !replace {
				problems = append(problems, fmt.Sprintf("a custom skill named %q exists already: tick replace, or delete it first", s.name))
			}
			out[len(out)-1].Replaced = true
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("nothing was installed: %s", strings.Join(problems, "; "))
	}
	for i, s := range skills {
		dest := filepath.Join(skillsDir, s.name)
		var old string
		if out[i].Replaced {
			old = filepath.Join(skillsDir, fmt.Sprintf(".old-%s-%d", s.name, time.Now().UnixNano()))
			if err := os.Rename(dest, old); err != nil {
				return out[:i], err
			}
		}
		if err := os.Rename(s.dir, dest); err != nil {
			if old != "" {
				_ = os.Rename(old, dest)
			}
			return out[:i], err
		}
		if old != "" {
			_ = os.RemoveAll(old)
		}
	}
	slices.SortFunc(out, func(a, b InstalledSkill) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func hasFile(dir, name string) bool {
	info, err := os.Lstat(filepath.Join(dir, name))
	return err == nil && info.Mode().IsRegular()
}

// visible lists dir without hidden entries (__MACOSX, .DS_Store).
func visible(dir string) []os.DirEntry {
	entries, _ := os.ReadDir(dir)
	return slices.DeleteFunc(entries, func(e os.DirEntry) bool {
		return strings.HasPrefix(e.Name(), ".") || strings.HasPrefix(e.Name(), "__")
	})
}

// frontMatterName reads the name field of a SKILL.md, or "".
func frontMatterName(file string) string {
	data, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n")[1:] {
		line = strings.TrimSpace(line)
		if line == "---" {
			break
		}
		if v, ok := strings.CutPrefix(line, "name:"); ok {
			return strings.Trim(strings.TrimSpace(v), `"'`)
		}
	}
	return ""
}
