package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The variables of --help (envVars) and the table of docs/configuration.md
// are the same set: a variable added to one is documented in the other.
func TestConfigurationTableMatchesHelp(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	name := regexp.MustCompile("`([A-Z][A-Z0-9_]+)")
	for _, line := range strings.Split(string(raw), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(line, "| `") {
			continue
		}
		for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
			documented[m[1]] = true
		}
	}
	if len(documented) < 20 {
		t.Fatalf("found %d variables in docs/configuration.md: the table's extraction is broken", len(documented))
	}
	help := map[string]bool{}
	for _, v := range envVars {
		help[v.name] = true
		if !documented[v.name] {
			t.Errorf("%s is in --help but not in docs/configuration.md's table", v.name)
		}
	}
	for v := range documented {
		if strings.HasPrefix(v, "PIZZA_") && !help[v] {
			t.Errorf("%s is in docs/configuration.md's table but not in --help (envVars in config.go)", v)
		}
	}
}
