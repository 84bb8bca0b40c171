package jobs_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
	"pizzabot/tools"
)

// What comes from outside may hold a NUL byte or bytes that are not UTF-8,
// which PostgreSQL refuses in text (and jsonb): a tool's output (an MCP
// server's binary answer) and a model's reply are kept with U+FFFD in
// their place (db.Text), and the run goes on. Before, the tool's result
// could not be recorded and the run stopped on a call whose outcome it did
// not know.
func TestOutsideTextWithNULIsKept(t *testing.T) {
	t.Parallel()
	binary := tools.Tool{
		Spec: agent.ToolSpec{Name: "read_device", Description: "Reads the device.", Parameters: []byte(`{"type":"object","properties":{}}`)},
		Call: func(context.Context, tools.Run, map[string]any) (string, error) { return "head\x00tail \xff end", nil },
	}
	b := setupWith(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: calls(scriptmodel.ScriptToolCall{ID: "d1", Name: "read_device", Arguments: `{}`})},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: say("Read \x00 it.")},
	}}, nil, binary)
	th := b.start(t, "Read the device.", "")
	b.wait(t, th.ID, db.StatusWaiting) // it acts outside Pizza Bot: it asks
	b.decide(t, th.ID, db.DecisionApprove)
	b.wait(t, th.ID, db.StatusDone)
	ms, err := db.ListMessages(context.Background(), b.pool, b.user.ID, th.ID)
	if err != nil {
		t.Fatal(err)
	}
	var tool, answer string
	for _, m := range ms {
		switch m.Role {
		case db.RoleTool:
			tool = m.Content
		case db.RoleAssistant:
			answer = m.Content
		}
	}
	if tool != "head\uFFFDtail \uFFFD end" {
		t.Errorf("the tool's result = %q", tool)
	}
	if answer != "Read \uFFFD it." {
		t.Errorf("the answer = %q", answer)
	}
}

// A provider whose error quotes a NUL: the run fails saying so. Before,
// the run's end could not be recorded and it stayed running.
func TestProviderErrorWithNULIsKept(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	h := jobstest.Start(t, jobstest.Options{
		WrapModel: func(http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write([]byte("{\"error\":{\"message\":\"bad \\u0000 request \x00\",\"type\":\"invalid_request_error\"}}"))
			})
		},
	})
	ctx := context.Background()
	user, err := db.UpsertUser(ctx, h.Pool, "test", "ann", "ann@example.com", "Ann", false)
	if err != nil {
		t.Fatal(err)
	}
	th, err := h.Start(ctx, user, jobs.StartRequest{Prompt: "Hello."})
	if err != nil {
		t.Fatal(err)
	}
	got := jobstest.Wait(t, h.Pool, user, th.ID, db.StatusFailed)
	if strings.ContainsRune(got.Error, 0) || !strings.Contains(got.Error, "bad") {
		t.Errorf("the run's error = %q", got.Error)
	}
	t.Logf("requests %d, error %q", requests.Load(), got.Error)
}
