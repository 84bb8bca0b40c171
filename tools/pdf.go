package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klippa-app/go-pdfium"
	pdfiumerrors "github.com/klippa-app/go-pdfium/errors"
	"github.com/klippa-app/go-pdfium/requests"
	"github.com/klippa-app/go-pdfium/webassembly"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"pizzabot/db"
)

// PDF text comes from PDFium compiled to WebAssembly (go-pdfium's webassembly
// mode, run by wazero): no C toolchain to build, and a PDF parser that runs
// in a sandbox with no file system, a memory ceiling and a deadline, since
// the files come from users and webhooks.

// PDF limits.
const (
	// pdfMemoryPages caps an extraction's WebAssembly memory, in 64 KiB
	// pages (256 MiB): a hostile PDF exhausts its own sandbox, not the
	// server.
	pdfMemoryPages = 4096
	// pdfTimeout bounds one extraction (opening the document and reading
	// its pages); past it the instance is killed.
	pdfTimeout = 20 * time.Second
	// pdfPagesPerRead is the most pages one read_attachment call returns.
	pdfPagesPerRead = 50
	// pdfWorkers is how many PDFs are read at once in this process.
	pdfWorkers = 2
)

// ErrPDFEncrypted is a PDF protected by a password.
var ErrPDFEncrypted = errors.New("the PDF is encrypted with a password")

// ErrPDFBroken is a file that PDFium cannot open as a PDF.
var ErrPDFBroken = errors.New("the file is not a valid PDF or is damaged")

var pdfPool struct {
	once  sync.Once
	ready atomic.Bool // once has run: pdfiumPool answers at once
	pool  pdfium.Pool
	err   error
}

// pdfiumPool starts PDFium once per process, on first use or ahead of it
// (StartPDFium), with the compile cache of pdfCacheDir (openPDFium).
func pdfiumPool() (pdfium.Pool, error) {
	pdfPool.once.Do(func() {
		pdfPool.pool, pdfPool.err = openPDFium(pdfCacheDir())
		pdfPool.ready.Store(true)
	})
	return pdfPool.pool, pdfPool.err
}

// StartPDFium starts PDFium in the background, so that no request waits
// for its compilation: the server calls it at start. On a machine whose
// cache holds no compiled PDFium yet (a fresh install, a new version of
// the module) compiling takes seconds, and a run start with a PDF that
// waited for it would outlive its admission deadline and be refused as if
// the server were busy. Until PDFium is ready, a run start does not count
// its PDFs' pages (NotePDFPages); a step that reads a PDF waits for it.
func StartPDFium(log *slog.Logger) {
	go func() {
		start := time.Now()
		if _, err := pdfiumPool(); err != nil {
			log.Warn("PDFium did not start: PDF attachments cannot be read", "err", err)
			return
		}
		log.Debug("PDFium ready", "took", time.Since(start).Round(time.Millisecond))
	}()
}

// openPDFium starts PDFium. Compiling the module to machine code takes
// seconds (half a minute under the race detector), so the compiled code is
// kept between processes in cacheDir ("": none); should the cache be
// unusable (a directory that cannot be made, a full disk, a damaged file),
// PDFium is compiled afresh without it.
func openPDFium(cacheDir string) (pdfium.Pool, error) {
	if cacheDir != "" {
		if cache, err := wazero.NewCompilationCacheWithDir(cacheDir); err == nil {
			if pool, err := startPDFium(cache); err == nil {
				return pool, nil
			}
		}
	}
	pool, err := startPDFium(nil)
	if err != nil {
		return nil, fmt.Errorf("start PDFium: %w", err)
	}
	return pool, nil
}

// pdfCacheDir is where wazero keeps PDFium compiled for this machine, as
// Go keeps its build cache: pizza-bot/wazero under the user's cache
// directory ($XDG_CACHE_HOME or ~/.cache; /data/.cache in the container),
// made private to the user (0700), since it holds code the process runs.
// "" when the user has no cache directory.
func pdfCacheDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "pizza-bot", "wazero")
}

// startPDFium starts the pool of PDFium workers, compiling the module or
// reading it from cache (nil: none).
func startPDFium(cache wazero.CompilationCache) (pdfium.Pool, error) {
	rc := wazero.NewRuntimeConfig().
		WithCoreFeatures(api.CoreFeaturesV2 | experimental.CoreFeaturesExceptionHandling).
		WithMemoryLimitPages(pdfMemoryPages).
		WithCloseOnContextDone(true)
	if cache != nil {
		rc = rc.WithCompilationCache(cache)
	}
	return webassembly.Init(webassembly.Config{
		MinIdle:  0,
		MaxIdle:  pdfWorkers,
		MaxTotal: pdfWorkers,
		// No mounts: PDFium reads the document from memory and has no
		// business with the host's files.
		FSConfig: wazero.NewFSConfig(),
		Stdout:   io.Discard,
		Stderr:   io.Discard,
		// The features the bundled module needs (see webassembly.Init), a
		// memory ceiling, and interruption when a worker is killed.
		RuntimeConfig: rc,
	})
}

// PDFText is the text of some pages of a PDF.
type PDFText struct {
	// Pages is the document's page count.
	Pages int
	// First is the 1-based number of the first page in Text.
	First int
	// Text holds the text of pages First, First+1, ..., one string each.
	Text []string
}

// readPDF returns the page count of a PDF and the text of up to n pages
// starting at page first (1-based); n = 0 only counts the pages. It stops
// adding pages once their text passes maxBytes. Every failure is an error
// fit to show to the model or the user: ErrPDFEncrypted, ErrPDFBroken, or
// a limit.
func readPDF(ctx context.Context, content []byte, first, n, maxBytes int) (PDFText, error) {
	pool, err := pdfiumPool()
	if err != nil {
		return PDFText{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, pdfTimeout)
	defer cancel()
	inst, err := pool.GetInstanceWithContext(ctx)
	if err != nil {
		return PDFText{}, fmt.Errorf("no PDF reader free within %s: %w", pdfTimeout, err)
	}
	// Kill interrupts PDFium mid-call (WithCloseOnContextDone); an
	// instance is never reused after a PDF, killed or not.
	var killed sync.Once
	kill := func() { killed.Do(func() { _ = inst.Kill() }) }
	stop := context.AfterFunc(ctx, kill)
	defer func() {
		if stop() {
			killed.Do(func() { _ = inst.Close() })
		}
	}()
	out, err := extractPDF(inst, content, first, n, maxBytes)
	if ctx.Err() != nil {
		return PDFText{}, fmt.Errorf("reading the PDF took longer than %s: %w", pdfTimeout, ctx.Err())
	}
	return out, err
}

func extractPDF(inst pdfium.Pdfium, content []byte, first, n, maxBytes int) (PDFText, error) {
	doc, err := inst.OpenDocument(&requests.OpenDocument{File: &content})
	switch {
	case errors.Is(err, pdfiumerrors.ErrPassword) || errors.Is(err, pdfiumerrors.ErrSecurity):
		return PDFText{}, ErrPDFEncrypted
	case err != nil:
		return PDFText{}, ErrPDFBroken
	}
	defer inst.FPDF_CloseDocument(&requests.FPDF_CloseDocument{Document: doc.Document})
	count, err := inst.FPDF_GetPageCount(&requests.FPDF_GetPageCount{Document: doc.Document})
	if err != nil {
		return PDFText{}, ErrPDFBroken
	}
	out := PDFText{Pages: count.PageCount, First: first}
	size := 0
	for p := first; p < first+n && p <= out.Pages && (size < maxBytes || p == first); p++ {
		text, err := inst.GetPageText(&requests.GetPageText{Page: requests.Page{ByIndex: &requests.PageByIndex{Document: doc.Document, Index: p - 1}}})
		if err != nil {
			return PDFText{}, fmt.Errorf("page %d of the PDF cannot be read: %w", p, ErrPDFBroken)
		}
		t := strings.ReplaceAll(text.Text, "\r\n", "\n")
		size += len(t)
		out.Text = append(out.Text, t)
	}
	return out, nil
}

// NotePDFPages records the page count of the thread's PDFs that have none.
// It runs after the transaction that attached them has committed, since no
// transaction may wait on PDFium (a long transaction holds back every live
// update and a connection), and within the run start's request: it never
// waits for PDFium to compile (StartPDFium), and stops when ctx ends (the
// start's admission deadline). A PDF whose count is not recorded here (a
// webhook's, one attached while PDFium was starting, an error) gets it
// when it is first read.
func NotePDFPages(ctx context.Context, q db.Querier, log *slog.Logger, userID, threadID int64) {
	if !pdfPool.ready.Load() {
		return
	}
	as, err := db.ListAttachments(ctx, q, userID, threadID)
	if err != nil {
		if ctx.Err() == nil {
			log.WarnContext(ctx, "count PDF pages", "thread_id", threadID, "err", err)
		}
		return
	}
	for _, a := range as {
		if !a.IsPDF() || a.Pages != nil {
			continue
		}
		full, err := db.GetAttachment(ctx, q, userID, a.ID)
		if err != nil {
			continue
		}
		t, err := readPDF(ctx, full.Content, 1, 0, 0)
		if err != nil {
			continue // a broken or encrypted PDF says so when it is read
		}
		if err := db.SetAttachmentPages(ctx, q, userID, a.ID, t.Pages); err != nil && ctx.Err() == nil {
			log.WarnContext(ctx, "record PDF pages", "attachment_id", a.ID, "err", err)
		}
	}
}

// readPDFAttachment renders pages of a PDF attachment for the model, from
// page first (1-based) on, at most pdfPagesPerRead pages and about
// maxAttachmentRead bytes.
func readPDFAttachment(ctx context.Context, a db.Attachment, first int) (PDFText, string, error) {
	t, err := readPDF(ctx, a.Content, first, pdfPagesPerRead, maxAttachmentRead)
	switch {
	case errors.Is(err, ErrPDFEncrypted):
		return t, "", fmt.Errorf("%s is a PDF encrypted with a password: its text cannot be read; ask the user for a copy without a password", a.Name)
	case errors.Is(err, ErrPDFBroken):
		return t, "", fmt.Errorf("%s is not a valid PDF or is damaged, so its text cannot be read; ask the user to export it again", a.Name)
	case err != nil:
		return t, "", fmt.Errorf("%s could not be read: %w", a.Name, err)
	}
	if first > t.Pages {
		return t, "", fmt.Errorf("%s has %d pages: there is no page %d", a.Name, t.Pages, first)
	}
	last := t.First + len(t.Text) - 1
	var b strings.Builder
	fmt.Fprintf(&b, "%s (PDF, %d bytes, %d pages)", a.Name, a.Size, t.Pages)
	if t.First > 1 || last < t.Pages {
		fmt.Fprintf(&b, ", pages %d to %d", t.First, last)
	}
	b.WriteString(":\n")
	empty := true
	for i, text := range t.Text {
		text = strings.TrimSpace(text)
		empty = empty && text == ""
		if len(text) > maxAttachmentRead {
			// One huge page: cut at a character boundary.
			cut := maxAttachmentRead
			for cut > 0 && text[cut]&0xC0 == 0x80 {
				cut--
			}
			text = text[:cut] + "\n… (the rest of this page is cut)"
		}
		fmt.Fprintf(&b, "\n--- page %d ---\n%s\n", t.First+i, text)
	}
	if empty {
		b.WriteString("\n(These pages have no text layer: the PDF is probably scanned images, which cannot be read as text.)\n")
	}
	if last < t.Pages {
		fmt.Fprintf(&b, "\n… (pages %d to %d remain: read_attachment with page %d)", last+1, t.Pages, last+1)
	}
	return t, strings.TrimRight(b.String(), "\n"), nil
}
