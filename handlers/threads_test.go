package handlers_test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"pizzabot/db"
)

func TestCompose(t *testing.T) {
	t.Parallel()
	b := setup(t)
	research := b.folder(b.alice, "Research")

	t.Run("form", func(t *testing.T) {
		r := b.get("alice", "/threads/new?folder="+itoa(research.ID)).wantStatus(http.StatusOK)
		if len(r.all("compose-form")) != 1 {
			t.Fatal("no compose form")
		}
		sel := r.byID("compose-folder")
		var chosen string
		for _, o := range findAll(sel, func(n *htmlNode) bool { return n.Data == "option" && hasAttr(n, "selected") }) {
			chosen = attr(o, "value")
		}
		if chosen != itoa(research.ID) {
			t.Errorf("chosen folder = %q, want %d", chosen, research.ID)
		}
	})

	tests := []struct {
		name       string
		prompt     string
		folder     string
		wantTitle  string
		wantFolder *int64
	}{
		{"plain", "Summarize the news\nFocus on Go releases.", "", "Summarize the news", nil},
		{"into a folder", "  Find papers on RAG  ", itoa(research.ID), "Find papers on RAG", &research.ID},
		{"CRLF from the browser", "Line one\r\nLine two", "", "Line one", nil},
		{"exactly 100 KB", strings.Repeat("a", 100<<10), "", strings.Repeat("a", 79) + "…", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := b.post("alice", "/threads", form("prompt", tt.prompt, "folder", tt.folder)).wantStatus(http.StatusSeeOther)
			loc := r.Header().Get("Location")
			id, ok := strings.CutPrefix(loc, "/threads/")
			if !ok {
				t.Fatalf("Location = %q, want /threads/ID", loc)
			}
			th := b.get("alice", loc).wantStatus(http.StatusOK)
			if got := th.text("thread-heading"); got != tt.wantTitle {
				t.Errorf("title = %q, want %q", got, tt.wantTitle)
			}
			if len(th.all("running-indicator")) != 1 {
				t.Error("a new thread shows no running indicator")
			}
			tid := parseID(t, id)
			got := b.reload(b.alice, tid)
			if got.Status != db.StatusRunning || got.TriggerKind != db.TriggerManual {
				t.Errorf("status, trigger = %s, %s; want running, manual", got.Status, got.TriggerKind)
			}
			if !equalPtr(got.FolderID, tt.wantFolder) {
				t.Errorf("folder = %v, want %v", deref(got.FolderID), deref(tt.wantFolder))
			}
			msgs, err := db.ListMessages(b.ctx, b.pool, b.alice.ID, tid)
			if err != nil {
				t.Fatal(err)
			}
			want := strings.TrimSpace(strings.ReplaceAll(tt.prompt, "\r\n", "\n"))
			if len(msgs) != 1 || msgs[0].Role != db.RoleUser || msgs[0].Content != want {
				t.Errorf("messages = %+v, want one user message with the prompt", msgs)
			}
		})
	}

	t.Run("htmx is sent to the thread", func(t *testing.T) {
		r := b.post("alice", "/threads", form("prompt", "Via htmx"), htmx)
		if !strings.HasPrefix(r.Header().Get("HX-Location"), "/threads/") {
			t.Errorf("HX-Location = %q, want /threads/ID", r.Header().Get("HX-Location"))
		}
	})

	t.Run("refused", func(t *testing.T) {
		bobs := b.folder(b.bob, "Bob's")
		before := countThreads(t, b, b.alice)
		tests := []struct {
			name, prompt, folder, wantError string
		}{
			{"empty", " \n\t ", "", "Write what the agent should do."},
			{"too long", strings.Repeat("é", 60<<10), "", "The prompt is 120 KB; the limit is 100 KB."},
			{"another user's folder", "Sneak in", itoa(bobs.ID), "That folder does not exist any more. Choose another."},
		}
		for _, tt := range tests {
			for _, hdr := range []map[string]string{nil, htmx} {
				r := b.post("alice", "/threads", form("prompt", tt.prompt, "folder", tt.folder), hdr).wantStatus(http.StatusUnprocessableEntity)
				if got := r.text("field-error"); got != tt.wantError {
					t.Errorf("%s: error = %q, want %q", tt.name, got, tt.wantError)
				}
				if got, want := text(r.byID("prompt")), strings.Join(strings.Fields(tt.prompt), " "); got != want {
					t.Errorf("%s: the prompt was not kept: got %.40q, want %.40q", tt.name, got, want)
				}
				if hdr != nil && !r.isFragment() {
					t.Errorf("%s: htmx got a whole page, want the form", tt.name)
				}
				if hdr == nil && len(r.all("count-all")) != 1 {
					t.Errorf("%s: the page has no sidebar", tt.name)
				}
			}
		}
		// Past the form limit the body is not read at all.
		r := b.post("alice", "/threads", form("prompt", strings.Repeat("x", 2<<20))).wantStatus(http.StatusRequestEntityTooLarge)
		if len(r.all("error-page")) != 1 {
			t.Error("an oversized form gets no error page")
		}
		if after := countThreads(t, b, b.alice); after != before {
			t.Errorf("refused forms created %d threads", after-before)
		}
	})
}

// TestComposeRefusalNextToItsField: a refusal of the runtime comes back on
// the form next to the field it names (refusal.Error.Field), with what was
// typed kept: a skill gone since the form was shown next to the skill, a
// file over the storage quota next to the files.
func TestComposeRefusalNextToItsField(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := db.SetUserQuota(b.ctx, b.pool, 1000); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		fields    []string
		files     []upFile
		wantField string
		wantError string
	}{
		{"a skill that is not there", []string{"prompt", "Keep this prompt", "skill", "nope"}, nil,
			"skill-error", `There is no skill named "nope".`},
		{"a file over the quota", []string{"prompt", "Keep this prompt"}, []upFile{{name: "big.txt", body: strings.Repeat("b", 2000)}},
			"files-error", "storage is full"},
	}
	for _, tt := range tests {
		r := b.upload("alice", "/threads", tt.fields, tt.files).wantStatus(http.StatusUnprocessableEntity)
		if errs := r.texts("field-error"); len(errs) != 1 {
			t.Errorf("%s: field errors = %q, want one", tt.name, errs)
		}
		if n := r.byID(tt.wantField); n == nil || !strings.Contains(text(n), tt.wantError) {
			t.Errorf("%s: #%s = %v, want it to say %q; field errors %q", tt.name, tt.wantField, n != nil, tt.wantError, r.texts("field-error"))
		}
		if p := r.byID("prompt"); p == nil || strings.TrimSpace(text(p)) != "Keep this prompt" {
			t.Errorf("%s: the prompt was not kept", tt.name)
		}
	}
	if n := countThreads(t, b, b.alice); n != 0 {
		t.Errorf("refused forms created %d threads", n)
	}
}

func TestOpeningAThreadMarksItRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	th := b.thread(b.alice, "Finished", db.StatusDone)
	if !th.Unread {
		t.Fatal("a finished thread is not unread")
	}
	r := b.get("alice", "/threads/"+itoa(th.ID)).wantStatus(http.StatusOK)
	if b.reload(b.alice, th.ID).Unread {
		t.Error("the thread is still unread after opening it")
	}
	if got := r.count("count-unread"); got != 0 {
		t.Errorf("the page's unread count = %d, want 0", got)
	}
	if len(r.all("thread-unread")) != 0 {
		t.Error("the page shows the thread as unread")
	}
}

func TestThreadPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	th := b.thread(b.alice, "Research brief", db.StatusWaiting)
	add := func(m db.Message) {
		m.ThreadID = th.ID
		if _, err := db.AddMessage(b.ctx, b.pool, m); err != nil {
			t.Fatal(err)
		}
	}
	add(db.Message{Role: db.RoleSystem, Content: "You are a researcher."})
	add(db.Message{Role: db.RoleUser, Content: "Find <script>alert(1)</script> sources"})
	add(db.Message{Role: db.RoleAssistant, Content: "Looking.", ToolCalls: []db.ToolCall{
		{ID: "c1", Name: "search", Arguments: `{"q":"rag"}`},
		{ID: "c2", Name: "fetch", Arguments: `{not json`},
	}})
	add(db.Message{Role: db.RoleTool, ToolCallID: "c1", ToolName: "search", Content: "3 results"})
	add(db.Message{Role: db.RoleTool, ToolCallID: "c2", ToolName: "fetch", Content: "connection refused", IsError: true})
	add(db.Message{Role: db.RoleTool, ToolCallID: "gone", ToolName: "orphan", Content: "a result without its call"})
	add(db.Message{Role: db.RoleAssistant, Content: "Here is the brief."})

	r := b.get("alice", "/threads/"+itoa(th.ID)).wantStatus(http.StatusOK)
	var roles []string
	for _, n := range findAll(r.doc(), func(n *htmlNode) bool { return strings.HasPrefix(attr(n, "data-testid"), "message-") }) {
		roles = append(roles, attr(n, "data-role"))
	}
	if want := []string{"system", "user", "assistant", "assistant"}; !slices.Equal(roles, want) {
		t.Errorf("messages = %v, want %v", roles, want)
	}
	if strings.Contains(r.body(), "<script>alert(1)") {
		t.Error("message content is not escaped")
	}
	if got := r.texts("tool-arguments"); !slices.Equal(got, []string{`{ "q": "rag" }`, `{not json`}) {
		t.Errorf("arguments = %q", got)
	}
	if got := len(r.all("tool-call")); got != 2 {
		t.Errorf("%d tool calls, want 2", got)
	}
	if got := len(r.all("tool-result")); got != 3 {
		t.Errorf("%d tool results, want 3 (two under their calls, one alone)", got)
	}
	if got := len(r.all("tool-error")); got != 1 {
		t.Errorf("%d results marked as errors, want 1", got)
	}
	if len(r.all("waiting-indicator")) != 1 || len(r.all("running-indicator")) != 0 {
		t.Error("a waiting thread should show that it waits, not that it runs")
	}
	if got, want := r.title(), "(1) Research brief · Pizza Bot"; got != want {
		t.Errorf("title = %q, want %q", got, want)
	}
	if got := r.text("thread-trigger"); !strings.HasPrefix(got, "Manual, started") {
		t.Errorf("trigger = %q", got)
	}

	t.Run("back goes to the listing the user came from", func(t *testing.T) {
		r := b.get("alice", "/threads/"+itoa(th.ID), map[string]string{"Referer": "http://example.com/inbox/action?trigger=manual"})
		if got := attr(r.all("back-link")[0], "href"); got != "/inbox/action?trigger=manual" {
			t.Errorf("back = %q", got)
		}
		r = b.get("alice", "/threads/"+itoa(th.ID), map[string]string{"Referer": "https://evil.example/inbox/all"})
		if got := attr(r.all("back-link")[0], "href"); got != "/inbox/all" {
			t.Errorf("back from another site = %q, want /inbox/all", got)
		}
	})

	t.Run("missing", func(t *testing.T) {
		for _, path := range []string{"/threads/999999", "/threads/abc", "/threads/-1"} {
			b.get("alice", path).wantStatus(http.StatusNotFound)
		}
	})
}

func TestThreadActions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	research := b.folder(b.alice, "Research")
	tests := []struct {
		action   string
		form     url.Values
		wantLoc  string
		wantFunc func(db.Thread) bool
	}{
		{"read", nil, "/threads/ID", func(t db.Thread) bool { return !t.Unread }},
		{"unread", form("return", "/inbox/unread"), "/inbox/unread", func(t db.Thread) bool { return t.Unread }},
		{"archive", form("return", "/inbox/all?folder=1"), "/inbox/all?folder=1", func(t db.Thread) bool { return t.Archived && !t.Unread }},
		{"archive", form("return", "https://evil.example/"), "/inbox/all", func(t db.Thread) bool { return t.Archived }},
		{"archive", form("return", "//evil.example/"), "/inbox/all", func(t db.Thread) bool { return t.Archived }},
		{"unarchive", nil, "/threads/ID", func(t db.Thread) bool { return !t.Archived }},
		{"move", form("folder", itoa(research.ID)), "/threads/ID", func(t db.Thread) bool { return t.FolderID != nil && *t.FolderID == research.ID }},
		{"move", form("folder", "none"), "/threads/ID", func(t db.Thread) bool { return t.FolderID == nil }},
	}
	for _, tt := range tests {
		th := b.thread(b.alice, "Finished", db.StatusDone)
		if tt.action == "unarchive" {
			if _, err := db.SetArchived(b.ctx, b.pool, b.alice.ID, []int64{th.ID}, true); err != nil {
				t.Fatal(err)
			}
		}
		if tt.form == nil {
			tt.form = url.Values{}
		}
		r := b.post("alice", "/threads/"+itoa(th.ID)+"/"+tt.action, tt.form).wantStatus(http.StatusSeeOther)
		wantLoc := strings.ReplaceAll(tt.wantLoc, "ID", itoa(th.ID))
		if got := r.Header().Get("Location"); got != wantLoc {
			t.Errorf("%s %v: Location = %q, want %q", tt.action, tt.form, got, wantLoc)
		}
		if got := b.reload(b.alice, th.ID); !tt.wantFunc(got) {
			t.Errorf("%s %v: thread is %+v", tt.action, tt.form, got)
		}
	}

	t.Run("htmx", func(t *testing.T) {
		th := b.thread(b.alice, "Finished", db.StatusDone)
		path := "/threads/" + itoa(th.ID)
		r := b.post("alice", path+"/move", form("folder", itoa(research.ID), "return", "/inbox/all"), htmx).wantStatus(http.StatusOK)
		if !r.isFragment() || r.byID("thread-header") == nil {
			t.Fatal("move did not answer the thread header")
		}
		if got := r.text("thread-folder"); got != "Research" {
			t.Errorf("folder tag = %q, want Research", got)
		}
		if sb := r.byID("sidebar"); sb == nil || attr(sb, "hx-swap-oob") != "true" {
			t.Error("move did not refresh the sidebar out of band")
		}
		r = b.post("alice", path+"/archive", form("return", "/inbox/unread"), htmx).wantStatus(http.StatusNoContent)
		if got := r.Header().Get("HX-Location"); got != "/inbox/unread" {
			t.Errorf("archive: HX-Location = %q, want /inbox/unread", got)
		}
		r = b.post("alice", path+"/move", form("folder", ""), htmx).wantStatus(http.StatusBadRequest)
		if r.Header().Get("HX-Retarget") != "#flash" || r.text("flash") == "" {
			t.Error("a refused htmx action does not show in the flash area")
		}
	})
}

func TestBulkActions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	research := b.folder(b.alice, "Research")
	a := b.thread(b.alice, "a", db.StatusDone)
	c := b.thread(b.alice, "c", db.StatusDone)
	w := b.thread(b.alice, "w", db.StatusWaiting)
	bobs := b.thread(b.bob, "bob's", db.StatusDone)
	ids := func(ts ...db.Thread) []string {
		var out []string
		for _, t := range ts {
			out = append(out, itoa(t.ID))
		}
		return out
	}
	bulk := func(action string, ts []db.Thread, extra ...string) url.Values {
		f := form(append([]string{"action", action, "return", "/inbox/unread"}, extra...)...)
		f["ids"] = ids(ts...)
		return f
	}

	r := b.post("alice", "/threads/bulk", bulk("read", []db.Thread{a, c})).wantStatus(http.StatusSeeOther)
	if got := r.Header().Get("Location"); got != "/inbox/unread" {
		t.Errorf("Location = %q, want /inbox/unread", got)
	}
	if got := b.get("alice", "/inbox/unread").threadIDs(); !slices.Equal(got, []int64{w.ID}) {
		t.Errorf("unread after mark read = %v, want [%d]", got, w.ID)
	}

	b.post("alice", "/threads/bulk", bulk("unread", []db.Thread{a})).wantStatus(http.StatusSeeOther)
	if !b.reload(b.alice, a.ID).Unread {
		t.Error("mark unread left the thread read")
	}

	b.post("alice", "/threads/bulk", bulk("move", []db.Thread{a, w}, "folder", itoa(research.ID))).wantStatus(http.StatusSeeOther)
	unread := b.get("alice", "/inbox/unread")
	if got := unread.threadIDs(); !slices.Equal(got, []int64{w.ID, a.ID}) {
		t.Errorf("unread after moving into a folder = %v, want [%d %d]: a folder never hides a thread", got, w.ID, a.ID)
	}
	if got := b.get("alice", "/inbox/action").threadIDs(); !slices.Equal(got, []int64{w.ID}) {
		t.Errorf("action after moving into a folder = %v, want [%d]", got, w.ID)
	}
	if got := b.get("alice", "/inbox/all?folder="+itoa(research.ID)).threadIDs(); !slices.Equal(got, []int64{w.ID, a.ID}) {
		t.Errorf("folder = %v, want [%d %d]", got, w.ID, a.ID)
	}
	if got := unread.text("folder-unread"); got != "2" {
		t.Errorf("folder's unread count = %q, want 2", got)
	}

	t.Run("htmx answers the listing in its new state", func(t *testing.T) {
		r := b.post("alice", "/threads/bulk", bulk("archive", []db.Thread{a}), htmx).wantStatus(http.StatusOK)
		if !r.isFragment() || r.byID("thread-list") == nil {
			t.Fatal("bulk did not answer the thread list")
		}
		if got := r.threadIDs(); !slices.Equal(got, []int64{w.ID}) {
			t.Errorf("listed = %v, want [%d]", got, w.ID)
		}
		if got := r.count("count-unread"); got != 1 {
			t.Errorf("unread count = %d, want 1", got)
		}
		if got := r.text("flash"); !strings.HasPrefix(got, "Archived 1 thread.") {
			t.Errorf("flash = %q", got)
		}
		if th := b.reload(b.alice, a.ID); !th.Archived || th.Unread {
			t.Errorf("archived thread = %+v", th)
		}
	})

	t.Run("take out of the folder", func(t *testing.T) {
		b.post("alice", "/threads/bulk", bulk("move", []db.Thread{a, w}, "folder", "none")).wantStatus(http.StatusSeeOther)
		if th := b.reload(b.alice, w.ID); th.FolderID != nil {
			t.Errorf("folder = %d, want none", *th.FolderID)
		}
	})

	t.Run("refused", func(t *testing.T) {
		bobsFolder := b.folder(b.bob, "Bob's")
		tests := []struct {
			name string
			form url.Values
			want int
		}{
			{"nothing selected", form("action", "read"), http.StatusBadRequest},
			{"unknown action", bulk("explode", []db.Thread{a}), http.StatusBadRequest},
			{"move without a folder", bulk("move", []db.Thread{a}), http.StatusBadRequest},
			{"bad id", form("action", "read", "ids", "x"), http.StatusBadRequest},
			{"into another user's folder", bulk("move", []db.Thread{a}, "folder", itoa(bobsFolder.ID)), http.StatusNotFound},
		}
		for _, tt := range tests {
			if r := b.post("alice", "/threads/bulk", tt.form); r.Code != tt.want {
				t.Errorf("%s: status = %d, want %d", tt.name, r.Code, tt.want)
			}
			r := b.post("alice", "/threads/bulk", tt.form, htmx)
			if r.Code != tt.want || r.Header().Get("HX-Retarget") != "#flash" || r.text("flash") == "" {
				t.Errorf("%s with htmx: status %d, HX-Retarget %q, flash %q", tt.name, r.Code, r.Header().Get("HX-Retarget"), r.text("flash"))
			}
		}
		if th := b.reload(b.alice, a.ID); th.FolderID != nil {
			t.Error("a refused move moved the thread")
		}
	})

	t.Run("another user's ids are skipped", func(t *testing.T) {
		b.post("alice", "/threads/bulk", bulk("archive", []db.Thread{bobs})).wantStatus(http.StatusSeeOther)
		if th := b.reload(b.bob, bobs.ID); th.Archived || !th.Unread {
			t.Errorf("alice changed bob's thread: %+v", th)
		}
	})
}

func countThreads(t *testing.T, b *bundle, u db.User) int64 {
	t.Helper()
	c, err := db.CountThreads(b.ctx, b.pool, db.OwnerAccess(u.ID))
	if err != nil {
		t.Fatal(err)
	}
	return c.All
}

func equalPtr(a, b *int64) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}
