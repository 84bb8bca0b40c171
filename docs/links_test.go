package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// mdLink is an inline Markdown link or image: [text](target) or
// ![alt](target "title").
var mdLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// links returns the targets of the inline links of a Markdown text, outside
// code (fenced blocks and `spans`), with their line numbers.
func links(text string) (targets []string, lines []int) {
	inFence := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		line = regexp.MustCompile("`[^`]*`").ReplaceAllString(line, "")
		for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[1])
			lines = append(lines, i+1)
		}
	}
	return targets, lines
}

// anchors returns the ids GitHub gives the headings of a Markdown text:
// lowercased, punctuation dropped except hyphens and underscores, spaces to
// hyphens, and -1, -2, ... after a repeated one.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		if title == "" || !strings.HasPrefix(line, strings.Repeat("#", len(line)-len(strings.TrimLeft(line, "#")))+" ") {
			continue
		}
		id := slug(title)
		if n := seen[id]; n > 0 {
			out[id+"-"+itoa(n)] = true
		} else {
			out[id] = true
		}
		seen[id]++
	}
	return out
}

func slug(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func itoa(n int) string {
	const digits = "0123456789"
	if n < 10 {
		return digits[n : n+1]
	}
	return itoa(n/10) + digits[n%10:n%10+1]
}

func TestSlug(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ title, want string }{
		{"Scaling: what to watch", "scaling-what-to-watch"},
		{"Restricting who may sign in", "restricting-who-may-sign-in"},
		{"Long-term memory: `save_memory`, `search_memory`, `forget_memory`", "long-term-memory-save_memory-search_memory-forget_memory"},
		{"Sign-in: \"redirect URI mismatch\" at the identity provider", "sign-in-redirect-uri-mismatch-at-the-identity-provider"},
		{"1. A skill for the events", "1-a-skill-for-the-events"},
	} {
		if got := slug(tt.title); got != tt.want {
			t.Errorf("slug(%q) = %q, want %q", tt.title, got, tt.want)
		}
	}
	got := anchors("# A\n## A\n```\n# not a heading\n```\n### A\n#nospace\n")
	for _, want := range []string{"a", "a-1", "a-2"} {
		if !got[want] {
			t.Errorf("anchors lack %q: %v", want, got)
		}
	}
	if got["not-a-heading"] || got["nospace"] || len(got) != 3 {
		t.Errorf("anchors = %v, want a, a-1, a-2", got)
	}
}

// Every relative link of the README and docs/*.md names a file or folder of
// the repository and, with #anchor, a heading of that page (GitHub's ids).
// Links to other sites are not fetched.
func TestLinksResolve(t *testing.T) {
	t.Parallel()
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "../README.md")
	checked := 0
	for _, page := range pages {
		raw, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		targets, lines := links(string(raw))
		for i, target := range targets {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			where := page + ":" + itoa(lines[i])
			path, anchor, _ := strings.Cut(target, "#")
			file := page
			if path != "" {
				file = filepath.Join(filepath.Dir(page), path)
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s: link %q: no such file (%s)", where, target, file)
					continue
				}
			}
			checked++
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(file, ".md") {
				t.Errorf("%s: link %q: an anchor into a file that is not Markdown", where, target)
				continue
			}
			text, err := os.ReadFile(file)
			if err != nil {
				t.Errorf("%s: link %q: %v", where, target, err)
				continue
			}
			if !anchors(string(text))[anchor] {
				t.Errorf("%s: link %q: %s has no heading #%s", where, target, file, anchor)
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked %d links: the extraction is broken", checked)
	}
}
