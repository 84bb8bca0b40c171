// Package jobs is the run service: it starts, continues, decides, cancels
// and retries runs for the handlers (Runtime, built by New from a Config),
// and works them through River jobs, each committing with the state change
// it acts on.
//
//   - runtime.go, start_tx.go: the calls people make (Start, Reply, Retry,
//     Cancel, Decide) and the model settings.
//   - step.go: the run_step job, one step of a run (a model call or the
//     ready tool calls); each branch says which crash it handles.
//   - gate.go: the one decision point for every tool call (policy, skills'
//     interruptOn, inherited gates).
//   - task.go: sub-agents (the task tool). images.go: images shown to the
//     model.
//   - schedule.go: the fire_schedules periodic job. rescue.go, liveness.go:
//     steps of dead processes handed over. prune.go: hourly retention.
//   - new.go: the River client and its workers.
//
// The tools a run calls live in package tools, which gets the run service
// through the tools.Host each call is given; MCP servers, plugins and
// stored skills live in package extensions, wired in by serve.go.
package jobs
