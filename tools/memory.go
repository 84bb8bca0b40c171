package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"pizzabot/agent"
	"pizzabot/db"
)

// The memory tools keep notes across the threads of the run's user (never
// anyone else's: every query takes run.UserID). They only touch the
// database, so each runs in the transaction that records its result.

func memoryTools() []Tool {
	return []Tool{
		{
			Spec: agent.ToolSpec{
				Name: "save_memory",
				Description: "Save a fact to the user's long-term memory, which lasts across all their threads: a preference, a decision, a name, " +
					"something they told you to remember. Keep one self-contained fact per memory (at most 4000 characters), written so it makes sense " +
					"without this conversation, e.g. \"Prefers reports as bullet lists, in French.\" Saving the same text again refreshes it. " +
					"The user sees and edits their memories on the Memory page.",
				Parameters: schema(`{"type":"object","properties":{
					"content":{"type":"string","minLength":1,"maxLength":4000,"description":"The fact to remember, self-contained."}},
					"required":["content"],"additionalProperties":false}`),
			},
			Tx: func(ctx context.Context, tx pgx.Tx, run Run, args map[string]any) (string, error) {
				content, _ := args["content"].(string)
				thread := run.ThreadID
				m, created, err := db.SaveMemory(ctx, tx, run.UserID, &thread, content)
				if err != nil {
					return "", err
				}
				if !created {
					return fmt.Sprintf("This was already remembered as memory #%d; refreshed it.", m.ID), nil
				}
				return fmt.Sprintf("Saved as memory #%d.", m.ID), nil
			},
		},
		{
			Spec: agent.ToolSpec{
				Name: "search_memory",
				Description: "Search the user's long-term memory (facts saved in any of their threads) and return the best matches, most relevant first, " +
					"each with its id. Search with a few keywords, e.g. \"report format\" or \"Naples supplier\"; any of the words may match. " +
					"An empty query lists the most recently saved memories. Consult it before asking the user something they may have told you before.",
				Parameters: schema(`{"type":"object","properties":{
					"query":{"type":"string","maxLength":500,"description":"Keywords to look for; empty for the most recent memories."},
					"limit":{"type":"integer","minimum":1,"maximum":50,"description":"How many memories to return (default 10)."}},
					"additionalProperties":false}`),
			},
			Tx: func(ctx context.Context, tx pgx.Tx, run Run, args map[string]any) (string, error) {
				query, _ := args["query"].(string)
				limit := intArg(args, "limit", 10, 1, 50)
				ms, err := db.SearchMemories(ctx, tx, run.UserID, query, int(limit))
				if err != nil {
					return "", err
				}
				if len(ms) == 0 {
					if strings.TrimSpace(query) == "" {
						return "The memory is empty.", nil
					}
					return fmt.Sprintf("No memory matches %q.", query), nil
				}
				var b strings.Builder
				for _, m := range ms {
					fmt.Fprintf(&b, "#%d (saved %s): %s\n", m.ID, m.UpdatedAt.UTC().Format("2006-01-02"), m.Content)
				}
				return strings.TrimRight(b.String(), "\n"), nil
			},
		},
		{
			Spec: agent.ToolSpec{
				Name: "forget_memory",
				Description: "Delete one memory from the user's long-term memory, by the id search_memory showed (e.g. 12 for #12). " +
					"Use it when a memory is wrong or outdated, or when the user asks you to forget it; to correct a memory, forget it and save the new fact.",
				Parameters: schema(`{"type":"object","properties":{
					"id":{"type":"integer","minimum":1,"description":"The memory's id."}},
					"required":["id"],"additionalProperties":false}`),
			},
			Tx: func(ctx context.Context, tx pgx.Tx, run Run, args map[string]any) (string, error) {
				id := intArg(args, "id", 0, 0, 1<<62)
				m, err := db.DeleteMemory(ctx, tx, run.UserID, id)
				if errors.Is(err, db.ErrNotFound) {
					return "", fmt.Errorf("there is no memory #%d (search_memory lists them with their ids)", id)
				}
				if err != nil {
					return "", err
				}
				return fmt.Sprintf("Forgot memory #%d: %s", m.ID, ClipText(m.Content, 200)), nil
			},
		},
	}
}
