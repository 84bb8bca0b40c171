package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/internal/eventually"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
	"pizzabot/tools"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The crash tests run the runtime in a child process (this test binary,
// re-executed) and SIGKILL it mid-run, then let a fresh runtime in the test
// process finish the run from what the dead one committed.

const crashEnv = "PIZZA_JOBS_CRASH_CHILD"

func init() {
	if os.Getenv(crashEnv) == "" {
		return
	}
	// The child: run a runtime until killed.
	if err := crashChild(); err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(3)
	}
	os.Exit(0)
}

// sideEffectTool writes a marker file (its "effect" outside the database)
// then blocks for block, so the test can kill the process during the call.
func sideEffectTool(markerDir string, block time.Duration) tools.Tool {
	return tools.Tool{
		Spec: agent.ToolSpec{
			Name:        "charge_card",
			Description: "Charge the customer's card.",
			Parameters:  []byte(`{"type":"object","properties":{"amount":{"type":"integer"}},"required":["amount"]}`),
		},
		Call: func(ctx context.Context, _ tools.Run, args map[string]any) (string, error) {
			f, err := os.CreateTemp(markerDir, "charge-*")
			if err != nil {
				return "", err
			}
			f.Close()
			select {
			case <-time.After(block):
			case <-ctx.Done():
				return "", ctx.Err()
			}
			return fmt.Sprintf("charged %v", args["amount"]), nil
		},
	}
}

// crashConfig is the configuration of both runtimes, the child's and the
// survivor's: their tool blocks for block. Getenv is the caller's.
func crashConfig(pool *pgxpool.Pool, markerDir string, block time.Duration) (jobs.Config, error) {
	toolbox, err := tools.NewToolbox(sideEffectTool(markerDir, block))
	if err != nil {
		return jobs.Config{}, err
	}
	skills := agent.LoadSkills(fstest.MapFS{}, "")
	return jobs.Config{
		Pool: pool, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Tools: toolbox, Skills: func() agent.SkillSet { return skills },
		DefaultModel:   jobstest.Model,
		ModelRetry:     agent.DefaultRetryPolicy,
		HeartbeatEvery: 200 * time.Millisecond,
		StaleAfter:     2 * time.Second,
		MaxWorkers:     5,
	}, nil
}

func crashChild() error {
	pool, err := db.Open(context.Background(), os.Getenv("CRASH_DB"))
	if err != nil {
		return err
	}
	cfg, err := crashConfig(pool, os.Getenv("CRASH_MARKERS"), time.Hour)
	if err != nil {
		return err
	}
	cfg.Getenv = jobstest.ModelEnv(os.Getenv("CRASH_MODEL"))
	if os.Getenv("CRASH_LIVENESS") != "" {
		// A registered process, as a server is: its death is seen at once.
		l, err := jobs.StartLiveness(context.Background(), pool, cfg.Logger)
		if err != nil {
			return err
		}
		cfg.ClientID = l.ClientID()
	}
	rt, err := jobs.New(cfg)
	if err != nil {
		return err
	}
	if err := rt.StartWorkers(context.Background()); err != nil {
		return err
	}
	select {} // until SIGKILL
}

type crashBundle struct {
	dbURL, markers    string
	user              db.User
	*jobstest.Harness // the survivor's runtime, its workers started by startSurvivor
}

func crashSetup(t *testing.T, script scriptmodel.Script) *crashBundle {
	t.Helper()
	b := &crashBundle{dbURL: dbtest.NewURL(t), markers: t.TempDir()}
	pool, err := db.Open(context.Background(), b.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// The surviving runtime's tool returns at once.
	cfg, err := crashConfig(pool, b.markers, 0)
	if err != nil {
		t.Fatal(err)
	}
	b.Harness = jobstest.Start(t, jobstest.Options{Config: cfg, Script: script, Idle: true})
	if b.user, err = db.UpsertUser(context.Background(), b.Pool, "test", "carol", "", "Carol", false); err != nil {
		t.Fatal(err)
	}
	// charge_card acts outside the database, so it asks by default: these
	// tests are about crashes during a call that runs unasked.
	allowTools(t, b.Pool, "charge_card")
	return b
}

// runChild starts the child runtime, with env added to its environment,
// and returns a func that SIGKILLs it.
func (b *crashBundle) runChild(t *testing.T, env ...string) func() {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"=1", "CRASH_DB="+b.dbURL, "CRASH_MODEL="+b.ModelURL, "CRASH_MARKERS="+b.markers)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	kill := func() {
		if killed {
			return
		}
		killed = true
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
	t.Cleanup(kill)
	return kill
}

func (b *crashBundle) thread(t *testing.T, id int64) db.Thread {
	t.Helper()
	th, err := db.GetThread(context.Background(), b.Pool, b.user.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	return th
}

func (b *crashBundle) charges(t *testing.T) int {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(b.markers, "charge-*"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m)
}

func TestKillDuringToolCallAsksTheUser(t *testing.T) {
	t.Parallel()
	b := crashSetup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "ch1", Name: "charge_card", Arguments: `{"amount": 30}`},
		}}}},
		{Match: scriptmodel.Match{LastToolResultContains: "charged"}, Replies: []scriptmodel.Reply{{Content: "Charged once."}}},
	}})
	kill := b.runChild(t)
	// The test process inserts the job with the runtime whose workers
	// are not started yet: the survivor's.
	th, err := b.Runtime.Start(context.Background(), b.user, jobs.StartRequest{Prompt: "charge the card"})
	if err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 30*time.Second, "waiting for the child to start the charge", func() bool { return b.charges(t) == 1 })
	kill()

	b.StartWorkers(t) // the survivor, as a restarted server
	eventually.True(t, 60*time.Second, "waiting for the run to ask about the unknown outcome", func() bool {
		return b.thread(t, th.ID).Status == db.StatusWaiting
	})
	calls, err := db.OpenToolCalls(context.Background(), b.Pool, th.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || calls[0].State != db.CallUnknown || strings.Join(calls[0].AllowedDecisions, ",") != "retry,skip" {
		t.Fatalf("open calls = %+v, want one unknown call offering retry or skip", calls)
	}
	if n := b.charges(t); n != 1 {
		t.Fatalf("the call ran %d times before anyone decided", n)
	}
	if _, err := b.Runtime.Decide(context.Background(), b.user, th.ID, []jobs.DecisionInput{{CallID: calls[0].ID, Type: "retry"}}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 30*time.Second, "waiting for the run to finish", func() bool { return b.thread(t, th.ID).Status == db.StatusDone })
	if n := b.charges(t); n != 2 {
		t.Errorf("charges = %d, want 2 (the unknown one and the retry the user chose)", n)
	}
}

func TestKillBetweenStepsRedoesNoCommittedStep(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	b := crashSetup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "w1", Name: "write_file", Arguments: `{"path":"a.md","content":"one"}`},
		}}}},
		// The second model call hangs in the child until it is killed,
		// then answers the survivor.
		{Match: scriptmodel.Match{LastToolResultContains: "Wrote"}, Replies: []scriptmodel.Reply{{Content: "late", Hold: hold}, {Content: "Finished after restart."}}},
	}})
	kill := b.runChild(t)
	th, err := b.Runtime.Start(context.Background(), b.user, jobs.StartRequest{Prompt: "write a"})
	if err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 30*time.Second, "waiting for the second model call", func() bool { return len(b.Model.Requests()) == 2 })
	kill()
	b.StartWorkers(t) // the survivor, as a restarted server
	eventually.True(t, 60*time.Second, "waiting for the run to finish", func() bool { return b.thread(t, th.ID).Status == db.StatusDone })

	ms, err := db.ListMessages(context.Background(), b.Pool, b.user.ID, th.ID)
	if err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, m := range ms {
		roles = append(roles, m.Role)
	}
	if got, want := strings.Join(roles, " "), "user assistant tool assistant"; got != want {
		t.Errorf("messages = %s, want %s (no step twice)", got, want)
	}
	if got := ms[len(ms)-1].Content; got != "Finished after restart." {
		t.Errorf("answer = %q", got)
	}
	reqs := b.Model.Requests()
	if n := len(reqs); n != 3 {
		t.Errorf("model calls = %d, want 3 (first step once, the interrupted one again)", n)
	}
}

// A step whose commit the database refuses is retried by River with its
// backoff, keeping its lease, and finishes once the fault is gone; it is not
// taken for a shutdown and handed back at once (a hot loop that never
// recorded the error).
func TestStepErrorIsRetried(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{Default: &scriptmodel.Reply{Content: "the answer"}})
	ctx := context.Background()
	// The fault: the database refuses the model's answer.
	if _, err := b.pool.Exec(ctx, `
		CREATE FUNCTION refuse_answer() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.role = 'assistant' THEN RAISE EXCEPTION 'disk on fire'; END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_answer BEFORE INSERT ON messages FOR EACH ROW EXECUTE FUNCTION refuse_answer();`); err != nil {
		t.Fatal(err)
	}
	th := b.start(t, "hi", "")
	var errs int
	eventually.Ok(t, time.Minute, func() error {
		if err := b.pool.QueryRow(ctx, `SELECT coalesce(max(cardinality(errors)), 0) FROM river_job
			WHERE kind = 'run_step' AND (args->>'thread_id')::bigint = $1`, th.ID).Scan(&errs); err != nil {
			return err
		}
		if errs == 0 {
			return errors.New("no error recorded on the step job")
		}
		return nil
	})
	if _, err := b.pool.Exec(ctx, `DROP TRIGGER refuse_answer ON messages`); err != nil {
		t.Fatal(err)
	}
	th = b.wait(t, th.ID, db.StatusDone)
	if got := last(b.messages(t, th.ID)).Content; got != "the answer" {
		t.Errorf("answer = %q", got)
	}
}
