package db

import (
	"context"
	"fmt"
	"time"
)

// PruneTriggerRecords deletes schedule fires and webhook deliveries older
// than their retention, in batches, and returns how many rows went. A
// delivery's id stops deduplicating redeliveries once pruned, so its
// retention must outlast any sender's retry window.
func PruneTriggerRecords(ctx context.Context, q Querier, fires, deliveries time.Duration) (int64, error) {
	var n int64
	for _, s := range []struct {
		sql string
		age time.Duration
	}{
		{`DELETE FROM schedule_fires WHERE id IN (
			SELECT id FROM schedule_fires WHERE ran_at < now() - make_interval(secs => $1) LIMIT 5000)`, fires},
		{`DELETE FROM webhook_deliveries WHERE id IN (
			SELECT id FROM webhook_deliveries WHERE received_at < now() - make_interval(secs => $1) LIMIT 5000)`, deliveries},
	} {
		for {
			tag, err := q.Exec(ctx, s.sql, s.age.Seconds())
			if err != nil {
				return n, fmt.Errorf("prune trigger records: %w", err)
			}
			n += tag.RowsAffected()
			if tag.RowsAffected() < 5000 {
				break
			}
		}
	}
	return n, nil
}
