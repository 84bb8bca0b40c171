package views

import (
	"context"
	"strings"
	"testing"

	"pizzabot/db"
)

// A compaction shows where its range ends: after the last tool result it
// took in (shown under its call), before the next turn; one through the
// last message shows at the end. Its summary is readable.
func TestCompactionShownWhereItsRangeEnds(t *testing.T) {
	t.Parallel()
	v := ThreadView{
		Messages: []db.Message{
			{ID: 1, Role: db.RoleUser, Content: "Read the pages."},
			{ID: 2, Role: db.RoleAssistant, ToolCalls: []db.ToolCall{{ID: "a", Name: "fetch_page", Arguments: `{}`}}},
			{ID: 3, Role: db.RoleTool, ToolCallID: "a", ToolName: "fetch_page", Content: "PAGE ONE"},
			{ID: 4, Role: db.RoleAssistant, Content: "NEXT TURN"},
		},
		Compactions: []db.Compaction{
			{ID: 1, FirstMessageID: 2, ThroughMessageID: 3, Summary: "FIRST **summary**", TokensBefore: 61000, TokensAfter: 31000},
			{ID: 2, FirstMessageID: 2, ThroughMessageID: 4, Summary: "SECOND summary"},
		},
	}
	var sb strings.Builder
	if err := ThreadMessages(v).Render(context.Background(), &sb); err != nil {
		t.Fatal(err)
	}
	html := sb.String()
	one, first, next, second := strings.Index(html, "PAGE ONE"), strings.Index(html, "FIRST <strong>summary</strong>"), strings.Index(html, "NEXT TURN"), strings.Index(html, "SECOND summary")
	if one < 0 || first < 0 || next < 0 || second < 0 || !(one < first && first < next && next < second) {
		t.Errorf("order: result %d, first summary %d, next turn %d, second summary %d", one, first, next, second)
	}
	if !strings.Contains(html, "(about 61,000 tokens, now 31,000)") || strings.Count(html, `data-testid="compaction"`) != 2 {
		t.Error("the compactions' labels are not shown")
	}
}
