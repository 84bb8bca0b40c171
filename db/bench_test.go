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
	for _, q := range []db.Queue{db.QueueAll, db.QueueUnread, db.QueueAction} {
		b.Run("page/"+string(q), func(b *testing.B) {
			var after *db.Cursor
			for i := 0; i < b.N; i++ {
				ts, next, err := db.ListThreads(ctx, pool, user.ID, db.ThreadFilter{Queue: q}, after, 50)
				if err != nil || len(ts) == 0 {
					b.Fatalf("page: %d threads, %v", len(ts), err)
				}
				// Walk the queue page by page, wrapping at the end.
				after = next
			}
		})
	}
	b.Run("counts", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			c, err := db.CountThreads(ctx, pool, user.ID)
			if err != nil || c.All != 100000 {
				b.Fatalf("counts %+v, %v", c, err)
			}
		}
	})
}
