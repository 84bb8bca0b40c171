package tools

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// read_file returns a small file whole and a large one in parts, never
// cutting a UTF-8 character, each part saying where it is and how to read
// on.
func TestFilePart(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("é", 40<<10) // 80 KiB of 2-byte characters
	num := func(n int) json.Number { return json.Number(strconv.Itoa(n)) }
	tests := []struct {
		name, content string
		args          map[string]any
		wantPrefix    string
		wantLen       int // of the part after the note line; -1: the whole content, no note
		wantErr       string
	}{
		{name: "small, whole", content: "hello", args: map[string]any{}, wantLen: -1},
		{name: "large, first part", content: big, args: map[string]any{}, wantPrefix: "[f.txt: bytes 0 to 65536 of 81920; 16384 more: read_file with offset 65536]", wantLen: 65536},
		{name: "an offset inside a character moves back", content: big, args: map[string]any{"offset": num(1001), "length": num(100)}, wantPrefix: "[f.txt: bytes 1000 to 1100 of 81920; 80820 more: read_file with offset 1100]", wantLen: 100},
		{name: "a length ending inside a character stops before it", content: big, args: map[string]any{"offset": num(0), "length": num(101)}, wantPrefix: "[f.txt: bytes 0 to 100 of 81920;", wantLen: 100},
		{name: "the last part", content: big, args: map[string]any{"offset": num(81900), "length": num(1000)}, wantPrefix: "[f.txt: bytes 81900 to 81920 of 81920, the end]", wantLen: 20},
		{name: "past the end", content: "hello", args: map[string]any{"offset": num(10)}, wantErr: "offset 10 is past the end of f.txt, which is 5 bytes"},
	}
	for _, tt := range tests {
		got, err := filePart("f.txt", tt.content, tt.args, maxReadPart)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("%s: error = %v, want %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if tt.wantLen < 0 {
			if got != tt.content {
				t.Errorf("%s: got %q, want the whole content", tt.name, got)
			}
			continue
		}
		note, part, _ := strings.Cut(got, "\n")
		if !strings.HasPrefix(note, tt.wantPrefix) || len(part) != tt.wantLen {
			t.Errorf("%s: note %q, part of %d bytes; want %q and %d bytes", tt.name, note, len(part), tt.wantPrefix, tt.wantLen)
		}
		if !utf8.ValidString(part) {
			t.Errorf("%s: the part cuts a character", tt.name)
		}
	}
	// A script's read (run_js) gets a large file whole.
	if got, err := filePart("f.txt", big, map[string]any{}, maxScratchFile); err != nil || got != big {
		t.Errorf("a script's read: %d bytes, %v; want the whole %d", len(got), err, len(big))
	}
}
