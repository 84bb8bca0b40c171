package views

import (
	"bytes"
	"context"
	"io"
	"regexp"

	"github.com/a-h/templ"
	"github.com/microcosm-cc/bluemonday"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/renderer"
	"github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"
)

// Model output is untrusted: a model can be talked into writing anything,
// including HTML meant to run in the reader's session. Markdown is rendered
// in two defences, either of which would do on its own:
//
//  1. goldmark never passes raw HTML through: HTML the model writes is shown
//     as text (as a chat client shows it), not dropped, so "use <br>" reads
//     as written. Images become links, so a message cannot load anything by
//     itself (the CSP would block it anyway) and the reader sees where they
//     point. Links carry rel="nofollow noopener".
//  2. bluemonday's UGC policy cleans what goldmark produced: only
//     formatting elements, only http, https and mailto URLs (plus relative
//     ones), no event handlers, no styles (the CSP forbids inline styles, so
//     tables align with the align attribute).
var (
	markdown = goldmark.New(
		goldmark.WithExtensions(
			extension.NewTable(extension.WithTableCellAlignMethod(extension.TableCellAlignAttribute)),
			extension.Strikethrough,
			extension.Linkify,
			extension.TaskList,
		),
		goldmark.WithParserOptions(parser.WithASTTransformers(util.Prioritized(linkTransformer{}, 0))),
		goldmark.WithRendererOptions(renderer.WithNodeRenderers(util.Prioritized(rawHTMLAsText{}, 0))),
	)
	sanitizer = newSanitizer()
)

// linkRel is the rel of every link in rendered Markdown: no endorsement of
// the target, and no window.opener for it.
const linkRel = "nofollow noopener"

func newSanitizer() *bluemonday.Policy {
	p := bluemonday.UGCPolicy()
	// The rel goldmark wrote; RequireNoFollowOnLinks (part of UGC) keeps it
	// since it already says nofollow.
	p.AllowAttrs("rel").Matching(regexp.MustCompile(`^nofollow noopener$`)).OnElements("a")
	// Fenced code's language, for readers and a future highlighter.
	p.AllowAttrs("class").Matching(regexp.MustCompile(`^language-[\w.+#-]{1,40}$`)).OnElements("code")
	// Task lists: goldmark's disabled checkboxes.
	p.AllowAttrs("type").Matching(regexp.MustCompile(`^checkbox$`)).OnElements("input")
	p.AllowAttrs("checked", "disabled").Matching(regexp.MustCompile(`^(|checked|disabled)$`)).OnElements("input")
	return p
}

// MarkdownHTML renders Markdown (GitHub flavoured: tables, strikethrough,
// autolinks, task lists) to sanitized HTML, safe to insert in a page. It is
// a pure function: the same text always gives the same HTML.
func MarkdownHTML(src string) string {
	var buf bytes.Buffer
	if err := markdown.Convert([]byte(src), &buf); err != nil {
		// goldmark fails only when writing fails, which a buffer does not;
		// should it ever, the text is still shown, escaped.
		buf.Reset()
		buf.WriteString("<p>" + templ.EscapeString(src) + "</p>")
	}
	return sanitizer.Sanitize(buf.String())
}

// Markdown is MarkdownHTML as a component.
func Markdown(src string) templ.Component {
	return templ.ComponentFunc(func(_ context.Context, w io.Writer) error {
		_, err := io.WriteString(w, MarkdownHTML(src))
		return err
	})
}

// linkTransformer sets the rel of links and turns images into links to
// their source, labelled with their alt text.
type linkTransformer struct{}

func (linkTransformer) Transform(doc *ast.Document, _ text.Reader, _ parser.Context) {
	var images []*ast.Image
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Link:
			n.SetAttributeString("rel", []byte(linkRel))
		case *ast.AutoLink:
			n.SetAttributeString("rel", []byte(linkRel))
		case *ast.Image:
			images = append(images, n)
		}
		return ast.WalkContinue, nil
	})
	for _, img := range images {
		link := ast.NewLink()
		link.Destination = img.Destination
		link.Title = img.Title
		link.SetAttributeString("rel", []byte(linkRel))
		for c := img.FirstChild(); c != nil; {
			next := c.NextSibling()
			link.AppendChild(link, c)
			c = next
		}
		if !link.HasChildren() {
			link.AppendChild(link, ast.NewString(img.Destination))
		}
		img.Parent().ReplaceChild(img.Parent(), img, link)
	}
}

// rawHTMLAsText renders the HTML written in Markdown as visible text rather
// than as markup: inline HTML in place, HTML blocks as code.
type rawHTMLAsText struct{}

func (rawHTMLAsText) RegisterFuncs(reg renderer.NodeRendererFuncRegisterer) {
	reg.Register(ast.KindRawHTML, renderRawHTML)
	reg.Register(ast.KindHTMLBlock, renderHTMLBlock)
}

func renderRawHTML(w util.BufWriter, source []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	if entering {
		segs := node.(*ast.RawHTML).Segments
		for i := range segs.Len() {
			seg := segs.At(i)
			_, _ = w.Write(util.EscapeHTML(seg.Value(source)))
		}
	}
	return ast.WalkSkipChildren, nil
}

func renderHTMLBlock(w util.BufWriter, source []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	n := node.(*ast.HTMLBlock)
	if entering {
		_, _ = w.WriteString("<pre><code>")
		lines := n.Lines()
		for i := range lines.Len() {
			seg := lines.At(i)
			_, _ = w.Write(util.EscapeHTML(seg.Value(source)))
		}
		if n.HasClosure() {
			_, _ = w.Write(util.EscapeHTML(n.ClosureLine.Value(source)))
		}
		_, _ = w.WriteString("</code></pre>\n")
	}
	return ast.WalkSkipChildren, nil
}
