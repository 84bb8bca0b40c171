package db_test

import (
	"context"
	"strings"
	"testing"

	"pizzabot/db/dbtest"
)

// TestThreadsNewsTriggerNamesEveryColumn guards migration 0017: the trigger
// that tells news from a lease change names the columns of threads. A
// migration that adds a column must call pizza_threads_news_trigger() again,
// or changes to that column would reach no browser.
func TestThreadsNewsTriggerNamesEveryColumn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	var def string
	if err := pool.QueryRow(ctx, `SELECT pg_get_triggerdef(oid) FROM pg_trigger
		WHERE tgrelid = 'threads'::regclass AND tgname = 'threads_events_update'`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT attname FROM pg_attribute
		WHERE attrelid = 'threads'::regclass AND attnum > 0 AND NOT attisdropped`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var col string
		if err := rows.Scan(&col); err != nil {
			t.Fatal(err)
		}
		named := strings.Contains(def, "old."+col+" ")
		lease := col == "run_lease_job" || col == "run_heartbeat_at"
		if named == lease {
			t.Errorf("threads.%s: named in threads_events_update = %v, want %v (call pizza_threads_news_trigger() in the migration that added it)", col, named, !lease)
		}
	}
}
