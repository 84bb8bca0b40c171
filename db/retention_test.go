package db_test

import (
	"context"
	"testing"
	"time"

	"pizzabot/db"
	"pizzabot/db/dbtest"
)

func TestPruneTriggerRecords(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	u, err := db.UpsertUser(ctx, pool, "t", "u", "", "", false)
	if err != nil {
		t.Fatal(err)
	}
	var sid, wid int64
	if err := pool.QueryRow(ctx, `INSERT INTO schedules (user_id, name, prompt, cron, timezone)
		VALUES ($1, 'n', 'p', '@hourly', 'UTC') RETURNING id`, u.ID).Scan(&sid); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO webhooks (user_id, skill, token_hash) VALUES ($1, 's', '\x01') RETURNING id`, u.ID).Scan(&wid); err != nil {
		t.Fatal(err)
	}
	for _, age := range []time.Duration{time.Hour, 40 * 24 * time.Hour, 100 * 24 * time.Hour} {
		at := time.Now().Add(-age)
		if _, err := pool.Exec(ctx, `INSERT INTO schedule_fires (schedule_id, user_id, due_at, first_due_at, ran_at, outcome)
			VALUES ($1, $2, $3, $3, $3, 'started')`, sid, u.ID, at); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO webhook_deliveries (webhook_id, user_id, outcome, status, received_at)
			VALUES ($1, $2, 'accepted', 202, $3)`, wid, u.ID, at); err != nil {
			t.Fatal(err)
		}
	}
	n, err := db.PruneTriggerRecords(ctx, pool, 90*24*time.Hour, 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// Fires: only the 100-day-old one goes; deliveries: the 40- and 100-day-old.
	if n != 3 {
		t.Errorf("pruned %d rows, want 3", n)
	}
	var fires, deliveries int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM schedule_fires), (SELECT count(*) FROM webhook_deliveries)`).Scan(&fires, &deliveries); err != nil {
		t.Fatal(err)
	}
	if fires != 2 || deliveries != 1 {
		t.Errorf("left %d fires and %d deliveries, want 2 and 1", fires, deliveries)
	}
}
