package handlers_test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"pizzabot/db"
)

// searchSetup makes alice's threads with conversations in three languages,
// and one of bob's that every query would match.
func searchSetup(t *testing.T) *bundle {
	t.Helper()
	b := setup(t)
	say := func(th db.Thread, role, content string) {
		t.Helper()
		if _, err := db.AddMessage(b.ctx, b.pool, db.Message{ThreadID: th.ID, Role: role, Content: content}); err != nil {
			t.Fatal(err)
		}
	}
	en := b.thread(b.alice, "Supplier contracts", db.StatusDone)
	say(en, db.RoleUser, "When is the renewal of the flour contract due?")
	say(en, db.RoleAssistant, "The contracts renew on 1 March & the supplier is <b>late</b>.")
	ru := b.thread(b.alice, "Поставщики", db.StatusDone)
	say(ru, db.RoleUser, "Проверь сроки продления договоров.")
	zh := b.thread(b.alice, "中文合同", "")
	say(zh, db.RoleUser, "请检查续约合同已经签署。")
	hook, err := db.CreateThread(b.ctx, b.pool, db.NewThread{UserID: b.alice.ID, Title: "Renewal from a webhook", TriggerKind: db.TriggerWebhook})
	if err != nil {
		t.Fatal(err)
	}
	_ = hook
	bobs := b.thread(b.bob, "Bob's renewal contract", db.StatusDone)
	say(bobs, db.RoleUser, "renewal contract договор 续约合同")
	return b
}

// The inbox page searches with ?q=, shows snippets and keeps the query in
// the search box, the links and the filters.
func TestSearchPage(t *testing.T) {
	t.Parallel()
	b := searchSetup(t)
	tests := []struct {
		path string
		want []string
	}{
		{"/inbox/all?q=renewal", []string{"Renewal from a webhook", "Supplier contracts"}},
		{"/inbox/all?q=" + url.QueryEscape(`"flour contract"`), []string{"Supplier contracts"}},
		{"/inbox/all?q=renew*", []string{"Renewal from a webhook", "Supplier contracts"}},
		{"/inbox/all?q=" + url.QueryEscape("договор"), []string{"Поставщики"}},
		{"/inbox/all?q=" + url.QueryEscape("合同"), []string{"中文合同"}},
		{"/inbox/all?q=renewal&trigger=webhook", []string{"Renewal from a webhook"}},
		{"/inbox/unread?q=renewal", []string{"Supplier contracts"}},
		{"/inbox/all?q=bob", nil},
		{"/inbox/all?q=+&trigger=", []string{"Renewal from a webhook", "中文合同", "Поставщики", "Supplier contracts"}},
	}
	for _, tt := range tests {
		r := b.get("alice", tt.path).wantStatus(http.StatusOK)
		if got := r.texts("thread-title"); !slices.Equal(got, tt.want) {
			t.Errorf("%s: threads = %q, want %q", tt.path, got, tt.want)
		}
	}

	r := b.get("alice", "/inbox/all?q=supplier").wantStatus(http.StatusOK)
	box := r.all("search-input")
	if len(box) != 1 || attr(box[0], "value") != "supplier" || attr(box[0], "name") != "q" {
		t.Fatalf("search box = %v", box)
	}
	if !strings.Contains(r.title(), "supplier") {
		t.Errorf("page title = %q", r.title())
	}
	// The snippet is escaped, with the matches in <mark>.
	body := r.body()
	if !strings.Contains(body, `&amp; the <mark>supplier</mark> is`) || strings.Contains(body, "<b>late") {
		t.Errorf("snippet not found or not escaped in:\n%s", r.text("thread-snippet"))
	}
	if got := r.texts("thread-snippet"); len(got) != 1 {
		t.Errorf("snippets = %q", got)
	}

	// Nothing found: the empty state offers to clear the search, keeping
	// the filter.
	r = b.get("alice", "/inbox/all?q=pineapple&trigger=manual").wantStatus(http.StatusOK)
	if !strings.Contains(r.text("empty-state"), "No threads match “pineapple”") {
		t.Errorf("empty state = %q", r.text("empty-state"))
	}
	if clear := r.all("clear-search"); len(clear) != 1 || attr(clear[0], "href") != "/inbox/all?trigger=manual" {
		t.Errorf("clear link = %v", clear)
	}

	// A boosted form submission lands on the canonical URL.
	r = b.get("alice", "/inbox/all?q=renewal&trigger=&folder=", boosted).wantStatus(http.StatusOK)
	if got := r.Header().Get("HX-Push-Url"); got != "/inbox/all?q=renewal" {
		t.Errorf("HX-Push-Url = %q", got)
	}
	b.get("alice", "/inbox/all?q="+strings.Repeat("x", 501)).wantStatus(http.StatusBadRequest)
}

// Pages of a search keep the query in the "Older threads" link.
func TestSearchPagePagination(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 51 {
		th := b.thread(b.alice, "Renewal", db.StatusDone)
		_ = th
	}
	b.thread(b.alice, "Other", db.StatusDone)
	r := b.get("alice", "/inbox/all?q=renewal").wantStatus(http.StatusOK)
	more := r.all("load-more")
	if len(r.all("thread-row")) != 50 || len(more) != 1 {
		t.Fatalf("rows = %d, load-more = %d", len(r.all("thread-row")), len(more))
	}
	next := attr(more[0], "href")
	u, _ := url.Parse(next)
	if u.Query().Get("q") != "renewal" || u.Query().Get("after") == "" {
		t.Fatalf("next page = %q", next)
	}
	r = b.get("alice", next).wantStatus(http.StatusOK)
	if got := r.texts("thread-title"); !slices.Equal(got, []string{"Renewal"}) {
		t.Errorf("second page = %q", got)
	}
}

// GET /api/v1/threads?q= searches, with snippets, only the user's threads.
func TestSearchAPI(t *testing.T) {
	t.Parallel()
	b := searchSetup(t)
	type hit struct {
		Title   string  `json:"title"`
		Snippet *string `json:"snippet"`
	}
	var list struct {
		Threads []hit `json:"threads"`
	}
	b.apiGet("alice", "/api/v1/threads?q=supplier").want(http.StatusOK).decode(&list)
	if len(list.Threads) != 1 || list.Threads[0].Snippet == nil ||
		!strings.Contains(*list.Threads[0].Snippet, "&amp; the <mark>supplier</mark>") {
		t.Fatalf("search = %+v", list.Threads)
	}
	for q, want := range map[string][]string{
		"renewal":                 {"Renewal from a webhook", "Supplier contracts"},
		`"renewal of the flour"`:  {"Supplier contracts"},
		"договоров":               {"Поставщики"},
		"续约":                      {"中文合同"},
		"bob":                     nil,
		"renewal&queue=unread":    {"Supplier contracts"},
		"renewal&trigger=webhook": {"Renewal from a webhook"},
	} {
		list.Threads = nil
		path := "/api/v1/threads?q=" + url.QueryEscape(q)
		if strings.Contains(q, "&") {
			path = "/api/v1/threads?q=" + q
		}
		b.apiGet("alice", path).want(http.StatusOK).decode(&list)
		var got []string
		for _, th := range list.Threads {
			got = append(got, th.Title)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("q=%s: %q, want %q", q, got, want)
		}
	}
	// Outside a search there is no snippet.
	list.Threads = nil
	b.apiGet("alice", "/api/v1/threads").want(http.StatusOK).decode(&list)
	if len(list.Threads) == 0 || list.Threads[0].Snippet != nil {
		t.Errorf("listing = %+v", list.Threads)
	}
	b.apiGet("alice", "/api/v1/threads?q="+strings.Repeat("x", 501)).wantError(http.StatusBadRequest, "q is longer")
}

// A live stream on a search's results adds a changed thread only when it
// matches the search, with its snippet, and takes away one that does not.
func TestSearchLiveRows(t *testing.T) {
	t.Parallel()
	b := setupLive(t)
	stream := b.open("alice", since(b)+"&list="+url.QueryEscape("/inbox/all?q=renewal"), "")

	match, err := db.CreateThread(b.ctx, b.pool, db.NewThread{UserID: b.alice.ID, Title: "Renewal of the lease"})
	if err != nil {
		t.Fatal(err)
	}
	rows, _ := find(stream.until(), "rows")
	if !strings.Contains(rows.data, `id="thread-`+itoa(match.ID)+`"`) || strings.Contains(rows.data, `data-live="remove"`) {
		t.Errorf("a matching thread is not added: rows = %q", rows.data)
	}

	other, err := db.CreateThread(b.ctx, b.pool, db.NewThread{UserID: b.alice.ID, Title: "Oven check"})
	if err != nil {
		t.Fatal(err)
	}
	rows, _ = find(stream.until(), "rows")
	if strings.Contains(rows.data, "Oven check") || !strings.Contains(rows.data, `data-live="remove"`) || !strings.Contains(rows.data, itoa(other.ID)) {
		t.Errorf("a thread that does not match is shown: rows = %q", rows.data)
	}

	// A message that matches brings its snippet.
	if _, err := db.AddMessage(b.ctx, b.pool, db.Message{ThreadID: match.ID, Role: db.RoleUser, Content: "The renewal is due in May."}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.EndRun(b.ctx, b.pool, match.ID, db.StatusDone, ""); err != nil {
		t.Fatal(err)
	}
	// The message and the end of the run may come in one batch or two.
	for range 2 {
		if rows, _ = find(stream.until(), "rows"); rows.data != "" {
			break
		}
	}
	if !strings.Contains(rows.data, "The <mark>renewal</mark> is due in May") {
		t.Errorf("rows = %q, want the snippet", rows.data)
	}
}
