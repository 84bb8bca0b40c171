package handlers_test

import (
	"bytes"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/tools"
)

// upFile is a file sent in a multipart form.
type upFile struct{ name, ctype, body string }

// multipartBody encodes fields (key, value pairs, in order) and the files
// (in the field "files") as a browser does, returning the Content-Type.
func multipartBody(t *testing.T, kv []string, files []upFile) (string, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for i := 0; i+1 < len(kv); i += 2 {
		if err := mw.WriteField(kv[i], kv[i+1]); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="files"; filename="`+f.name+`"`)
		if f.ctype != "" {
			h.Set("Content-Type", f.ctype)
		}
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(f.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return mw.FormDataContentType(), &buf
}

// upload posts a multipart form to path as user.
func (b *bundle) upload(user, path string, kv []string, files []upFile, hdr ...map[string]string) *response {
	b.t.Helper()
	ctype, body := multipartBody(b.t, kv, files)
	req := httptest.NewRequest(http.MethodPost, path, body)
	req.Header.Set("Content-Type", ctype)
	if user != "" {
		req.Header.Set("X-Test-User", user)
	}
	for _, h := range hdr {
		for k, v := range h {
			req.Header.Set(k, v)
		}
	}
	rec := httptest.NewRecorder()
	b.srv.ServeHTTP(rec, req)
	return &response{t: b.t, ResponseRecorder: rec}
}

func (b *bundle) attachments(u db.User, threadID int64) []db.Attachment {
	b.t.Helper()
	as, err := db.ListAttachments(b.ctx, b.pool, u.ID, threadID)
	if err != nil {
		b.t.Fatal(err)
	}
	return as
}

// The round trip: two files uploaded with the prompt on the compose form,
// the agent reads one in a real run, the thread page lists both, the owner
// downloads them and another user gets a 404.
func TestComposeUploadRoundTrip(t *testing.T) {
	t.Parallel()
	// A fresh database: the first attachment is #1, which the scripted
	// model reads (it cannot learn the id from the prompt).
	b, _ := apiSetup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastToolResultContains: "Dough rests 48 hours."}, Replies: []scriptmodel.Reply{{Content: "The dough rests 48 hours."}}},
		{Match: scriptmodel.Match{LastRole: "user", LastUserContains: "Attached: notes.md (#1)"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "r1", Name: "read_attachment", Arguments: `{"id":1}`},
		}}}},
		{Replies: []scriptmodel.Reply{{Content: "I could not read the notes."}}},
	}}, tools.WorkspaceTools(tools.Workspace{})...)

	notes := "# Notes\n\nDough rests 48 hours.\n"
	csv := "topping,count\nbasil,3\n"
	res := b.upload("alice", "/threads", []string{"prompt", "Summarize my notes", "folder", "", "skill", ""}, []upFile{
		{name: "notes.md", ctype: "text/markdown", body: notes},
		{name: `C:\Users\alice\orders.csv`, ctype: "text/csv", body: csv},
	}).wantStatus(http.StatusSeeOther)
	id := parseID(t, strings.TrimPrefix(res.Header().Get("Location"), "/threads/"))

	as := b.attachments(b.alice, id)
	if len(as) != 2 || as[0].Name != "notes.md" || as[1].Name != "orders.csv" || as[0].ID != 1 {
		t.Fatalf("attachments = %+v, want notes.md (#1) and orders.csv", as)
	}
	if as[0].ContentType != "text/markdown; charset=utf-8" || as[1].ContentType != "text/csv; charset=utf-8" || as[1].Size != int64(len(csv)) {
		t.Errorf("attachments = %+v", as)
	}

	th := b.apiWait("alice", id, db.StatusDone)
	if th.Status != db.StatusDone {
		t.Fatalf("thread = %+v", th)
	}
	ms, err := db.ListMessages(b.ctx, b.pool, b.alice.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	var prompt, read, answer string
	for _, m := range ms {
		switch {
		case m.Role == db.RoleUser && prompt == "":
			prompt = m.Content
		case m.Role == db.RoleTool && m.ToolName == "read_attachment":
			read = m.Content
		case m.Role == db.RoleAssistant && m.Content != "":
			answer = m.Content
		}
	}
	if want := "Summarize my notes\n\nAttached: notes.md (#1)\nAttached: orders.csv (#2)"; prompt != want {
		t.Errorf("prompt = %q, want %q", prompt, want)
	}
	if !strings.Contains(read, notes) || answer != "The dough rests 48 hours." {
		t.Errorf("read_attachment = %q, answer = %q", read, answer)
	}

	// The thread page lists both, with download links.
	page := b.get("alice", "/threads/"+itoa(id)).wantStatus(http.StatusOK)
	items := page.all("attachment")
	if len(items) != 2 {
		t.Fatalf("attachments listed = %q", page.texts("attachment"))
	}
	for i, n := range items {
		links := findAll(n, func(n *htmlNode) bool { return n.Data == "a" })
		if len(links) != 1 || attr(links[0], "href") != "/attachments/"+itoa(as[i].ID) || text(links[0]) != as[i].Name {
			t.Errorf("attachment %d = %q", i, text(n))
		}
	}
	if got := page.texts("attachment")[1]; !strings.Contains(got, "orders.csv") || !strings.Contains(got, "22 B") || !strings.Contains(got, "text/csv") {
		t.Errorf("listed = %q, want name, size and type", got)
	}

	// The API shows them too.
	var detail struct {
		Attachments []struct {
			ID          int64  `json:"id"`
			Name        string `json:"name"`
			Size        int64  `json:"size"`
			ContentType string `json:"content_type"`
			URL         string `json:"url"`
		} `json:"attachments"`
	}
	b.apiGet("alice", "/api/v1/threads/"+itoa(id)).want(http.StatusOK).decode(&detail)
	if len(detail.Attachments) != 2 || detail.Attachments[0].URL != "/attachments/1" || detail.Attachments[0].Size != int64(len(notes)) {
		t.Errorf("API attachments = %+v", detail.Attachments)
	}

	// Downloadable by the owner, a 404 for anyone else.
	for i, want := range []string{notes, csv} {
		got := b.get("alice", "/attachments/"+itoa(as[i].ID)).wantStatus(http.StatusOK).body()
		if got != want {
			t.Errorf("download %d = %q, want %q", i, got, want)
		}
		b.get("bob", "/attachments/"+itoa(as[i].ID)).wantStatus(http.StatusNotFound)
	}
	b.get("bob", "/threads/"+itoa(id)).wantStatus(http.StatusNotFound)
}

// A refused upload creates nothing: a file over the limit or too many files
// come back on the form with the prompt kept and the error next to the
// field; a request over the total limit is a 413 page.
func TestComposeUploadRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big := strings.Repeat("x", db.MaxAttachmentSize+1)
	many := make([]upFile, db.MaxAttachmentsPerThread+1)
	for i := range many {
		many[i] = upFile{name: "f" + itoa(int64(i)) + ".txt", body: "x"}
	}
	chunk := strings.Repeat("y", 18<<20)
	tests := []struct {
		name    string
		files   []upFile
		hdr     map[string]string
		status  int
		wantErr string
	}{
		{"file too large", []upFile{{name: "ok.txt", body: "fine"}, {name: "big.bin", body: big}}, nil, http.StatusUnprocessableEntity, "big.bin is larger than 20 MB"},
		{"file too large, htmx", []upFile{{name: "big.bin", body: big}}, htmx, http.StatusUnprocessableEntity, "big.bin is larger than 20 MB"},
		{"too many files", many, nil, http.StatusUnprocessableEntity, "at most 50 files"},
		{"too large in all", []upFile{{name: "a.txt", body: chunk}, {name: "b.txt", body: chunk}, {name: "c.txt", body: chunk}}, nil, http.StatusRequestEntityTooLarge, "larger than 50 MB in all"},
	}
	for _, tt := range tests {
		var hdr []map[string]string
		if tt.hdr != nil {
			hdr = append(hdr, tt.hdr)
		}
		res := b.upload("alice", "/threads", []string{"prompt", "Keep this prompt"}, tt.files, hdr...).wantStatus(tt.status)
		if tt.status == http.StatusUnprocessableEntity {
			if got := res.text("field-error"); !strings.Contains(got, tt.wantErr) {
				t.Errorf("%s: field error = %q, want %q", tt.name, got, tt.wantErr)
			}
			if n := res.byID("files-error"); n == nil {
				t.Errorf("%s: the error is not next to the file field", tt.name)
			}
			if p := res.byID("prompt"); p == nil || strings.TrimSpace(text(p)) != "Keep this prompt" {
				t.Errorf("%s: the prompt was not kept", tt.name)
			}
			if !strings.Contains(res.text("files-again"), tt.files[0].name) {
				t.Errorf("%s: files-again = %q", tt.name, res.text("files-again"))
			}
		} else if !strings.Contains(res.body(), tt.wantErr) {
			t.Errorf("%s: page does not say %q", tt.name, tt.wantErr)
		}
	}
	ts, _, err := db.ListThreads(b.ctx, b.pool, db.OwnerAccess(b.alice.ID), db.ThreadFilter{Queue: db.QueueAll}, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM attachments`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if len(ts) != 0 || n != 0 {
		t.Errorf("after refused uploads: %d threads, %d attachments; want none", len(ts), n)
	}

	// The form without files still works, multipart or not.
	b.upload("alice", "/threads", []string{"prompt", "No files"}, nil).wantStatus(http.StatusSeeOther)
	b.post("alice", "/threads", form("prompt", "Urlencoded")).wantStatus(http.StatusSeeOther)
	if got := b.get("alice", "/threads/new").wantStatus(http.StatusOK); len(got.all("compose-files")) != 1 {
		t.Error("the compose form has no file input")
	}
}

// POST /api/v1/threads as multipart/form-data attaches the files and lists
// them in its answer; JSON still works.
func TestAPICreateThreadMultipart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.folder(b.alice, "Reports")
	ctype, body := multipartBody(t, []string{"prompt", "Read the report", "folder", "Reports"}, []upFile{
		{name: "report.json", ctype: "application/json", body: `{"sales":3}`},
		{name: "logo.png", ctype: "image/png", body: "\x89PNG\r\n\x1a\n0000"},
	})
	res := b.apiDo("alice", http.MethodPost, "/api/v1/threads", body.String(), map[string]string{"Content-Type": ctype}).want(http.StatusCreated)
	var got struct {
		ID          int64 `json:"id"`
		Folder      *struct{ Name string }
		Attachments []struct {
			ID          int64  `json:"id"`
			Name        string `json:"name"`
			Size        int64  `json:"size"`
			ContentType string `json:"content_type"`
			URL         string `json:"url"`
		} `json:"attachments"`
	}
	res.decode(&got)
	if got.Folder == nil || got.Folder.Name != "Reports" || len(got.Attachments) != 2 {
		t.Fatalf("answer = %s", res.Body.String())
	}
	a := got.Attachments[0]
	if a.Name != "report.json" || a.Size != 11 || a.ContentType != "application/json" || a.URL != "/attachments/"+itoa(a.ID) {
		t.Errorf("attachment = %+v", a)
	}
	if got.Attachments[1].ContentType != "image/png" {
		t.Errorf("image = %+v", got.Attachments[1])
	}
	b.get("alice", got.Attachments[0].URL).wantStatus(http.StatusOK)
	b.get("bob", got.Attachments[0].URL).wantStatus(http.StatusNotFound)

	// Refusals: an unknown field, files in another field, a file too large.
	ctype, body = multipartBody(t, []string{"prompt", "x", "colour", "red"}, nil)
	b.apiDo("alice", http.MethodPost, "/api/v1/threads", body.String(), map[string]string{"Content-Type": ctype}).wantError(http.StatusBadRequest, `unknown field "colour"`)
	ctype, body = multipartBody(t, []string{"prompt", "x"}, []upFile{{name: "big.bin", body: strings.Repeat("z", db.MaxAttachmentSize+1)}})
	b.apiDo("alice", http.MethodPost, "/api/v1/threads", body.String(), map[string]string{"Content-Type": ctype}).wantError(http.StatusRequestEntityTooLarge, "big.bin")
	ctype, body = multipartBody(t, []string{"skill", "nope"}, []upFile{{name: "a.txt", body: "a"}})
	b.apiDo("alice", http.MethodPost, "/api/v1/threads", body.String(), map[string]string{"Content-Type": ctype}).wantError(http.StatusBadRequest, "prompt")
	var n int
	if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM attachments`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("attachments after refusals = %d, want the first request's 2", n)
	}

	// JSON as before, with an empty list of attachments.
	res = b.apiPost("alice", "/api/v1/threads", map[string]any{"prompt": "No files"}).want(http.StatusCreated)
	if !strings.Contains(res.Body.String(), `"attachments":[]`) {
		t.Errorf("JSON create = %s", res.Body.String())
	}
}

// A webhook's body is kept as an attachment of the thread it starts.
func TestWebhookBodyAttached(t *testing.T) {
	t.Parallel()
	b := triggerSetup(t)
	path, secret := b.createWebhook("alice", "researcher", map[string]string{"signature": "standard"})
	body := `{"deal":"ACME renewal"}`
	a := b.hook(http.MethodPost, path, body, standardHeaders(secret, "msg_1", time.Now().Unix(), body)).want(http.StatusAccepted).answer()
	if a.ThreadID == nil {
		t.Fatalf("answer = %+v", a)
	}
	as := b.attachments(b.alice, *a.ThreadID)
	if len(as) != 1 || as[0].Name != "webhook-body.json" || as[0].ContentType != "application/json" {
		t.Fatalf("attachments = %+v", as)
	}
	if got := b.get("alice", "/attachments/"+itoa(as[0].ID)).wantStatus(http.StatusOK).body(); got != body {
		t.Errorf("download = %q", got)
	}
}
