package jobs

import (
	"encoding/json"
	"strings"
	"testing"

	"pizzabot/agent"
	"pizzabot/db"
)

// The conversation sent after a compaction is the task with the summary,
// then the turns after the compaction's range, whole: each kept assistant
// message with its tool calls, their results and its provider state; a
// user message right after the summary joins it, so roles alternate.
func TestConversationAfterKeepsWholeTurnsAndTheirState(t *testing.T) {
	t.Parallel()
	state := func(s string) []byte {
		raw, _ := json.Marshal(agent.State{Wire: agent.WireAnthropic, Data: json.RawMessage(`{"thinking":"` + s + `","signature":"sig-` + s + `"}`)})
		return raw
	}
	rows := []db.Message{
		{ID: 1, Role: db.RoleUser, Content: "The task."},
		{ID: 2, Role: db.RoleAssistant, ToolCalls: []db.ToolCall{{ID: "a", Name: "fetch_page", Arguments: `{"n":1}`}}, ProviderState: state("one")},
		{ID: 3, Role: db.RoleTool, ToolCallID: "a", ToolName: "fetch_page", Content: "page 1"},
		{ID: 4, Role: db.RoleAssistant, Content: "Read page 1."},
		{ID: 5, Role: db.RoleUser, Content: "Now page 2."},
		{ID: 6, Role: db.RoleAssistant, ToolCalls: []db.ToolCall{{ID: "b", Name: "fetch_page", Arguments: `{"n":2}`}}, ProviderState: state("two")},
		{ID: 7, Role: db.RoleTool, ToolCallID: "b", ToolName: "fetch_page", Content: "page 2"},
	}
	msgs := toAgent(rows)
	got, from := conversationAfter(rows, msgs, 1, &db.Compaction{ThroughMessageID: 4, Summary: "Page 1 was read."})
	if from != 4 {
		t.Errorf("first message not summarized: %d, want 4", from)
	}
	var roles []string
	for _, m := range got {
		roles = append(roles, string(m.Role))
	}
	if strings.Join(roles, " ") != "user assistant tool" {
		t.Fatalf("roles = %v, want user assistant tool", roles)
	}
	task := got[0].Content
	if !strings.HasPrefix(task, "The task.") || !strings.Contains(task, "Page 1 was read.") || !strings.HasSuffix(task, "Now page 2.") {
		t.Errorf("task message = %q", task)
	}
	if got[1].State == nil || !strings.Contains(string(got[1].State.Data), "sig-two") || got[1].ToolCalls[0].ID != "b" || got[2].ToolCallID != "b" {
		t.Errorf("kept turn = %+v, %+v", got[1], got[2])
	}
	// The stored messages are not changed.
	if msgs[0].Content != "The task." {
		t.Errorf("the task was changed in place: %q", msgs[0].Content)
	}

	// Without a compaction: the conversation as it is.
	if same, from := conversationAfter(rows, msgs, 1, nil); len(same) != len(msgs) || from != 1 {
		t.Errorf("no compaction: %d messages from %d", len(same), from)
	}
}

// renderTurns cuts each message in its middle when the transcript would
// pass its limit, and keeps every message's start and end.
func TestRenderTurnsFitsItsLimit(t *testing.T) {
	t.Parallel()
	long := "START " + strings.Repeat("x", 50_000) + " END"
	ms := []agent.Message{
		{Role: agent.RoleAssistant, ToolCalls: []agent.ToolCall{{ID: "a", Name: "fetch_page", Arguments: `{"n":1}`}}},
		{Role: agent.RoleTool, Name: "fetch_page", Content: long},
		{Role: agent.RoleTool, Name: "fetch_page", Content: long, IsError: true},
	}
	out := renderTurns(ms, 12_000)
	if len(out) > 13_000 {
		t.Errorf("transcript of %d bytes, want about 12000", len(out))
	}
	for _, want := range []string{"-> calls fetch_page {\"n\":1}", "[result of fetch_page]", "[error of fetch_page]", "START ", " END", "bytes left out"} {
		if !strings.Contains(out, want) {
			t.Errorf("transcript lacks %q", want)
		}
	}
}
