package handlers_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pizzabot/db"
	"pizzabot/handlers"
)

func TestMemoryPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	th := b.thread(b.alice, "pizza research", db.StatusDone)
	if _, _, err := db.SaveMemory(b.ctx, b.pool, b.alice.ID, &th.ID, "Alice likes margherita with extra basil"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.SaveMemory(b.ctx, b.pool, b.bob.ID, nil, "Bob likes hawaii"); err != nil {
		t.Fatal(err)
	}

	// Add one, as the user.
	b.post("alice", "/memory", form("content", "  Reports go to #ops, in English.  ")).wantStatus(http.StatusSeeOther)
	page := b.get("alice", "/memory").wantStatus(http.StatusOK)
	got := page.texts("memory-row")
	if len(got) != 2 || !strings.Contains(got[0], "Written by you") || !strings.Contains(got[1], "Saved by an agent") {
		t.Fatalf("rows = %q", got)
	}
	contents := page.texts("memory-content")
	if contents[0] != "Reports go to #ops, in English." || contents[1] != "Alice likes margherita with extra basil" {
		t.Errorf("contents = %q", contents)
	}
	if strings.Contains(page.body(), "hawaii") {
		t.Error("Alice sees Bob's memory")
	}
	if n := page.all("memory-link"); len(n) != 1 || attr(n[0], "aria-current") != "page" {
		t.Error("the sidebar's Memory link is missing or not current")
	}

	// Search: full text, with stemming.
	found := b.get("alice", "/memory?q=liking+basil").wantStatus(http.StatusOK).texts("memory-content")
	if len(found) != 1 || !strings.Contains(found[0], "margherita") {
		t.Errorf("search = %q", found)
	}
	if found := b.get("alice", "/memory?q=hawaii").texts("memory-content"); len(found) != 0 {
		t.Errorf("Alice finds Bob's memory: %q", found)
	}

	// Edit, refused and accepted; delete.
	mine, _ := db.ListMemories(b.ctx, b.pool, b.alice.ID, 10)
	id := itoa(mine[1].ID)
	refused := b.post("alice", "/memory/"+id, form("content", "   ")).wantStatus(http.StatusUnprocessableEntity)
	if refused.text("field-error") != "the memory is empty" {
		t.Errorf("field error = %q", refused.text("field-error"))
	}
	b.post("alice", "/memory/"+id, form("content", "Alice likes marinara", "return", "/memory?q=basil")).wantStatus(http.StatusSeeOther)
	if m, _ := db.GetMemory(b.ctx, b.pool, b.alice.ID, mine[1].ID); m.Content != "Alice likes marinara" {
		t.Errorf("edited = %q", m.Content)
	}
	b.post("alice", "/memory/"+id+"/delete", nil).wantStatus(http.StatusSeeOther)
	if _, err := db.GetMemory(b.ctx, b.pool, b.alice.ID, mine[1].ID); err == nil {
		t.Error("memory not deleted")
	}

	// Bob can neither edit nor delete Alice's memories.
	other := itoa(mine[0].ID)
	b.post("bob", "/memory/"+other, form("content", "pwned")).wantStatus(http.StatusNotFound)
	b.post("bob", "/memory/"+other+"/delete", nil).wantStatus(http.StatusNotFound)
	if m, err := db.GetMemory(b.ctx, b.pool, b.alice.ID, mine[0].ID); err != nil || m.Content != "Reports go to #ops, in English." {
		t.Errorf("Alice's memory after Bob's attempts = %+v, %v", m, err)
	}
}

func TestAttachmentDownload(t *testing.T) {
	t.Parallel()
	b := setup(t)
	th := b.thread(b.alice, "with files", db.StatusDone)
	note, err := db.Attach(b.ctx, b.pool, b.alice.ID, th.ID, "../../Notes été.md", "text/plain", strings.NewReader("# Notes\n"))
	if err != nil {
		t.Fatal(err)
	}
	page, err := db.Attach(b.ctx, b.pool, b.alice.ID, th.ID, "page.html", "text/html", strings.NewReader("<html><script>alert(1)</script></html>"))
	if err != nil {
		t.Fatal(err)
	}
	if note.Name != "Notes été.md" || note.ContentType != "text/markdown; charset=utf-8" || page.ContentType != "text/html; charset=utf-8" {
		t.Errorf("stored as %q %q, %q", note.Name, note.ContentType, page.ContentType)
	}
	if _, err := db.Attach(b.ctx, b.pool, b.bob.ID, th.ID, "x.txt", "", strings.NewReader("x")); err == nil {
		t.Error("Bob attached a file to Alice's thread")
	}

	resp := b.get("alice", "/attachments/"+itoa(note.ID)).wantStatus(http.StatusOK)
	hdr := resp.Header()
	if resp.body() != "# Notes\n" {
		t.Errorf("body = %q", resp.body())
	}
	for k, want := range map[string]string{
		"Content-Type":            "text/markdown; charset=utf-8",
		"Content-Disposition":     "attachment; filename*=utf-8''Notes%20%C3%A9t%C3%A9.md",
		"X-Content-Type-Options":  "nosniff",
		"Content-Security-Policy": "default-src 'none'; sandbox",
	} {
		if hdr.Get(k) != want {
			t.Errorf("%s = %q, want %q", k, hdr.Get(k), want)
		}
	}
	if got := b.get("alice", "/attachments/"+itoa(page.ID)).wantStatus(http.StatusOK).Header().Get("Content-Type"); got != "application/octet-stream" {
		t.Errorf("an HTML attachment is sent as %q", got)
	}
	b.get("bob", "/attachments/"+itoa(note.ID)).wantStatus(http.StatusNotFound)
	b.get("alice", "/attachments/999999").wantStatus(http.StatusNotFound)
	b.get("", "/attachments/"+itoa(note.ID)).wantStatus(http.StatusUnauthorized)

	// Too large, refused before it is stored.
	_, err = db.Attach(b.ctx, b.pool, b.alice.ID, th.ID, "big.bin", "", strings.NewReader(strings.Repeat("x", db.MaxAttachmentSize+1)))
	var ae *db.AttachmentError
	if !asAttachmentError(err, &ae) || !ae.TooLarge {
		t.Errorf("a file over the limit = %v", err)
	}
}

func asAttachmentError(err error, target **db.AttachmentError) bool {
	ae, ok := err.(*db.AttachmentError)
	if ok {
		*target = ae
	}
	return ok
}

func TestGrantsPage(t *testing.T) {
	t.Parallel()
	dataRoot := t.TempDir()
	b := setup(t, func(d *handlers.Deps) { d.DataRoot = dataRoot })
	b.carol.IsAdmin = true
	if _, err := db.UpsertUser(b.ctx, b.pool, "https://idp.test", "carol", "carol@example.com", "Carol", true); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := db.SyncEnvGrants(b.ctx, b.pool, []db.GrantSpec{{Path: filepath.Join(dir)}}); err != nil {
		t.Fatal(err)
	}

	// Members do not see it.
	b.get("alice", "/settings/grants").wantStatus(http.StatusNotFound)
	b.post("alice", "/settings/grants", form("path", dir)).wantStatus(http.StatusNotFound)

	page := b.get("carol", "/settings/grants").wantStatus(http.StatusOK)
	if got := page.texts("grant-path"); len(got) != 1 || got[0] != dir || page.text("grant-env") == "" {
		t.Errorf("grants = %q", got)
	}
	if len(page.all("grant-revoke")) != 0 {
		t.Error("a grant from the environment can be revoked on the page")
	}

	sub := filepath.Join(dir, "out")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file.txt")
	os.WriteFile(file, []byte("x"), 0o644)
	for _, tt := range []struct{ path, want string }{
		{"relative/dir", "not an absolute path"},
		{"/", "whole file system"},
		{filepath.Join(dir, "missing"), "no such file"},
		{file, "not a directory"},
		{dataRoot, "server's data folder"},
		{dir, "granted already"},
	} {
		resp := b.post("carol", "/settings/grants", form("path", tt.path)).wantStatus(http.StatusUnprocessableEntity)
		if got := resp.text("field-error"); !strings.Contains(got, tt.want) {
			t.Errorf("grant %q: error %q, want %q", tt.path, got, tt.want)
		}
	}

	b.post("carol", "/settings/grants", form("path", sub+"/", "writable", "true")).wantStatus(http.StatusSeeOther)
	gs, err := db.ListGrants(b.ctx, b.pool)
	if err != nil || len(gs) != 2 || gs[1].Path != sub || !gs[1].Writable || gs[1].Source != db.GrantFromSettings {
		t.Fatalf("grants = %+v, %v", gs, err)
	}
	id := itoa(gs[1].ID)
	b.post("carol", "/settings/grants/"+id+"/writable", form("writable", "false")).wantStatus(http.StatusSeeOther)
	if gs, _ := db.ListGrants(b.ctx, b.pool); gs[1].Writable {
		t.Error("grant still writable")
	}
	// The environment's grant cannot be changed here.
	b.post("carol", "/settings/grants/"+itoa(gs[0].ID)+"/writable", form("writable", "true")).wantStatus(http.StatusNotFound)
	b.post("carol", "/settings/grants/"+itoa(gs[0].ID)+"/delete", nil).wantStatus(http.StatusNotFound)
	b.post("carol", "/settings/grants/"+id+"/delete", nil).wantStatus(http.StatusSeeOther)
	if gs, _ := db.ListGrants(b.ctx, b.pool); len(gs) != 1 {
		t.Errorf("grants after revoke = %+v", gs)
	}
	audit, err := db.ListAudit(b.ctx, b.pool, 10)
	if err != nil || len(audit) != 3 {
		t.Errorf("audit = %+v, %v", audit, err)
	}
}
