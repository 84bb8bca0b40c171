package db

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ThreadView is everything that renders one thread (its page, its live
// updates, the API's GET of it), read in one snapshot: a step committing a
// message and the call it asks for shows both or neither, never a pending
// call without the message that asked for it.
type ThreadView struct {
	Thread Thread
	// Messages is the conversation, oldest first.
	Messages []Message
	// Calls is every tool call of the thread with its state and decision.
	Calls []ToolCallRow
	// Compactions are the summaries that stand for older messages in what
	// the run sends its model, oldest first (compaction.go).
	Compactions []Compaction
	// Usage is what the run used so far.
	Usage Usage
	// Attachments are the files attached to the thread.
	Attachments []Attachment
	// Parent is the thread that delegated this one; nil for a top-level
	// thread.
	Parent *Thread
	// Subagents are the threads it delegated to, oldest first, each with
	// its conversation, calls and usage.
	Subagents []SubagentView
	// Deciders says, for each waiting call of the thread and of its
	// sub-agents, whether the reader may decide it: DecideOK or why not
	// (DecideChecks: Runtime.Decide's rule).
	Deciders map[int64]string
	// Undecidable says, for each waiting call of the thread and of its
	// sub-agents that nobody could decide right now, why (UndecidableCalls,
	// worded for the reader). Empty when someone could decide every one.
	Undecidable map[int64]Undecidable
	// Budget is the budget hold its run waits on (budgets.go); nil when
	// it does not.
	Budget *BudgetHold
}

// SubagentView is a sub-agent's part of its parent's ThreadView.
type SubagentView struct {
	Thread      Thread
	Messages    []Message
	Calls       []ToolCallRow
	Compactions []Compaction
	Usage       Usage
}

// ReadThreadView reads a thread the user may read with everything that
// renders it (ErrNotFound for another's), in one read-only REPEATABLE READ
// transaction: every part is as of the same instant.
func ReadThreadView(ctx context.Context, pool *pgxpool.Pool, userID, threadID int64) (ThreadView, error) {
	var v ThreadView
	opts := pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
	err := InTxOptions(ctx, pool, opts, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		if v.Thread, err = GetThread(ctx, tx, userID, threadID); err != nil {
			return err
		}
		if v.Messages, err = ListMessages(ctx, tx, userID, threadID); err != nil {
			return err
		}
		if v.Calls, err = ListToolCalls(ctx, tx, userID, threadID); err != nil {
			return err
		}
		if v.Compactions, err = ListCompactions(ctx, tx, userID, threadID); err != nil {
			return err
		}
		if v.Usage, err = ThreadUsage(ctx, tx, userID, threadID); err != nil {
			return err
		}
		if v.Attachments, err = ListAttachments(ctx, tx, userID, threadID); err != nil {
			return err
		}
		if bh := v.Thread.BudgetHold; bh != nil && bh.ThreadID == threadID {
			h, err := GetBudgetHold(ctx, tx, userID, threadID)
			if err != nil {
				return err
			}
			v.Budget = &h
		}
		if id := v.Thread.ParentThreadID; id != nil {
			p, err := GetThread(ctx, tx, userID, *id)
			if err != nil {
				return err
			}
			v.Parent = &p
		}
		if v.Subagents, err = readSubagents(ctx, tx, userID, threadID); err != nil {
			return err
		}
		for i := range v.Subagents {
			v.Subagents[i].Thread.Role = v.Thread.Role // a sub-agent's readers are its parent's
		}
		if v.Deciders, err = DecideChecks(ctx, tx, userID, threadID); err != nil {
			return err
		}
		if v.Thread.Status == StatusWaiting {
			v.Undecidable, err = UndecidableCalls(ctx, tx, userID, threadID)
		}
		return err
	})
	if err != nil {
		return ThreadView{}, fmt.Errorf("read thread %d: %w", threadID, err)
	}
	return v, nil
}

// readSubagents reads the sub-agents of a thread with their parts.
func readSubagents(ctx context.Context, q Querier, userID, parentID int64) ([]SubagentView, error) {
	kids, err := ListSubagents(ctx, q, userID, parentID)
	if err != nil || len(kids) == 0 {
		return nil, err
	}
	msgs, err := SubagentMessages(ctx, q, userID, parentID)
	if err != nil {
		return nil, err
	}
	calls, err := SubagentToolCalls(ctx, q, userID, parentID)
	if err != nil {
		return nil, err
	}
	usage, err := SubagentUsage(ctx, q, userID, parentID)
	if err != nil {
		return nil, err
	}
	compactions, err := SubagentCompactions(ctx, q, userID, parentID)
	if err != nil {
		return nil, err
	}
	out := make([]SubagentView, 0, len(kids))
	for _, k := range kids {
		out = append(out, SubagentView{Thread: k, Messages: msgs[k.ID], Calls: calls[k.ID], Compactions: compactions[k.ID], Usage: usage[k.ID]})
	}
	return out, nil
}
