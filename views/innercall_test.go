package views

import (
	"strings"
	"testing"
)

// A long value comes after the short ones and folds, whole; a value that
// is not a string is shown as JSON; arguments that are not an object are
// one value.
func TestInnerArgs(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("y", 3000)
	got := innerArgs(`{"content":"` + long + `","path":"a/b.md","mode":{"append":true},"n":12}`)
	want := []struct {
		name, value string
		long        bool
	}{{"path", "a/b.md", false}, {"mode", "{\n  \"append\": true\n}", false}, {"n", "12", false}, {"content", long, true}}
	if len(got) != len(want) {
		t.Fatalf("got %d arguments, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].Name != w.name || got[i].Value != w.value || got[i].Long != w.long {
			t.Errorf("argument %d = %s %.40q long %v, want %s %.40q long %v", i, got[i].Name, got[i].Value, got[i].Long, w.name, w.value, w.long)
		}
	}
	if s := got[3].Summary; s != "3,000 characters, 1 line: show all" {
		t.Errorf("summary = %q", s)
	}
	if got := innerArgs(`[1, 2]`); len(got) != 1 || got[0].Value != "[1, 2]" {
		t.Errorf("not an object: %+v", got)
	}
}
