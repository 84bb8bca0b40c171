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
	"pizzabot/tools"
)

// A run cancelled right after the model step's commit, before the tool
// step chained after it (which begins with what that commit read, not a
// ReadRun of its own) commits anything: no call runs, whichever kind comes
// first, a database tool (its first commit checks the lease before the
// tool writes) or a tool with effects outside the database (its intent
// commit checks it before the call). The cancel lands at the model step's
// COMMIT itself (a deferred trigger doing what cancelRun does), so that
// nothing can come between.
func TestCancelBeforeChainedToolStepRunsNoCall(t *testing.T) {
	rec := &jobstest.Recorder{}
	sendCall := scriptmodel.ScriptToolCall{Name: "send_report", Arguments: `{"to":"ceo@customer.example","subject":"Q3 report","body":"b"}`}
	writeCall := scriptmodel.ScriptToolCall{Name: "write_file", Arguments: `{"path": "note.txt", "content": "x"}`}
	h := jobstest.Start(t, jobstest.Options{
		Script: scriptmodel.Script{
			Rules: []scriptmodel.Rule{
				{Match: scriptmodel.Match{LastRole: "user", LastUserContains: "database tool first"},
					Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{writeCall, sendCall}}}},
				{Match: scriptmodel.Match{LastRole: "user", LastUserContains: "outside first"},
					Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{sendCall, writeCall}}}},
			},
			Default: &scriptmodel.Reply{Content: "Done."},
		},
		Tools: []tools.Tool{sendReportTool(rec)},
	})
	ctx := context.Background()
	allowTools(t, h.Pool, "send_report") // ready at once, not waiting for a decision
	// At the COMMIT of the transaction that records send_report: the calls
	// not running get the cancel's result, and the run ends cancelled at
	// the next generation with no lease (cancelRun, db.EndRun).
	if _, err := h.Pool.Exec(ctx, `
		CREATE FUNCTION cancel_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			UPDATE tool_calls SET state = 'done', result = 'Cancelled by the user before this call ran.', is_error = true
				WHERE thread_id = NEW.thread_id AND state NOT IN ('done', 'running');
			UPDATE threads SET status = 'cancelled', run_gen = run_gen + 1, run_lease_job = NULL, run_heartbeat_at = NULL
				WHERE id = NEW.thread_id;
			RETURN NULL;
		END $$;
		CREATE CONSTRAINT TRIGGER cancel_at_commit AFTER INSERT ON tool_calls DEFERRABLE INITIALLY DEFERRED
			FOR EACH ROW WHEN (NEW.name = 'send_report') EXECUTE FUNCTION cancel_at_commit()`); err != nil {
		t.Fatal(err)
	}
	user, err := db.EnsureLocalUser(ctx, h.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, prompt := range []string{"Write the note and send the report, database tool first.", "Send the report and write the note, outside first."} {
		th, err := h.Start(ctx, user, jobs.StartRequest{Prompt: prompt})
		if err != nil {
			t.Fatal(err)
		}
		jobstest.Wait(t, h.Pool, user, th.ID, db.StatusCancelled)
		eventually.Ok(t, 10*time.Second, func() error {
			if _, open := stepJobs(t, h.Pool, th.ID); open != 0 {
				return fmt.Errorf("%d step jobs not finished", open)
			}
			return nil
		})
		calls, err := db.ListToolCalls(ctx, h.Pool, user.ID, th.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(calls) != 2 {
			t.Fatalf("%q: %d calls, want 2", prompt, len(calls))
		}
		for _, c := range calls {
			if c.State != db.CallDone || c.Result != "Cancelled by the user before this call ran." {
				t.Errorf("%q: %s = %s %q, want the cancel's result and no other", prompt, c.Name, c.State, c.Result)
			}
		}
		if n := stepsTaken(t, h.Pool, th.ID); n != 1 {
			t.Errorf("%q: %d steps, want the model's alone", prompt, n)
		}
	}
	if got := rec.Got(); len(got) != 0 {
		t.Fatalf("send_report ran %d times after the run was cancelled", len(got))
	}
}
