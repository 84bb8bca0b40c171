package db_test

import (
	"context"
	"testing"

	"pizzabot/db"
	"pizzabot/db/dbtest"
)

// BenchmarkQueues measures a queue page (50 threads) and the three counts
// for a user with 100,000 threads (a tenth unread, a hundredth waiting),
// among other users' threads.
func BenchmarkQueues(b *testing.B) {
	pool := dbtest.New(b)
	ctx := context.Background()
	user, err := db.UpsertUser(ctx, pool, "bench", "heavy", "", "", false)
	if err != nil {
		b.Fatal(err)
	}
	other, err := db.UpsertUser(ctx, pool, "bench", "other", "", "", false)
	if err != nil {
		b.Fatal(err)
	}
	insert := func(userID int64, n int) {
		_, err := pool.Exec(ctx, `
			INSERT INTO threads (user_id, title, status, unread, updated_at)
			SELECT $1, 'Thread ' || i,
			       CASE WHEN i % 100 = 0 THEN 'waiting' WHEN i % 37 = 0 THEN 'running' ELSE 'done' END,
			       i % 10 = 0,
			       now() - make_interval(secs => i)
			FROM generate_series(1, $2::int) AS i`, userID, n)
		if err != nil {
			b.Fatal(err)
		}
	}
	// Bulk-load without the per-row count triggers (one transaction
	// updating one counter row 100,000 times is quadratic), then count once.
	if _, err := pool.Exec(ctx, `ALTER TABLE threads DISABLE TRIGGER threads_count_insert_delete`); err != nil {
		b.Fatal(err)
	}
	insert(user.ID, 100000)
	insert(other.ID, 25000)
	_, err = pool.Exec(ctx, `ALTER TABLE threads ENABLE TRIGGER threads_count_insert_delete;
		INSERT INTO thread_counts (user_id, all_count, unread_count, action_count)
		SELECT user_id, count(*), count(*) FILTER (WHERE unread AND NOT archived), count(*) FILTER (WHERE status = 'waiting')
		FROM threads GROUP BY user_id`)
	if err != nil {
		b.Fatal(err)
	}
	// Autovacuum keeps the visibility map current in a live database; the
	// counts are index-only scans that depend on it.
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE threads`); err != nil {
		b.Fatal(err)
	}
	// The heavy user is in a group and has a verified email, as on a team
	// server: the routed part of Action is looked up (and finds nothing).
	if _, err := db.SignInUser(ctx, pool, db.SignIn{Issuer: "bench", Subject: "heavy", Email: "heavy@example.com",
		EmailVerified: true, Groups: []string{"bench-team"}}, nil, ""); err != nil {
		b.Fatal(err)
	}
	queues := func(prefix string, all int64) {
		// Access is resolved once per request, as the handlers do.
		a, err := db.LoadAccess(ctx, pool, user.ID)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(prefix+"access", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := db.LoadAccess(ctx, pool, user.ID); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, q := range []db.Queue{db.QueueAll, db.QueueUnread, db.QueueAction} {
			b.Run(prefix+"page/"+string(q), func(b *testing.B) {
				var after *db.Cursor
				for i := 0; i < b.N; i++ {
					ts, next, err := db.ListThreads(ctx, pool, a, db.ThreadFilter{Queue: q}, after, 50)
					if err != nil || len(ts) == 0 {
						b.Fatalf("page: %d threads, %v", len(ts), err)
					}
					// Walk the queue page by page, wrapping at the end.
					after = next
				}
			})
		}
		b.Run(prefix+"counts", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				c, err := db.CountThreads(ctx, pool, a)
				if err != nil || c.All != all {
					b.Fatalf("counts %+v, %v", c, err)
				}
			}
		})
	}
	queues("", 100000)

	// A team: another user's folder of 10,000 threads (a tenth finished
	// unread for the heavy user, a hundredth waiting, a few of those on
	// calls routed to the group) shared with the heavy user's group.
	sharer, err := db.UpsertUser(ctx, pool, "bench", "sharer", "", "", false)
	if err != nil {
		b.Fatal(err)
	}
	folder, err := db.CreateFolder(ctx, pool, sharer.ID, "Team")
	if err != nil {
		b.Fatal(err)
	}
	insert(sharer.ID, 10000)
	for _, s := range []struct {
		sql  string
		args []any
	}{
		// As for thread_counts above: the folder's count once, not per row.
		{`ALTER TABLE threads DISABLE TRIGGER threads_folder_count_update`, nil},
		{`UPDATE threads SET folder_id = $2 WHERE user_id = $1`, []any{sharer.ID, folder.ID}},
		{`ALTER TABLE threads ENABLE TRIGGER threads_folder_count_update`, nil},
		{`INSERT INTO folder_counts (folder_id, shard, all_count) SELECT $1, 0, count(*) FROM threads WHERE folder_id = $1`, []any{folder.ID}},
		{`INSERT INTO thread_unread (user_id, thread_id, folder_id, updated_at) SELECT $2, id, folder_id, updated_at FROM threads WHERE user_id = $1 AND id % 10 = 0`, []any{sharer.ID, user.ID}},
		{`INSERT INTO messages (thread_id, role) SELECT id, 'assistant' FROM threads WHERE user_id = $1 AND status = 'waiting'`, []any{sharer.ID}},
		{`INSERT INTO tool_calls (thread_id, message_id, call_id, name, arguments, state, wait_kind, approvers)
		  SELECT m.thread_id, m.id, 'c', 'deploy', '{}', 'pending', 'approval',
		         CASE WHEN m.thread_id / 100 % 5 = 0 THEN '[["group:bench-team"]]'::jsonb ELSE '[]' END
		  FROM messages m JOIN threads t ON t.id = m.thread_id WHERE t.user_id = $1`, []any{sharer.ID}},
	} {
		if _, err := pool.Exec(ctx, s.sql, s.args...); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE threads, thread_unread, tool_calls`); err != nil {
		b.Fatal(err)
	}
	if _, err := db.ShareFolder(ctx, pool, sharer.ID, folder.ID, "group:bench-team", db.RoleMember); err != nil {
		b.Fatal(err)
	}
	queues("shared/", 110000)
}
