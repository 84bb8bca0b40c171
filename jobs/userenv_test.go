package jobs_test

import (
	"context"
	"crypto/rand"
	"slices"
	"testing"
	"testing/fstest"
	"time"

	"pizzabot/agent"
	"pizzabot/agent/mcpclient"
	"pizzabot/agent/mcpclient/mcptest"
	"pizzabot/agent/scriptmodel"
	"pizzabot/connections"
	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/extensions"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
	"pizzabot/netguard"
	"pizzabot/tools"
)

// keysSkill declares the env tool of keys, a stdio server (mcptest's)
// whose TOKEN is each user's own api_key.
const keysSkill = `---
name: key-reader
description: Reads which token the keys server was given.
allowed-tools: mcp__keys__env
---
Call env with name TOKEN.
`

var tokenScript = scriptmodel.Script{Rules: []scriptmodel.Rule{
	{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Read the token."}}},
	{Match: scriptmodel.Match{LastUserContains: "token"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
		{Name: "mcp__keys__env", Arguments: `{"name": "TOKEN"}`},
	}}}},
}}

// A stdio server with env TOKEN=${user:api_key}, run from a schedule: a
// user who has not entered their api_key waits in Action for it, as for a
// header's ${user:NAME} (the same wait, naming the value); entering it
// through connections.Service.SetSecret (what PUT
// /api/v1/connections/{server}/secrets/{name} and the Connections page
// call) resumes the run once, and the tool call reads that user's own
// value from their own process. Another user's run reads theirs.
func TestScheduledRunWaitsForUserEnvAndResumes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bin := mcptest.Build(t)
	pool := dbtest.New(t)
	key := make([]byte, db.SecretKeySize)
	_, _ = rand.Read(key)
	box, err := db.NewSecretBox(key)
	if err != nil {
		t.Fatal(err)
	}
	var rt *jobs.Runtime
	svc, err := connections.New(connections.Config{
		Pool: pool, Box: box, Guard: &netguard.Guard{Loopback: true}, PublicURL: "http://127.0.0.1:9",
		Servers: func(_ context.Context, name string) (connections.Server, error) {
			return connections.Server{Name: "keys", Secrets: []string{"api_key"}}, nil
		},
		Ready: func(ctx context.Context, userID int64, server string) error {
			return rt.ConnectionReady(ctx, userID, server)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	m := mcpclient.New(mcpclient.Options{MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, CallTimeout: 15 * time.Second})
	t.Cleanup(m.Close)
	m.Apply([]mcpclient.Spec{{Name: "keys", Config: agent.MCPServerConfig{Type: agent.MCPStdio, Command: bin,
		Env: map[string]string{"TOKEN": "${user:api_key}"}}}})
	tb, err := tools.NewToolbox()
	if err != nil {
		t.Fatal(err)
	}
	tb.AddSource(extensions.MCPTools(m, svc))
	skills := agent.LoadSkills(fstest.MapFS{"key-reader/SKILL.md": {Data: []byte(keysSkill)}}, "")
	h := jobstest.Start(t, jobstest.Options{
		Config: jobs.Config{Pool: pool, Tools: tb, Credentials: svc, SignIns: m,
			Skills: func() agent.SkillSet { return skills }},
		Script: tokenScript,
	})
	rt = h.Runtime
	allowTools(t, pool, "mcp__*") // MCP tools ask by default
	alice, err := db.UpsertUser(ctx, pool, "test", "alice", "alice@example.com", "alice", false)
	if err != nil {
		t.Fatal(err)
	}
	bob, err := db.UpsertUser(ctx, pool, "test", "bob", "bob@example.com", "bob", false)
	if err != nil {
		t.Fatal(err)
	}

	// fire saves a schedule of user's that is due and fires it, as the
	// periodic sweep does; it returns the run's thread.
	fire := func(user db.User) int64 {
		t.Helper()
		due := time.Now().Add(-time.Minute)
		s, err := db.CreateSchedule(ctx, pool, user.ID, db.ScheduleFields{Name: "token", Skill: "key-reader",
			Prompt: "Which token were you given?", Cron: "0 8 * * *", Timezone: "UTC", NextDueAt: &due})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := rt.FireDueSchedules(ctx, time.Now()); err != nil || n != 1 {
			t.Fatalf("fired %d, %v", n, err)
		}
		fs, err := db.ListScheduleFires(ctx, pool, user.ID, s.ID, 10)
		if err != nil || len(fs) != 1 || fs[0].ThreadID == nil {
			t.Fatalf("fires = %+v, %v", fs, err)
		}
		return *fs[0].ThreadID
	}
	results := func(user db.User, id int64) []string {
		t.Helper()
		ms, err := db.ListMessages(ctx, pool, user.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range toolResults(ms) {
			out = append(out, m.Content)
		}
		return out
	}

	// Bob has entered his; Alice has not.
	if err := svc.SetSecret(ctx, bob.ID, "keys", "api_key", "bob-token-91c2"); err != nil {
		t.Fatal(err)
	}
	ta := fire(alice)
	th := jobstest.Wait(t, pool, alice, ta, db.StatusWaiting)
	// The wait names the value (never shows it), as the API's waiting
	// item and the Action row do.
	want := []db.ConnectionWait{{ThreadID: ta, Server: "keys", Secret: "api_key", Reason: "your api_key is not entered"}}
	if !slices.Equal(th.ConnectionWaits, want) || !th.InAction || th.Summary() != "Enter your api_key for keys to continue" {
		t.Fatalf("alice's waits = %+v (want %+v), in action %v, summary %q", th.ConnectionWaits, want, th.InAction, th.Summary())
	}
	if got := results(alice, ta); len(got) != 0 {
		t.Fatalf("alice's run called the tool before her value: %q", got)
	}

	tb2 := fire(bob)
	jobstest.Wait(t, pool, bob, tb2, db.StatusDone)
	if got := results(bob, tb2); !slices.Equal(got, []string{"TOKEN=bob-token-91c2"}) {
		t.Fatalf("bob's results = %q", got)
	}
	// Bob's value resumed nothing of Alice's.
	if th := jobstest.Wait(t, pool, alice, ta, db.StatusWaiting); len(th.ConnectionWaits) != 1 {
		t.Fatalf("alice's waits = %+v", th.ConnectionWaits)
	}

	if err := svc.SetSecret(ctx, alice.ID, "keys", "api_key", "alice-token-7f3a"); err != nil {
		t.Fatal(err)
	}
	jobstest.Wait(t, pool, alice, ta, db.StatusDone)
	if got := results(alice, ta); !slices.Equal(got, []string{"TOKEN=alice-token-7f3a"}) {
		t.Fatalf("alice's results = %q", got)
	}
	// Resumed once: a second ConnectionReady (another replica, a value
	// entered again) starts no other step of the finished run.
	steps := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'run_step' AND (args->>'thread_id')::bigint = $1`, ta).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := steps()
	if err := rt.ConnectionReady(ctx, alice.ID, "keys"); err != nil {
		t.Fatal(err)
	}
	if n := steps(); n != before {
		t.Fatalf("run steps %d after a second ConnectionReady, %d before", n, before)
	}
	if got := results(alice, ta); len(got) != 1 {
		t.Fatalf("alice's run ran again: %q", got)
	}
	if got := results(bob, tb2); !slices.Equal(got, []string{"TOKEN=bob-token-91c2"}) {
		t.Fatalf("bob's results after alice's = %q", got)
	}
}
