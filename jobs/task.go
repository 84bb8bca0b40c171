package jobs

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"pizzabot/agent"
	"pizzabot/db"
	"pizzabot/refusal"
	"pizzabot/tools"
)

// Skills as sub-agents (docs/subagents.md).
//
// A top-level run may call the task tool to hand a task to a skill. The
// tool step that reaches ready task calls creates one child thread per call
// (all of them at once, so they run in parallel), marks the calls
// delegated, and, once its other calls are done, parks the parent: running,
// with no lease and no job, so it holds no worker while its children run.
// Each child is a run like any other, with its own step jobs, the skill's
// instructions and only the skill's tools; children do not delegate further
// (a depth of one). The transaction that ends a child completes the
// parent's call (the child's final answer, or an error result) and, when
// the parent has no open call left, queues the parent's next step. A child
// that stops for a person puts its parent in Action too; the decision
// resumes both. Cancelling the parent cancels its children.
//
// Locks: a child's transactions lock the child, then the parent; Cancel
// locks a parent's children before the parent. The two orders agree, so
// they never deadlock.

// maxTaskResult bounds the answer a sub-agent gives back to its parent.
const maxTaskResult = 64 << 10

// subagentSystemPrompt replaces baseSystemPrompt for a sub-agent.
const subagentSystemPrompt = `You are Pizza Bot, working as a sub-agent: another agent delegated a task to you and waits for your answer, which it receives as the result of its call. Work autonomously with the tools you have, and finish with a clear, self-contained answer in Markdown: it is all the other agent gets back. Ask the user (ask_user, when offered) only when you cannot proceed well without them.`

// offerTask adjusts the tools offered to a run (Toolbox.Offer's) for the
// task tool. Where Offer offers it (a run without a skill, or a skill whose
// allowed-tools names it), a top-level run gets it with the skills it may
// delegate to; a sub-agent, or a run with no skill to delegate to, does not.
func (rt *Runtime) offerTask(t db.Thread, specs []agent.ToolSpec) []agent.ToolSpec {
	i := slices.IndexFunc(specs, func(s agent.ToolSpec) bool { return s.Name == tools.TaskTool })
	if i < 0 {
		return specs
	}
	var skills []agent.Skill
	if t.ParentThreadID == nil {
		skills = rt.delegable(t.Skill)
	}
	if len(skills) == 0 {
		return slices.Delete(specs, i, i+1)
	}
	specs[i] = tools.TaskSpec(skills)
	return specs
}

// delegable returns the skills a run of skill own may delegate to: every
// skill whose tools are all connected now, but its own.
func (rt *Runtime) delegable(own string) []agent.Skill {
	var out []agent.Skill
	for _, s := range rt.cfg.Tools.SkillAvailability(rt.Skills()) {
		if s.Available() && s.Skill.Name != own {
			out = append(out, s.Skill)
		}
	}
	return out
}

// checkTask reads a task call of parent: the skill and the instructions, or
// why the call cannot start a sub-agent (for the model, as its result). The
// skills may have changed since the call was offered, so they are checked
// again here.
func (rt *Runtime) checkTask(parent db.Thread, c db.ToolCallRow) (skill, task, refusal string) {
	if parent.ParentThreadID != nil {
		return "", "", "A sub-agent cannot delegate: do the task with your own tools."
	}
	args, err := tools.Task().Spec.ValidateArguments(c.EffectiveArguments())
	if err != nil {
		return "", "", err.Error()
	}
	skill, _ = args["skill"].(string)
	task, _ = args["task"].(string)
	task = strings.TrimSpace(task)
	if task == "" {
		return "", "", `"task" is empty: write the sub-agent's instructions.`
	}
	var names []string
	for _, s := range rt.delegable(parent.Skill) {
		if s.Name == skill {
			return skill, task, ""
		}
		names = append(names, s.Name)
	}
	if len(names) == 0 {
		return "", "", fmt.Sprintf("Skill %q cannot run now, and no skill can: do the task yourself.", skill)
	}
	return "", "", fmt.Sprintf("Skill %q cannot run now; the skills you can delegate to are %s.", skill, strings.Join(names, ", "))
}

// delegate starts a sub-agent for each ready task call among open, in one
// transaction under the step's lease: the children start together and run
// in parallel, with each other and with the rest of the step.
func (rt *Runtime) delegate(ctx context.Context, jobID int64, a StepArgs, open []db.ToolCallRow) error {
	var ready []db.ToolCallRow
	for _, c := range open {
		if c.Name == tools.TaskTool && c.State == db.CallReady {
			ready = append(ready, c)
		}
	}
	if len(ready) == 0 {
		return nil
	}
	return rt.commit(ctx, jobID, a, func(ctx context.Context, tx pgx.Tx) error {
		parent, err := db.GetRunThread(ctx, tx, a.ThreadID)
		if err != nil {
			return err
		}
		for _, c := range ready {
			skill, task, refusal := rt.checkTask(parent, c)
			if refusal != "" {
				if err := db.CompleteToolCall(ctx, tx, c, refusal, true); err != nil {
					return err
				}
				continue
			}
			moved, err := db.SetToolCallState(ctx, tx, c.ID, db.CallDelegated, db.CallReady)
			if err != nil {
				return err
			}
			if !moved {
				continue
			}
			model := rt.skillModel(skill)
			if model == "" {
				model = parent.Model // the parent's choice, not today's default
			}
			child, err := db.CreateSubagent(ctx, tx, db.NewSubagent{
				ParentID: parent.ID, CallID: c.ID, Skill: skill, Title: db.TitleFromPrompt(task), Model: model,
			})
			if err != nil {
				return err
			}
			if _, err := db.AddMessage(ctx, tx, db.Message{ThreadID: child.ID, Role: db.RoleUser, Content: task}); err != nil {
				return err
			}
			if err := rt.advance(ctx, tx, child.ID); err != nil {
				return err
			}
		}
		return nil
	})
}

// skipInStep reports whether a tool step leaves a call alone: a task call
// belongs to its sub-agent (delegate started it, or refused it, in this
// step already).
func skipInStep(c db.ToolCallRow) bool {
	return c.State == db.CallDelegated || c.Name == tools.TaskTool && c.State == db.CallReady
}

// settle moves on a run from its open calls, when no step works on it
// (fromStep false: a sub-agent changed) or when the step working on it ends
// (fromStep true): its next step when no call is open; Action while a call
// of its own or one of its sub-agents waits for a person; a step for calls
// ready to run; otherwise it rests, running with no job, until a sub-agent
// ends. A run that is running with no lease may have a step queued (after
// a decision): that step settles it at its end, so settle leaves it alone
// where the step would do the same.
func (rt *Runtime) settle(ctx context.Context, tx pgx.Tx, id int64, status string, fromStep bool) error {
	open, err := db.OpenToolCalls(ctx, tx, id)
	if err != nil {
		return err
	}
	var waits, delegated, ready bool
	for _, c := range open {
		switch {
		case c.AwaitsDecision():
			waits = true
		case c.State == db.CallDelegated:
			delegated = true
		default:
			ready = true
		}
	}
	if !waits && delegated {
		if waits, err = db.SubagentWaiting(ctx, tx, id); err != nil {
			return err
		}
	}
	resting := fromStep || status == db.StatusWaiting // no step is queued
	switch {
	case len(open) == 0:
		return rt.advance(ctx, tx, id)
	case waits:
		if status == db.StatusWaiting && !fromStep || !resting && ready {
			return nil
		}
		_, err := db.EndRun(ctx, tx, id, db.StatusWaiting, "")
		return err
	case ready:
		if resting {
			return rt.advance(ctx, tx, id)
		}
	case resting:
		return db.ParkRun(ctx, tx, id)
	}
	return nil
}

// endRun ends a run (db.EndRun) and, for a sub-agent, tells its parent in
// the same transaction: an ended sub-agent answers the parent's task call,
// and the parent goes on, waits or rests (settle).
func (rt *Runtime) endRun(ctx context.Context, tx pgx.Tx, threadID int64, status, msg string) error {
	gen, err := db.EndRun(ctx, tx, threadID, status, msg)
	if err != nil {
		return err
	}
	if err := rt.notifyRunEnd(ctx, tx, threadID, gen, status, msg); err != nil {
		return err
	}
	link, ok, err := db.ParentOf(ctx, tx, threadID)
	if err != nil || !ok {
		return err
	}
	parent, err := db.LockRun(ctx, tx, link.ParentID)
	if err != nil {
		return err
	}
	if status != db.StatusWaiting {
		c, err := db.GetToolCall(ctx, tx, link.CallID)
		if err != nil {
			return err
		}
		// A call no longer delegated was answered already: the parent
		// was cancelled.
		if c.State == db.CallDelegated {
			result, isError, err := taskResult(ctx, tx, threadID, link.Skill, status, msg)
			if err != nil {
				return err
			}
			if err := db.CompleteToolCall(ctx, tx, c, result, isError); err != nil {
				return err
			}
		}
	}
	return rt.settleParent(ctx, tx, link.ParentID, parent)
}

// taskResult is what a parent's task call gets from its sub-agent's end.
func taskResult(ctx context.Context, tx pgx.Tx, childID int64, skill, status, msg string) (string, bool, error) {
	switch status {
	case db.StatusDone:
		answer, err := db.FinalAnswer(ctx, tx, childID)
		if err != nil {
			return "", false, err
		}
		if strings.TrimSpace(answer) == "" {
			return fmt.Sprintf("The sub-agent (skill %s) finished without an answer.", skill), false, nil
		}
		return tools.ClipText(answer, maxTaskResult), false, nil
	case db.StatusFailed:
		return fmt.Sprintf("The sub-agent (skill %s) failed: %s", skill, msg), true, nil
	}
	return fmt.Sprintf("The sub-agent (skill %s) did not finish: %s", skill, msg), true, nil
}

// settleParent settles a parent after a change of one of its sub-agents,
// unless its run has ended or a step of its own works on it (that step
// settles it when it ends).
func (rt *Runtime) settleParent(ctx context.Context, tx pgx.Tx, parentID int64, s db.RunState) error {
	if s.Finished() || s.LeaseJob != nil {
		return nil
	}
	return rt.settle(ctx, tx, parentID, s.Status, false)
}

// resumeParent settles the parent of a sub-agent whose run goes on after a
// decision: the parent leaves Action unless something else waits there.
func (rt *Runtime) resumeParent(ctx context.Context, tx pgx.Tx, t db.Thread) error {
	if t.ParentThreadID == nil {
		return nil
	}
	s, err := db.LockRun(ctx, tx, *t.ParentThreadID)
	if err != nil {
		return err
	}
	return rt.settleParent(ctx, tx, *t.ParentThreadID, s)
}

// errSubagentThread refuses to reply to or retry a sub-agent on its own: it
// answers the thread that delegated it, which carries on from its end.
var errSubagentThread = refusal.New(refusal.Conflict, "", "this thread is a sub-agent's: it answers the thread that delegated it and cannot be continued or retried on its own; continue that thread instead")

// cancelSubagents cancels the sub-agents Cancel locked (LockSubagents) with
// their waiting calls, in the caller's transaction, and returns the step
// jobs holding them, to interrupt once it commits. Their parents' calls are
// the caller's to answer.
func (rt *Runtime) cancelSubagents(ctx context.Context, tx pgx.Tx, subs []db.ActiveRun, who string) ([]int64, error) {
	var leases []int64
	for _, s := range subs {
		if s.LeaseJob != nil {
			leases = append(leases, *s.LeaseJob)
		}
		open, err := db.OpenToolCalls(ctx, tx, s.ID)
		if err != nil {
			return nil, err
		}
		for _, c := range open {
			if c.State == db.CallRunning {
				continue // as in Cancel: the executing job writes its result
			}
			msg := "Cancelled with the thread that delegated this task, by " + who + ", before this call ran."
			if err := db.CompleteToolCall(ctx, tx, c, msg, true); err != nil {
				return nil, err
			}
		}
		if _, err := db.EndRun(ctx, tx, s.ID, db.StatusCancelled, "Cancelled with the thread that delegated it, by "+who+"."); err != nil {
			return nil, err
		}
	}
	return leases, nil
}
