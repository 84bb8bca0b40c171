// Package skills holds Pizza Bot's built-in skills: one folder per skill,
// each with a SKILL.md in the Agent Skills format, embedded in the binary.
// agent.LoadSkills reads them from FS; a custom skill of the same name in
// <PIZZA_DATA_ROOT>/skills replaces a built-in one.
package skills

import "embed"

// FS holds the skill folders at its root (pizza-guide/SKILL.md, ...). Loose
// files at the root, like this Go file, are not skills and are ignored.
//
//go:embed all:*
var FS embed.FS
