package jobs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/internal/eventually"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
)

// A run's messages join its search document after their steps, by the
// periodic fold, with nobody searching.
func TestSearchFoldJob(t *testing.T) {
	h := jobstest.Start(t, jobstest.Options{Script: scriptmodel.Script{
		Rules:   []scriptmodel.Rule{{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{writeNote}}},
		Default: &scriptmodel.Reply{Content: "The ricotta is sealed inside."},
	}})
	ctx := context.Background()
	user, err := db.EnsureLocalUser(ctx, h.Pool)
	if err != nil {
		t.Fatal(err)
	}
	th, err := h.Start(ctx, user, jobs.StartRequest{Prompt: "Fold the calzone."})
	if err != nil {
		t.Fatal(err)
	}
	jobstest.Wait(t, h.Pool, user, th.ID, db.StatusDone)
	eventually.Ok(t, 5*jobs.SearchFoldEvery+5*time.Second, func() error {
		var pending int
		var indexed bool
		err := h.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM search_pending WHERE thread_id = $1),
			(SELECT doc @@ to_tsquery('pizza_search'::regconfig, 'ricotta & sealed') FROM thread_search WHERE thread_id = $1)`,
			th.ID).Scan(&pending, &indexed)
		if err != nil {
			return err
		}
		if pending != 0 || !indexed {
			return fmt.Errorf("%d messages pending, the answer's words indexed: %v", pending, indexed)
		}
		return nil
	})
}
