package tools

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"pizzabot/tools/pdftest"
	"strings"
	"testing"
)

// chromiumPath is where CI installs Debian's Chromium (.ci/run).
const chromiumPath = "/usr/bin/chromium"

// chromiumPDF prints an HTML page to PDF with headless Chromium: a real
// PDF with embedded fonts and text as a browser writes it.
func chromiumPDF(t testing.TB, html string) []byte {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("no Chromium at %s (apt-get install chromium; CI installs it)", chromiumPath)
	}
	dir := t.TempDir()
	page := filepath.Join(dir, "page.html")
	if err := os.WriteFile(page, []byte(html), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.pdf")
	cmd := exec.Command(chromiumPath, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-pdf-header-footer",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--print-to-pdf="+out, "file://"+page)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, b)
	}
	pdf, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return pdf
}

// haveCJKFont reports whether fontconfig knows a font for Chinese.
func haveCJKFont() bool {
	out, err := exec.Command("fc-list", ":lang=zh").Output()
	return err == nil && len(bytes.TrimSpace(out)) > 0
}

// A PDF printed by Chromium is read page by page, in three languages.
func TestReadPDFFromChromium(t *testing.T) {
	t.Parallel()
	pdf := chromiumPDF(t, `<!doctype html><meta charset="utf-8"><style>p { break-after: page; }</style>
<p>Renewal contract for the Margherita supplier.</p>
<p>Договор продления с поставщиком.</p>
<p>续约合同已经签署。</p>`)
	ctx := context.Background()
	all, err := readPDF(ctx, pdf, 1, 10, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if all.Pages != 3 || len(all.Text) != 3 {
		t.Fatalf("pages = %d, texts = %q", all.Pages, all.Text)
	}
	for i, want := range []string{"Renewal contract", "Договор продления", "续约合同"} {
		if i == 2 && !haveCJKFont() {
			// Without a CJK font Chromium draws every ideograph as the same
			// missing glyph, and a PDF cannot map one glyph to many characters.
			t.Log("no CJK font installed (fonts-noto-cjk): the Chinese page is not checked")
			continue
		}
		if !strings.Contains(all.Text[i], want) {
			t.Errorf("page %d = %+q, want %q in it", i+1, all.Text[i], want)
		}
	}
	second, err := readPDF(ctx, pdf, 2, 1, 1<<20)
	if err != nil || second.First != 2 || len(second.Text) != 1 || !strings.Contains(second.Text[0], "Договор") {
		t.Fatalf("page 2 alone = %+v, %v", second, err)
	}
	count, err := readPDF(ctx, pdf, 1, 0, 0)
	if err != nil || count.Pages != 3 || len(count.Text) != 0 {
		t.Fatalf("count only = %+v, %v", count, err)
	}
	// The byte budget stops after the page that passes it.
	small, err := readPDF(ctx, pdf, 1, 10, 10)
	if err != nil || len(small.Text) != 1 {
		t.Fatalf("with a 10-byte budget = %+v, %v", small, err)
	}
}

// A hand-written PDF reads; a broken or encrypted one is a clear error.
func TestReadPDFHandmadeBrokenEncrypted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	got, err := readPDF(ctx, pdftest.Handmade([]string{"Hello from page one", "Second page here"}, false), 1, 10, 1<<20)
	if err != nil || got.Pages != 2 || !strings.Contains(got.Text[0], "Hello from page one") || !strings.Contains(got.Text[1], "Second page") {
		t.Fatalf("handmade = %+v, %v", got, err)
	}
	good := pdftest.Handmade([]string{"Hello"}, false)
	for name, content := range map[string][]byte{
		"not a pdf": []byte("%PDF-1.7\n..."),
		"empty":     nil,
		"truncated": good[:len(good)/3],
	} {
		if _, err := readPDF(ctx, content, 1, 10, 1<<20); !errors.Is(err, ErrPDFBroken) {
			t.Errorf("%s: err = %v, want ErrPDFBroken", name, err)
		}
	}
	if _, err := readPDF(ctx, pdftest.Handmade([]string{"Secret"}, true), 1, 10, 1<<20); !errors.Is(err, ErrPDFEncrypted) {
		t.Errorf("encrypted: err = %v, want ErrPDFEncrypted", err)
	}
}

// A damaged compile cache (a file cut short by a full disk, say) does not
// stop PDFs from being read: PDFium is compiled afresh without it.
func TestPDFiumDamagedCompileCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pdf := pdftest.Handmade([]string{"Cached or not"}, false)
	if _, err := readPDF(ctx, pdf, 1, 1, 1<<20); err != nil { // fills the user's cache
		t.Fatal(err)
	}
	src := pdfCacheDir()
	if src == "" {
		t.Skip("no user cache directory")
	}
	dst := t.TempDir()
	cut := 0
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == src {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.Mkdir(filepath.Join(dst, rel), 0o700)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		cut++
		return os.WriteFile(filepath.Join(dst, rel), b[:len(b)/2], 0o600)
	})
	if err != nil || cut == 0 {
		t.Fatalf("copy the compile cache %s: %v (%d files)", src, err, cut)
	}
	pool, err := openPDFium(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	inst, err := pool.GetInstanceWithContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	if got, err := extractPDF(inst, pdf, 1, 1, 1<<20); err != nil || len(got.Text) != 1 || !strings.Contains(got.Text[0], "Cached or not") {
		t.Fatalf("read with a damaged cache = %+v, %v", got, err)
	}
}
