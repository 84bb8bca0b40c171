package db

import (
	"cmp"
	"context"
	"fmt"
	"html"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Search finds a user's threads by their title, prompts, answers, tool
// results and attachment names (migration 0016 keeps the indexes).
//
// The query language is a mail client's: words are all required, "quoted
// words" are a phrase, word* is a prefix. English and Russian words match
// their other forms (renewal finds renewing, договор finds договоров).
// Chinese and Japanese, written without spaces, match by substring: the
// database stores each run of such characters as overlapping bigrams (see
// search_text in the migration), and a query's run is the phrase of its
// bigrams.

// Search limits: a longer query is cut, not refused.
const (
	maxSearchTerms = 16
	maxSearchWord  = 100
	// MaxSearchQuery is the longest query read, in bytes.
	MaxSearchQuery = 500
)

// SearchQuery is a parsed search query.
type SearchQuery struct {
	// Raw is the query as typed, trimmed.
	Raw string
	// all requires every operand (phrases reduced to their words): the
	// thread documents have no positions.
	all string
	// any accepts any operand: it picks the message a snippet comes from.
	any string
	// phrases are checked against single messages, titles and names, whose
	// vectors keep positions.
	phrases []string
	// pairs are the phrases' words, for search_pairs_query: the index then
	// finds the threads holding each word next to the one after it.
	pairs []string
	// cjk are the query's runs of Chinese or Japanese characters, which
	// snippets highlight themselves (ts_headline cannot: it sees a run as
	// one word).
	cjk []string
}

// Empty reports whether the query has nothing to search for.
func (q SearchQuery) Empty() bool { return q.all == "" }

// ParseSearch parses what the user typed into the search box.
func ParseSearch(s string) SearchQuery {
	s = strings.TrimSpace(s)
	if len(s) > MaxSearchQuery {
		s = s[:MaxSearchQuery]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	q := SearchQuery{Raw: s}
	var all, any []string
	for _, term := range splitTerms(s) {
		if len(all) >= maxSearchTerms {
			break
		}
		ops := term.operands(&q.cjk)
		if len(ops) == 0 {
			continue
		}
		all = append(all, ops...)
		any = append(any, ops...)
		if len(ops) > 1 {
			q.phrases = append(q.phrases, strings.Join(ops, " <-> "))
			var words []string
			for _, op := range ops {
				if !strings.HasSuffix(op, ":*") { // a prefix has no whole word to pair
					words = append(words, strings.Trim(op, "'"))
				}
			}
			if len(words) > 1 {
				q.pairs = append(q.pairs, strings.Join(words, " "))
			}
		}
	}
	q.all = strings.Join(all, " & ")
	q.any = strings.Join(any, " | ")
	return q
}

// searchTerm is a word of the query, or a quoted phrase.
type searchTerm struct {
	text   string
	prefix bool // ended with *
}

// splitTerms splits a query on spaces, keeping "quoted phrases" whole. An
// unclosed quote runs to the end.
func splitTerms(s string) []searchTerm {
	var terms []searchTerm
	for s != "" {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
		if s == "" {
			break
		}
		if s[0] == '"' {
			phrase, rest, _ := strings.Cut(s[1:], `"`)
			terms = append(terms, searchTerm{text: phrase})
			s = rest
			continue
		}
		end := strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || r == '"' })
		if end < 0 {
			end = len(s)
		}
		word := s[:end]
		s = s[end:]
		t := searchTerm{text: strings.TrimRight(word, "*")}
		t.prefix = t.text != word
		terms = append(terms, t)
	}
	return terms
}

// operands turns a term into tsquery operands, in order: a phrase when
// more than one. Punctuation separates words; only letters, digits and
// marks reach the query, so no operand needs escaping. CJK runs are
// appended to cjk.
func (t searchTerm) operands(cjk *[]string) []string {
	var ops []string
	var word []rune
	flush := func(last bool) {
		if len(word) == 0 {
			return
		}
		w := string(word)
		word = word[:0]
		if isCJK([]rune(w)[0]) {
			*cjk = append(*cjk, w)
			rs := []rune(w)
			if len(rs) == 1 {
				// One character: the start of a bigram, or a run's last
				// character, which the database stores alone.
				ops = append(ops, quoteOperand(w)+":*")
				return
			}
			for i := 0; i+1 < len(rs); i++ {
				ops = append(ops, quoteOperand(string(rs[i:i+2])))
			}
			return
		}
		if len([]rune(w)) > maxSearchWord {
			w = string([]rune(w)[:maxSearchWord])
		}
		op := quoteOperand(strings.ToLower(w))
		if last && t.prefix {
			op += ":*"
		}
		ops = append(ops, op)
	}
	rs := []rune(t.text)
	for i, r := range rs {
		if !(unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)) {
			flush(false)
			continue
		}
		if len(word) > 0 && isCJK(word[0]) != isCJK(r) {
			flush(false)
		}
		word = append(word, r)
		if i == len(rs)-1 {
			flush(true)
		}
	}
	flush(true)
	return ops
}

func quoteOperand(w string) string { return "'" + w + "'" }

// isCJK reports whether r is written without spaces between words: the
// ranges search_text in migration 0016 expands (kana and CJK ideographs).
func isCJK(r rune) bool {
	return (r >= 0x3040 && r <= 0x30ff) || (r >= 0x3400 && r <= 0x4dbf) ||
		(r >= 0x4e00 && r <= 0x9fff) || (r >= 0xf900 && r <= 0xfaff)
}

// Snippet is a short piece of a matching thread's text, the matches marked.
type Snippet []SnippetPart

// SnippetPart is plain text, or a match when Mark is set.
type SnippetPart struct {
	Text string
	Mark bool
}

// HTML renders the snippet as escaped HTML with the matches in <mark>.
func (s Snippet) HTML() string {
	var b strings.Builder
	for _, p := range s {
		if p.Mark {
			b.WriteString("<mark>" + html.EscapeString(p.Text) + "</mark>")
		} else {
			b.WriteString(html.EscapeString(p.Text))
		}
	}
	return b.String()
}

// Highlight markers: ts_headline wraps matches in them; they are removed
// from the text first so that a message cannot forge a mark.
const (
	markStart = "\x02"
	markEnd   = "\x03"
)

// headlineOptions keep a snippet to a line or two.
const headlineOptions = "StartSel=\x02, StopSel=\x03, MaxWords=24, MinWords=10, ShortWord=2, MaxFragments=2, FragmentDelimiter=\" … \""

// snippetFrom the SQL's results: the headline of the first matching
// message, else the name of the first matching attachment.
func (q SearchQuery) snippet(headline, source, attachment string) Snippet {
	switch {
	case headline != "":
		if len(q.cjk) > 0 && !strings.Contains(headline, markStart) {
			if s := cjkSnippet(source, q.cjk); s != nil {
				return s
			}
		}
		return parseMarks(headline)
	case attachment != "":
		s := Snippet{{Text: "Attachment: "}}
		if m := cjkSnippet(attachment, q.cjk); m != nil {
			return append(s, m...)
		}
		return append(s, SnippetPart{Text: attachment, Mark: true})
	}
	return nil
}

// parseMarks splits ts_headline's output at the markers.
func parseMarks(h string) Snippet {
	var s Snippet
	h = strings.Join(strings.Fields(h), " ")
	for h != "" {
		before, rest, found := strings.Cut(h, markStart)
		if before != "" {
			s = append(s, SnippetPart{Text: before})
		}
		if !found {
			break
		}
		m, after, _ := strings.Cut(rest, markEnd)
		if m != "" {
			s = append(s, SnippetPart{Text: m, Mark: true})
		}
		h = after
	}
	return s
}

// cjkSnippet cuts a window of text around the first of the runs it holds
// and marks every run in it; nil when none is there.
func cjkSnippet(text string, runs []string) Snippet {
	const around = 40 // characters each side
	text = strings.Join(strings.Fields(text), " ")
	first := -1
	for _, r := range runs {
		if i := strings.Index(text, r); i >= 0 && (first < 0 || i < first) {
			first = i
		}
	}
	if first < 0 {
		return nil
	}
	rs := []rune(text)
	at := utf8.RuneCountInString(text[:first])
	from, to := max(0, at-around), min(len(rs), at+around+len([]rune(runs[0])))
	window := string(rs[from:to])
	var s Snippet
	if from > 0 {
		s = append(s, SnippetPart{Text: "… "})
	}
	for window != "" {
		best, bestRun := -1, ""
		for _, r := range runs {
			if i := strings.Index(window, r); i >= 0 && (best < 0 || i < best || (i == best && len(r) > len(bestRun))) {
				best, bestRun = i, r
			}
		}
		if best < 0 {
			s = append(s, SnippetPart{Text: window})
			break
		}
		if best > 0 {
			s = append(s, SnippetPart{Text: window[:best]})
		}
		s = append(s, SnippetPart{Text: bestRun, Mark: true})
		window = window[best+len(bestRun):]
	}
	if to < len(rs) {
		s = append(s, SnippetPart{Text: " …"})
	}
	return s
}

// matchSQL is the condition on thread_search's doc: every word, and every
// phrase's word pairs. arg adds a query argument.
func (q SearchQuery) matchSQL(arg func(any) string) string {
	m := "to_tsquery('pizza_search'::regconfig, " + arg(q.all) + ")"
	for _, p := range q.pairs {
		m += " && search_pairs_query(" + arg(p) + ")"
	}
	return "doc @@ (" + m + ")"
}

// Search plans. searchRare is the most matching documents the GIN index
// path sorts; searchWalk is how many of the newest threads (of the
// listing) the walk looks through, one document lookup each, stopping at a
// full page.
const (
	searchRare = 1000
	searchWalk = 5000
)

// searchThreads is ListThreads with a search query: the user's threads
// that match, newest activity first, each with a snippet. where and args
// hold ListThreads' conditions on threads t (the user id is $1).
//
// The plan is chosen here, not by the planner, whose estimates for several
// words multiply their frequencies as if independent and are far off
// (phrases make it worse). A count capped at searchRare+1 tells rare from
// common: up to searchRare matching threads are read from the GIN index
// and sorted; a more common query fills its page within the newest
// threads, found by walking them in order. Only when that walk comes back
// short of a page with threads left unseen (the matches are old) are all
// the matches sorted.
func searchThreads(ctx context.Context, q Querier, sq SearchQuery, docs func(arg func(any) string) string, where []string, args []any, limit int) ([]Thread, error) {
	var n int
	countArgs := []any{pgx.QueryExecModeExec}
	arg := func(v any) string {
		countArgs = append(countArgs, v)
		return "$" + strconv.Itoa(len(countArgs)-1)
	}
	err := q.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM thread_search
		WHERE `+docs(arg)+` AND `+sq.matchSQL(arg)+` LIMIT `+strconv.Itoa(searchRare+1)+`) x`, countArgs...).Scan(&n)
	if err != nil {
		return nil, fmt.Errorf("search threads: %w", err)
	}
	if n == 0 {
		return nil, nil
	}
	if n > searchRare {
		ts, err := searchRun(ctx, q, sq, docs, where, args, limit, true)
		if err != nil || len(ts) == limit {
			return ts, err
		}
		// A short page is the whole answer when the walk saw every thread
		// of the listing (a small queue or folder): an index-only count.
		var listed int
		err = q.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM threads t WHERE `+strings.Join(where, " AND ")+`
			LIMIT `+strconv.Itoa(searchWalk)+`) x`, args...).Scan(&listed)
		if err != nil || listed < searchWalk {
			return ts, err
		}
	}
	return searchRun(ctx, q, sq, docs, where, args, limit, false)
}

// threadColumnsOnly are threadColumns without the folder's name and the
// summary, which searchRun adds once the page is known.
var threadColumnsOnly = strings.Replace(strings.Replace(threadColumns, "coalesce(f.name, '') AS folder_name,", "", 1),
	", "+summaryColumns, "", 1)

// pageSummaryColumns are summaryColumns over searchRun's page.
var pageSummaryColumns = strings.NewReplacer("t.id", "page.id", "t.status", "page.status").Replace(summaryColumns)

func searchRun(ctx context.Context, q Querier, sq SearchQuery, docs func(arg func(any) string) string, where []string, args []any, limit int, walk bool) ([]Thread, error) {
	args = slices.Clone(args)
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	tsq := func(p string) string { return "to_tsquery('pizza_search'::regconfig, " + p + ")" }
	match := sq.matchSQL(arg)
	// Subqueries with LIMIT or OFFSET are not flattened: each check below
	// runs per thread, in the order of the threads, and only on those that
	// passed the checks before it.
	var from, cond []string
	if walk {
		from = append(from, `(SELECT * FROM threads t WHERE `+strings.Join(where, " AND ")+`
			ORDER BY t.updated_at DESC, t.id DESC LIMIT `+strconv.Itoa(searchWalk)+`) t
			CROSS JOIN LATERAL (SELECT 1 FROM thread_search s WHERE s.thread_id = t.id AND s.`+match+` OFFSET 0) d`)
	} else {
		// A lookup by key per match: the planner would hash-join a scan of
		// all the user's threads.
		from = append(from, `(SELECT thread_id FROM thread_search WHERE `+docs(arg)+` AND `+match+` OFFSET 0) d
			CROSS JOIN LATERAL (SELECT * FROM threads t WHERE t.id = d.thread_id AND `+strings.Join(where, " AND ")+` OFFSET 0) t`)
	}
	for i, ph := range sq.phrases {
		// The documents have no positions: a phrase must be in one message,
		// the title or one attachment's name.
		p, n := tsq(arg(ph)), strconv.Itoa(i)
		from = append(from, `LEFT JOIN LATERAL (SELECT true AS ok FROM messages m
				WHERE m.thread_id = t.id AND m.search @@ `+p+` LIMIT 1) pm`+n+` ON true
			LEFT JOIN LATERAL (SELECT true AS ok FROM attachments a
				WHERE a.thread_id = t.id AND search_name(a.name) @@ `+p+` LIMIT 1) pa`+n+` ON true`)
		cond = append(cond, `(pm`+n+`.ok OR pa`+n+`.ok OR to_tsvector('pizza_search'::regconfig, search_text(t.title)) @@ `+p+`)`)
	}
	if len(cond) == 0 {
		cond = append(cond, "true")
	}
	anyQ := tsq(arg(sq.any))
	opts := arg(headlineOptions)
	sql := `SELECT page.*, coalesce(f.name, '') AS folder_name, ` + pageSummaryColumns + `,
			coalesce(ts_headline('pizza_search'::regconfig, sm.src, ` + anyQ + `, ` + opts + `), '') AS headline,
			coalesce(sm.src, '') AS source, coalesce(sa.name, '') AS attachment
		FROM (SELECT ` + threadColumnsOnly + ` FROM ` + strings.Join(from, "\n") + `
			WHERE ` + strings.Join(cond, " AND ") + `
			ORDER BY t.updated_at DESC, t.id DESC LIMIT ` + arg(limit) + `) page
		LEFT JOIN folders f ON f.id = page.folder_id
		LEFT JOIN LATERAL (
			SELECT translate(left(m.content, 8000), E'\x02\x03', '') AS src FROM messages m
			WHERE m.thread_id = page.id AND m.search @@ ` + anyQ + `
			ORDER BY m.id LIMIT 1) sm ON true
		LEFT JOIN LATERAL (
			SELECT a.name FROM attachments a
			WHERE a.thread_id = page.id AND search_name(a.name) @@ ` + anyQ + `
			ORDER BY a.id LIMIT 1) sa ON true
		ORDER BY page.updated_at DESC, page.id DESC`
	// Planned for these very words on every call (an unnamed statement): a
	// cached generic plan would guess the same for every query.
	rows, err := q.Query(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("search threads: %w", err)
	}
	type hit struct {
		Thread
		Headline   string `db:"headline"`
		Source     string `db:"source"`
		Attachment string `db:"attachment"`
	}
	hits, err := all[hit](rows, nil)
	if err != nil {
		return nil, fmt.Errorf("search threads: %w", err)
	}
	ts := make([]Thread, len(hits))
	for i, h := range hits {
		ts[i] = h.Thread
		ts[i].Snippet = sq.snippet(h.Headline, h.Source, h.Attachment)
	}
	return ts, nil
}

// foldLimit bounds the messages one fold takes: a search's takes all that
// is pending, at most a few seconds' worth (jobs.SearchFoldEvery).
const foldLimit = 1 << 30

// FoldPendingSearch appends the words of up to limit pending messages to
// their threads' search documents (search_fold, migration 0045), skipping
// those another fold holds, and reports how many it folded: the periodic
// job's part (jobs/search.go).
func FoldPendingSearch(ctx context.Context, q Querier, limit int) (int, error) {
	var n int
	if err := q.QueryRow(ctx, `SELECT search_fold(NULL, $1, false)`, limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("fold search: %w", err)
	}
	return n, nil
}

// foldSearch appends the words of every message committed so far (of the
// thread, or of all threads when threadID is 0) to the search documents,
// waiting for a fold in progress: a search calls it before it reads them,
// so that it finds a message's words as soon as it is committed although
// the step that wrote it left them pending.
func foldSearch(ctx context.Context, q Querier, threadID int64) error {
	var thread *int64
	if threadID != 0 {
		thread = &threadID
	}
	if _, err := q.Exec(ctx, `SELECT search_fold($1, $2, true)`, thread, foldLimit); err != nil {
		return fmt.Errorf("fold search: %w", err)
	}
	return nil
}

// searchAll is ListThreads with a search: the matches among the person's
// own threads (as before sharing), among the threads of the folders shared
// with them, and in Action among the threads routed to them, each searched
// on its own and the pages merged.
func searchAll(ctx context.Context, q Querier, a Access, f ThreadFilter, after *Cursor,
	shared, owners []int64, own bool, limit int) ([]Thread, error) {
	if err := foldSearch(ctx, q, 0); err != nil {
		return nil, err
	}
	var out []Thread
	// scope searches the documents docs selects among the threads cond
	// selects, each with its own arguments ($1 is the person).
	scope := func(docs func(arg func(any) string) string, cond func(arg func(any) string) []string) error {
		args := []any{a.UserID}
		arg := func(v any) string {
			args = append(args, v)
			return "$" + strconv.Itoa(len(args))
		}
		where := cond(arg)
		ts, err := searchThreads(ctx, q, f.Search, docs, append(where, commonConds(f, after, arg)...), args, limit)
		out = append(out, ts...)
		return err
	}
	if own {
		err := scope(func(arg func(any) string) string { return "user_id = " + arg(a.UserID) },
			func(arg func(any) string) []string { return ownConds(f, nil, arg) })
		if err != nil {
			return nil, err
		}
	}
	if len(shared) > 0 {
		err := scope(func(arg func(any) string) string {
			return "user_id = ANY (" + arg(owners) + ")"
		}, func(arg func(any) string) []string {
			c := []string{"t.user_id = ANY (" + arg(owners) + ")", "t.user_id <> $1", "t.folder_id = ANY (" + arg(shared) + ")", "t.parent_thread_id IS NULL"}
			switch f.Queue {
			case QueueUnread:
				c = append(c, "EXISTS (SELECT 1 FROM thread_unread u WHERE u.user_id = $1 AND u.thread_id = t.id)")
			case QueueAction:
				c = append(c, "t.status = 'waiting'", "pizza_decider_action(t.wait_for, t.started_by, t.user_id, $1)")
			}
			return c
		})
		if err != nil {
			return nil, err
		}
	}
	if f.Queue != QueueUnread && len(a.Routed) > 0 {
		err := scope(func(arg func(any) string) string {
			return "thread_id = ANY (" + arg(a.Routed) + ")"
		}, func(arg func(any) string) []string {
			c := []string{"t.id = ANY (" + arg(a.Routed) + ")", "$1::bigint > 0", "t.status = 'waiting'"}
			if f.FolderID != 0 {
				c = append(c, "t.folder_id = "+arg(f.FolderID))
			}
			return c
		})
		if err != nil {
			return nil, err
		}
	}
	// Newest first, each thread once (a routed thread may be one's own).
	slices.SortFunc(out, func(x, y Thread) int {
		if c := y.UpdatedAt.Compare(x.UpdatedAt); c != 0 {
			return c
		}
		return cmp.Compare(y.ID, x.ID)
	})
	out = slices.CompactFunc(out, func(x, y Thread) bool { return x.ID == y.ID })
	if len(out) > limit {
		out = out[:limit]
	}
	// Whether each waiting thread found is the reader's to decide (every
	// one of the Action queue is), and their read state of the others'.
	var waiting, others []int64
	for i, t := range out {
		out[i].InAction = f.Queue == QueueAction
		if t.Status == StatusWaiting && f.Queue != QueueAction {
			waiting = append(waiting, t.ID)
		}
		if t.UserID != a.UserID {
			out[i].Archived = false
			others = append(others, t.ID)
		}
	}
	if len(waiting) > 0 {
		mine, err := ids(q.Query(ctx, `SELECT id FROM unnest($2::bigint[]) id WHERE pizza_in_action(id, $1)`, a.UserID, waiting))
		if err != nil {
			return nil, err
		}
		for i, t := range out {
			if slices.Contains(mine, t.ID) {
				out[i].InAction = true
			}
		}
	}
	if len(others) > 0 {
		unread, err := ids(q.Query(ctx, `SELECT thread_id FROM thread_unread WHERE user_id = $1 AND thread_id = ANY ($2)`, a.UserID, others))
		if err != nil {
			return nil, err
		}
		for i, t := range out {
			if t.UserID != a.UserID {
				out[i].Unread = slices.Contains(unread, t.ID)
			}
		}
	}
	return out, nil
}

// SearchMatch reports whether one of the user's threads matches a search,
// with its snippet: a live update decides with it whether a changed thread
// belongs in the search results on screen.
func SearchMatch(ctx context.Context, q Querier, userID int64, sq SearchQuery, threadID int64) (Snippet, bool, error) {
	if sq.Empty() {
		return nil, false, nil
	}
	docs := func(arg func(any) string) string { return "user_id = " + arg(userID) }
	where := []string{"t.user_id = $1", "t.id = $2"}
	if t, err := GetThread(ctx, q, userID, threadID); err != nil {
		return nil, false, err
	} else if t.UserID != userID {
		// Shared with them: the owner's document, as they may read it.
		docs = func(arg func(any) string) string { return "thread_id = " + arg(threadID) }
		where = []string{"t.id = $2", "$1::bigint > 0"}
	}
	if err := foldSearch(ctx, q, threadID); err != nil {
		return nil, false, err
	}
	ts, err := searchThreads(ctx, q, sq, docs, where, []any{userID, threadID}, 1)
	if err != nil || len(ts) == 0 {
		return nil, false, err
	}
	return ts[0].Snippet, true, nil
}
