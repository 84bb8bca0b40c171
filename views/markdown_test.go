package views

import (
	"strings"
	"testing"
)

func TestMarkdownHTML(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		src     string
		want    []string // substrings of the output
		notWant []string
	}{
		{
			name: "formatting",
			src:  "**bold** and *em* and ~~gone~~ and `code`",
			want: []string{"<strong>bold</strong>", "<em>em</em>", "<del>gone</del>", "<code>code</code>"},
		},
		{
			name:    "a script is text, not a tag",
			src:     "Hello <script>alert(1)</script>",
			want:    []string{"&lt;script&gt;alert(1)&lt;/script&gt;"},
			notWant: []string{"<script"},
		},
		{
			name:    "an HTML block is shown as code",
			src:     "<div onclick=\"steal()\">\nhi\n</div>",
			want:    []string{"<pre><code>&lt;div onclick="},
			notWant: []string{"<div", "onclick=\""},
		},
		{
			name:    "an event handler in inline HTML is text",
			src:     `see <img src=x onerror=alert(1)> here`,
			want:    []string{"see &lt;img src=x onerror=alert(1)&gt; here"},
			notWant: []string{"<img"},
		},
		{
			name:    "javascript links lose their href",
			src:     "[x](javascript:alert(1)) [y](JAVASCRIPT:alert(1)) [z](data:text/html,<script>alert(1)</script>)",
			notWant: []string{"javascript:", "JAVASCRIPT:", "data:text"},
		},
		{
			name: "links are nofollow noopener, with no target",
			src:  "[docs](https://example.com/docs) and https://go.dev",
			want: []string{
				`<a href="https://example.com/docs" rel="nofollow noopener">docs</a>`,
				`<a href="https://go.dev" rel="nofollow noopener">https://go.dev</a>`,
			},
			notWant: []string{"target="},
		},
		{
			name:    "images become links",
			src:     "![a chart](https://example.com/chart.png)",
			want:    []string{`<a href="https://example.com/chart.png" rel="nofollow noopener">a chart</a>`},
			notWant: []string{"<img"},
		},
		{
			name:    "tables align without styles",
			src:     "| a | b |\n|:--|--:|\n| 1 | 2 |",
			want:    []string{"<table>", `<th align="left">a</th>`, `<td align="right">2</td>`},
			notWant: []string{"style="},
		},
		{
			name: "code blocks keep their text and language",
			src:  "```go\nif a < b {\n\tfmt.Println(\"<b>\")\n}\n```",
			want: []string{`<pre><code class="language-go">if a &lt; b {` + "\n\tfmt.Println(&#34;&lt;b&gt;&#34;)"},
		},
		{
			name:    "a language class cannot smuggle others",
			src:     "```go onclick=x\nx\n```",
			notWant: []string{"onclick"},
		},
		{
			name: "task lists",
			src:  "- [x] done\n- [ ] todo",
			want: []string{`<input checked="" disabled="" type="checkbox"> done`, `<input disabled="" type="checkbox"> todo`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := MarkdownHTML(tt.src)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("output lacks %q:\n%s", w, got)
				}
			}
			for _, nw := range tt.notWant {
				if strings.Contains(got, nw) {
					t.Errorf("output contains %q:\n%s", nw, got)
				}
			}
		})
	}
}

func BenchmarkMarkdownHTML(b *testing.B) {
	src := strings.Repeat("## Findings\n\nSome **bold** text with a [link](https://example.com) and `code`.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```go\nfunc main() {}\n```\n\n", 20)
	b.ReportAllocs()
	for b.Loop() {
		MarkdownHTML(src)
	}
}
