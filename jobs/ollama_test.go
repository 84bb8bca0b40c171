package jobs_test

import (
	"context"
	"strings"
	"testing"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/jobs"
)

// A run on Ollama, whose older parser streams parallel calls all at index
// 0: both calls of each turn run, each with its own arguments (merged by
// index they were one call with {"path":"a.md",...}{"path":"b.md",...}).
func TestOllamaParallelCallsAtIndexZero(t *testing.T) {
	t.Parallel()
	b := providerSetup(t, "ollama:qwen2.5-coder", scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{IndexMode: scriptmodel.IndexZero, ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "call_w1", Name: "write_file", Arguments: `{"path":"a.md","content":"alpha"}`},
			{ID: "call_w2", Name: "write_file", Arguments: `{"path":"b.md","content":"beta"}`},
		}}}},
		{Match: scriptmodel.Match{LastToolResultContains: "Wrote"}, Replies: []scriptmodel.Reply{{IndexMode: scriptmodel.IndexZero, ToolCalls: []scriptmodel.ScriptToolCall{
			{ID: "call_r1", Name: "read_file", Arguments: `{"path":"a.md"}`},
			{ID: "call_r2", Name: "read_file", Arguments: `{"path":"b.md"}`},
		}}}},
		{Match: scriptmodel.Match{LastToolResultContains: "beta"}, Replies: []scriptmodel.Reply{{Content: "Both files read."}}},
	}})
	th, err := b.Start(context.Background(), b.user, jobs.StartRequest{Prompt: "Write a.md and b.md, then read them"})
	if err != nil {
		t.Fatal(err)
	}
	th = b.wait(t, th.ID, db.StatusDone)
	var results []string
	for _, m := range b.messages(t, th.ID) {
		if m.Role == db.RoleTool {
			if m.IsError {
				t.Errorf("tool %s failed: %s", m.ToolName, m.Content)
			}
			results = append(results, m.ToolName+": "+m.Content)
		}
	}
	if len(results) != 4 {
		t.Fatalf("tool results = %q, want two writes and two reads", results)
	}
	for i, want := range []string{"write_file: Wrote 5 bytes to a.md", "write_file: Wrote 4 bytes to b.md", "read_file: alpha", "read_file: beta"} {
		if !strings.Contains(results[i], want) {
			t.Errorf("result %d = %q, want %q", i, results[i], want)
		}
	}
	reqs := b.model.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d model requests, want 3", len(reqs))
	}
	if r := reqs[0]; r.Model != "qwen2.5-coder" || r.Authorization != "Bearer key-of-ollama" {
		t.Errorf("request for %q with %q", r.Model, r.Authorization)
	}
}
