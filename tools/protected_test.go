package tools_test

import (
	"os"
	"path/filepath"
	"testing"

	"pizzabot/tools"
)

// TestProtectedContains: the one rule that keeps folder grants out of the
// data root, by name and through symlinks on either side.
func TestProtectedContains(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	root := filepath.Join(base, "root")
	for _, d := range []string{filepath.Join(root, "skills"), filepath.Join(base, "root2"), filepath.Join(base, "docs")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	link := func(name, to string) string {
		p := filepath.Join(base, name)
		if err := os.Symlink(to, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	intoRoot := link("into-root", filepath.Join(root, "skills"))
	rootLink := link("root-link", root)
	tests := []struct {
		name      string
		protected string
		path      string
		want      bool
	}{
		{"the folder itself", root, root, true},
		{"inside, by name", root, filepath.Join(root, "skills"), true},
		{"inside, with dots", root, filepath.Join(root, "skills", "..", "skills"), true},
		{"a link into it", root, intoRoot, true},
		{"a path through a link to it", root, filepath.Join(rootLink, "skills"), true},
		{"named through a link, reached by its real name", rootLink, filepath.Join(root, "skills"), true},
		{"a sibling sharing its prefix", root, filepath.Join(base, "root2"), false},
		{"outside", root, filepath.Join(base, "docs"), false},
		{"an empty path", root, "", false},
		{"nothing protected", "", root, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tools.NewProtected(tt.protected).Contains(tt.path); got != tt.want {
				t.Errorf("NewProtected(%s).Contains(%s) = %v, want %v", tt.protected, tt.path, got, tt.want)
			}
		})
	}
}
