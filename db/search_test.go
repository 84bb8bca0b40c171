package db_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/db"
	"pizzabot/db/dbtest"
)

// searchBundle is a database with two users and a way to make threads.
type searchBundle struct {
	t          *testing.T
	pool       *pgxpool.Pool
	alice, bob db.User
	titles     map[int64]string
}

func searchSetup(t *testing.T) *searchBundle {
	t.Helper()
	ctx := context.Background()
	b := &searchBundle{t: t, pool: dbtest.New(t), titles: map[int64]string{}}
	var err error
	if b.alice, err = db.UpsertUser(ctx, b.pool, "t", "alice", "", "", false); err != nil {
		t.Fatal(err)
	}
	if b.bob, err = db.UpsertUser(ctx, b.pool, "t", "bob", "", "", false); err != nil {
		t.Fatal(err)
	}
	return b
}

// thread makes one of user's threads with a title and messages (user,
// assistant, tool, in turn) and attachments by name.
func (b *searchBundle) thread(user db.User, title string, messages []string, attachments ...string) db.Thread {
	b.t.Helper()
	ctx := context.Background()
	th, err := db.CreateThread(ctx, b.pool, db.NewThread{UserID: user.ID, Title: title})
	if err != nil {
		b.t.Fatal(err)
	}
	roles := []string{db.RoleUser, db.RoleAssistant, db.RoleTool}
	for i, m := range messages {
		msg := db.Message{ThreadID: th.ID, Role: roles[i%3], Content: m}
		if msg.Role == db.RoleTool {
			msg.ToolCallID, msg.ToolName = "c1", "fetch"
		}
		if _, err := db.AddMessage(ctx, b.pool, msg); err != nil {
			b.t.Fatal(err)
		}
	}
	for _, name := range attachments {
		if _, err := db.Attach(ctx, b.pool, user.ID, th.ID, name, "", strings.NewReader("x")); err != nil {
			b.t.Fatal(err)
		}
	}
	b.titles[th.ID] = title
	return th
}

// search returns the titles of the user's threads matching query, and
// their snippets as HTML.
func (b *searchBundle) search(user db.User, query string, f db.ThreadFilter) ([]string, []string) {
	b.t.Helper()
	if f.Queue == "" {
		f.Queue = db.QueueAll
	}
	f.Search = db.ParseSearch(query)
	ts, _, err := db.ListThreads(context.Background(), b.pool, db.OwnerAccess(user.ID), f, nil, 50)
	if err != nil {
		b.t.Fatalf("search %q: %v", query, err)
	}
	var titles, snippets []string
	for _, th := range ts {
		titles = append(titles, th.Title)
		snippets = append(snippets, th.Snippet.HTML())
	}
	slices.Sort(titles)
	return titles, snippets
}

func TestSearchLanguagesPhrasesPrefixes(t *testing.T) {
	t.Parallel()
	b := searchSetup(t)
	b.thread(b.alice, "Supplier contract", []string{
		"Check when the renewal of the flour contract is due.",
		"The contracts renew on 1 March; the supplier was renewing late last year.",
	})
	b.thread(b.alice, "Договор с поставщиком", []string{
		"Проверь сроки продления договоров с поставщиками.",
		"Договор продлевается первого марта. Ёлки заказаны.",
	})
	b.thread(b.alice, "续约", []string{
		"请检查面粉供应商的续约合同。",
		"续约合同已经签署，三月一日生效。",
	})
	b.thread(b.alice, "Oven maintenance", []string{
		"Schedule the oven check",
		"Done: the oven is booked for Monday.",
		`{"status":"ok","technician":"Margherita Rossi"}`,
	}, "invoice_march-2026.pdf")
	b.thread(b.alice, "Contract of renewal for flour", []string{"flour"})
	b.thread(b.bob, "Bob's renewal contract", []string{"renewal of the contract, договор, 续约合同"})

	tests := []struct {
		query string
		want  []string
	}{
		// English stemming, across title, prompt and answer.
		{"renewal", []string{"Contract of renewal for flour", "Supplier contract"}},
		{"renewing", []string{"Contract of renewal for flour", "Supplier contract"}},
		{"contracts flour", []string{"Contract of renewal for flour", "Supplier contract"}},
		// A phrase must be in one piece of text, in order.
		{`"renewal of the flour contract"`, []string{"Supplier contract"}},
		{`"flour contract"`, []string{"Supplier contract"}},
		{`"contract flour"`, nil},
		// Prefixes.
		{"renew*", []string{"Contract of renewal for flour", "Supplier contract"}},
		{"techn*", []string{"Oven maintenance"}},
		{"Margher*", []string{"Oven maintenance"}},
		// Russian stemming, ё folded into е.
		{"договор", []string{"Договор с поставщиком"}},
		{"продления", []string{"Договор с поставщиком"}},
		{"поставщик", []string{"Договор с поставщиком"}},
		{"елки", []string{"Договор с поставщиком"}},
		{"догов*", []string{"Договор с поставщиком"}},
		// Chinese by substring: two characters, more, one, a title.
		{"合同", []string{"续约"}},
		{"续约合同", []string{"续约"}},
		{"面粉供应商", []string{"续约"}},
		{"签", []string{"续约"}},
		{"续约", []string{"续约"}},
		{"合约", nil},
		// Tool results and attachment names.
		{"technician", []string{"Oven maintenance"}},
		{"invoice", []string{"Oven maintenance"}},
		{"march", []string{"Oven maintenance", "Supplier contract"}},
		// Nothing to search, or nothing found.
		{"...", nil},
		{"pineapple", nil},
	}
	for _, tt := range tests {
		got, _ := b.search(b.alice, tt.query, db.ThreadFilter{})
		if !slices.Equal(got, tt.want) {
			t.Errorf("search %q = %q, want %q", tt.query, got, tt.want)
		}
	}
}

// Another user's threads are never found, whatever the query.
func TestSearchOnlyTheUsersThreads(t *testing.T) {
	t.Parallel()
	b := searchSetup(t)
	b.thread(b.alice, "Alice's pizza", []string{"margherita"})
	b.thread(b.bob, "Bob's secret pizza", []string{"margherita secret 秘密"}, "secret.txt")
	for _, q := range []string{"pizza", "secret", "margherita", "秘密", "secret.txt", "bob*"} {
		got, _ := b.search(b.alice, q, db.ThreadFilter{})
		for _, title := range got {
			if strings.Contains(title, "Bob") {
				t.Errorf("alice's search %q found %q", q, title)
			}
		}
	}
	if got, _ := b.search(b.bob, "secret", db.ThreadFilter{}); !slices.Equal(got, []string{"Bob's secret pizza"}) {
		t.Errorf("bob's search = %q", got)
	}
}

// Search narrows a queue, a folder and a trigger like any filter, and
// pages with the same cursor.
func TestSearchCombinesWithFiltersAndPages(t *testing.T) {
	t.Parallel()
	b := searchSetup(t)
	ctx := context.Background()
	folder, err := db.CreateFolder(ctx, b.pool, b.alice.ID, "Suppliers")
	if err != nil {
		t.Fatal(err)
	}
	inFolder := b.thread(b.alice, "Renewal in folder", nil)
	if _, err := db.MoveThreads(ctx, b.pool, b.alice.ID, []int64{inFolder.ID}, &folder.ID); err != nil {
		t.Fatal(err)
	}
	unread := b.thread(b.alice, "Renewal unread", nil)
	if err := db.SetThreadStatus(ctx, b.pool, unread.ID, db.StatusDone, ""); err != nil {
		t.Fatal(err)
	}
	b.thread(b.alice, "Renewal plain", nil)
	b.thread(b.alice, "Unrelated", nil)

	if got, _ := b.search(b.alice, "renewal", db.ThreadFilter{FolderID: folder.ID}); !slices.Equal(got, []string{"Renewal in folder"}) {
		t.Errorf("in folder = %q", got)
	}
	if got, _ := b.search(b.alice, "renewal", db.ThreadFilter{Queue: db.QueueUnread}); !slices.Equal(got, []string{"Renewal unread"}) {
		t.Errorf("unread = %q", got)
	}
	if got, _ := b.search(b.alice, "renewal", db.ThreadFilter{Trigger: db.TriggerWebhook}); got != nil {
		t.Errorf("webhook = %q", got)
	}

	var seen []string
	var after *db.Cursor
	for range 5 {
		ts, next, err := db.ListThreads(ctx, b.pool, db.OwnerAccess(b.alice.ID), db.ThreadFilter{Queue: db.QueueAll, Search: db.ParseSearch("renewal")}, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, th := range ts {
			seen = append(seen, th.Title)
		}
		if after = next; next == nil {
			break
		}
	}
	slices.Sort(seen)
	if want := []string{"Renewal in folder", "Renewal plain", "Renewal unread"}; !slices.Equal(seen, want) {
		t.Errorf("pages = %q, want %q", seen, want)
	}
}

// A snippet shows the matching words in <mark>, escaped, from the first
// message that matches; else the attachment's name.
func TestSearchSnippets(t *testing.T) {
	t.Parallel()
	b := searchSetup(t)
	b.thread(b.alice, "Contract", []string{
		"Hello there.",
		"The <b>renewal</b> is due & the supplier is renewing <script>alert(1)</script> late.",
		"Margins stay <5% while costs > 10% &amp; rising.",
	})
	b.thread(b.alice, "中文", []string{"前面有很多文字。续约合同已经签署，三月一日生效。后面也有文字。"})
	b.thread(b.alice, "Files", nil, "renewal_terms.pdf")

	check := func(query, want string) {
		t.Helper()
		_, snippets := b.search(b.alice, query, db.ThreadFilter{})
		if len(snippets) != 1 || !strings.Contains(snippets[0], want) {
			t.Errorf("snippet of %q = %q, want %q in it", query, snippets, want)
		}
		for _, s := range snippets {
			if strings.Contains(s, "<script") || strings.Contains(s, "<b>") {
				t.Errorf("snippet of %q is not escaped: %q", query, s)
			}
		}
	}
	check("supplier renewal", "<mark>renewal</mark> is due &amp; the <mark>supplier</mark> is <mark>renewing</mark>")
	check("margins", "<mark>Margins</mark> stay &lt;5% while costs &gt; 10% &amp;amp; rising")
	check("合同", "续约<mark>合同</mark>已经签署")
	check("terms", "Attachment: <mark>renewal_terms.pdf</mark>")
}

func TestParseSearch(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, all, any string }{
		{`renewal`, `'renewal'`, `'renewal'`},
		{`Renew* "flour contract"`, `'renew':* & 'flour' & 'contract'`, `'renew':* | 'flour' | 'contract'`},
		{`it's O'Brien`, `'it' & 's' & 'o' & 'brien'`, `'it' | 's' | 'o' | 'brien'`},
		{`续约合同`, `'续约' & '约合' & '合同'`, `'续约' | '约合' | '合同'`},
		{`签`, `'签':*`, `'签':*`},
		{`'); DROP TABLE threads; --`, `'drop' & 'table' & 'threads'`, `'drop' | 'table' | 'threads'`},
		{`   `, ``, ``},
	}
	for _, tt := range tests {
		q := db.ParseSearch(tt.in)
		if got := db.SearchQueryAll(q); got != tt.all {
			t.Errorf("ParseSearch(%q) all = %q, want %q", tt.in, got, tt.all)
		}
		if got := db.SearchQueryAny(q); got != tt.any {
			t.Errorf("ParseSearch(%q) any = %q, want %q", tt.in, got, tt.any)
		}
	}
}

// Every plan gives the same answer: a common word whose matches are all
// older than the newest threads (the walk finds none, the index path
// sorts them all), and the same word in a small queue (the walk sees the
// whole queue).
func TestSearchPlans(t *testing.T) {
	t.Parallel()
	b := searchSetup(t)
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, `
		INSERT INTO threads (user_id, title, status, updated_at)
		SELECT $1, CASE WHEN i <= 1100 THEN 'Renewal ' || i ELSE 'Other ' || i END,
		       CASE WHEN i IN (5, 7) THEN 'waiting' ELSE 'done' END,
		       now() - make_interval(secs => 10000 - i)
		FROM generate_series(1, 6200) AS i`, b.alice.ID)
	if err != nil {
		t.Fatal(err)
	}
	ts, next, err := db.ListThreads(ctx, b.pool, db.OwnerAccess(b.alice.ID), db.ThreadFilter{Queue: db.QueueAll, Search: db.ParseSearch("renewal")}, nil, 50)
	if err != nil || len(ts) != 50 || next == nil || ts[0].Title != "Renewal 1100" || ts[49].Title != "Renewal 1051" {
		t.Fatalf("all: %d threads from %q, next %v, %v", len(ts), ts[0].Title, next, err)
	}
	ts, next, err = db.ListThreads(ctx, b.pool, db.OwnerAccess(b.alice.ID), db.ThreadFilter{Queue: db.QueueAction, Search: db.ParseSearch("renewal")}, nil, 50)
	if err != nil || len(ts) != 2 || next != nil || ts[0].Title != "Renewal 7" || ts[1].Title != "Renewal 5" {
		t.Fatalf("action: %+v, next %v, %v", ts, next, err)
	}
}

// pendingWords reports how many of the thread's messages wait to join its
// search document, and whether the document holds word.
func (b *searchBundle) pendingWords(th db.Thread, word string) (pending int, indexed bool) {
	b.t.Helper()
	err := b.pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM search_pending WHERE thread_id = $1),
		(SELECT doc @@ to_tsquery('pizza_search'::regconfig, $2) FROM thread_search WHERE thread_id = $1)`,
		th.ID, word).Scan(&pending, &indexed)
	if err != nil {
		b.t.Fatal(err)
	}
	return pending, indexed
}

// A message's words wait beside the document rather than being added in
// its insert, and a search folds them in before it reads: it finds a
// message the moment it is committed. The fold makes the same document
// that adding each message on its insert made.
func TestSearchFoldsPendingMessages(t *testing.T) {
	t.Parallel()
	b := searchSetup(t)
	ctx := context.Background()
	th := b.thread(b.alice, "Oven", []string{"preheat the pizza oven", "", "stone reached 400 degrees"})
	if pending, indexed := b.pendingWords(th, "stone"); pending != 2 || indexed {
		t.Fatalf("before a search: %d pending (want 2: the empty message has no words), indexed %v", pending, indexed)
	}
	if titles, _ := b.search(b.alice, "stone degrees", db.ThreadFilter{}); !slices.Equal(titles, []string{"Oven"}) {
		t.Fatalf("search found %v", titles)
	}
	if pending, indexed := b.pendingWords(th, "stone"); pending != 0 || !indexed {
		t.Fatalf("after a search: %d pending, indexed %v", pending, indexed)
	}
	var same bool
	err := b.pool.QueryRow(ctx, `WITH words AS (
			SELECT to_tsvector('pizza_search'::regconfig, search_text('Oven')) AS v
			UNION ALL SELECT search FROM messages WHERE thread_id = $1)
		SELECT (SELECT doc FROM thread_search WHERE thread_id = $1) =
			(SELECT tsvector_agg FROM (SELECT string_agg((strip(v) || search_pairs(v))::text, ' ')::tsvector AS tsvector_agg FROM words) x)`,
		th.ID).Scan(&same)
	if err != nil || !same {
		t.Fatalf("the folded document differs from the words of the title and messages (%v)", err)
	}

	// The job's fold, with no search: the same.
	th2 := b.thread(b.bob, "Dough", []string{"hydration at seventy percent"})
	if n, err := db.FoldPendingSearch(ctx, b.pool, 100); err != nil || n != 1 {
		t.Fatalf("fold: %d, %v", n, err)
	}
	if pending, indexed := b.pendingWords(th2, "hydration"); pending != 0 || !indexed {
		t.Fatalf("after the job's fold: %d pending, indexed %v", pending, indexed)
	}

	// A document at its bound takes no more words; the message is still
	// taken off the pending list (and found by its thread's phrase check).
	if _, err := b.pool.Exec(ctx, `UPDATE thread_search SET bytes = 799990 WHERE thread_id = $1`, th2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := db.AddMessage(ctx, b.pool, db.Message{ThreadID: th2.ID, Role: db.RoleUser, Content: "fermentation overnight"}); err != nil {
		t.Fatal(err)
	}
	if n, err := db.FoldPendingSearch(ctx, b.pool, 100); err != nil || n != 1 {
		t.Fatalf("fold at the bound: %d, %v", n, err)
	}
	if pending, indexed := b.pendingWords(th2, "fermentation"); pending != 0 || indexed {
		t.Fatalf("at the bound: %d pending, indexed %v (want not indexed)", pending, indexed)
	}
}

// A search waits for a fold in progress (the job's) to commit, and then
// sees what it folded: it never reads a document while the words of a
// committed message are neither pending nor in it.
func TestSearchWaitsForAFoldInProgress(t *testing.T) {
	t.Parallel()
	b := searchSetup(t)
	ctx := context.Background()
	b.thread(b.alice, "Oven", []string{"the stone cracked"})
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if n, err := db.FoldPendingSearch(ctx, tx, 100); err != nil || n != 1 {
		t.Fatalf("fold: %d, %v", n, err)
	}
	found := make(chan []string, 1)
	go func() {
		ts, _, err := db.ListThreads(ctx, b.pool, db.OwnerAccess(b.alice.ID), db.ThreadFilter{Queue: db.QueueAll, Search: db.ParseSearch("cracked")}, nil, 50)
		if err != nil {
			t.Error(err)
		}
		var titles []string
		for _, th := range ts {
			titles = append(titles, th.Title)
		}
		found <- titles
	}()
	select {
	case titles := <-found:
		t.Fatalf("the search answered %v while the fold was not committed", titles)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if titles := <-found; !slices.Equal(titles, []string{"Oven"}) {
		t.Fatalf("after the fold committed the search found %v", titles)
	}
}
