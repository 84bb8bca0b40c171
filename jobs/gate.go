package jobs

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"pizzabot/agent"
	"pizzabot/db"
	"pizzabot/tools"
)

// Gates: whether a tool call runs, waits for a person, or is refused.
//
// Every call a run makes is decided here, and only here: the model's calls
// (modelStep), a sub-agent's calls (the same, with its ancestors' rules),
// and the calls a run_js script makes (scriptBridge). The rules, strongest
// first:
//
//  1. The server's tool policy (settings, db.SettingToolPolicy):
//     "deny" hides the tool and refuses a call; "ask" makes every call wait.
//     Deny beats ask beats allow (agent.ToolPolicy.Verdict).
//  2. The default, for a tool the policy says nothing about: a tool with
//     effects outside the database (host file writes, MCP tools: Call
//     tools that are not Idempotent) asks; the others run.
//  3. The run's skill's interruptOn, and the interruptOn of the skill of
//     every run above it (a sub-agent is gated by its parent's rules too):
//     each can add a gate, none can remove one. The decisions allowed are
//     those every gating rule allows (the strictest).
//
// A policy "allow" only lifts the default: it never lifts a skill's gate.
//
// Who decides an asking call (docs/team.md): each rule may name approvers
// (interruptOn's approvers, the policy's routes) and ask for four eyes
// (distinctApprover); the gate keeps them all, so a skill narrows who
// decides and never widens it. Runtime.Decide applies them
// (db.DecideCheck), and so do the queues: a routed call waits in its
// approvers' Action, whoever started the run (webhook and schedule runs
// included: their owner).
// The rules are read at each decision, through the caller's Querier: inside
// a transaction, through the transaction.
//
// By when (deadline.go): each asking rule may give a timeout (interruptOn's
// timeout and onTimeout, the policy's routes'); the call's deadline is the
// shortest, with that rule's onTimeout, except for "approve" (gateDeadline):
// it holds only when every rule that made the call ask, and every route,
// says approve, and then at the latest of their deadlines (one firing
// decides the call only once every rule's deadline has come); and never
// for a tool acting outside the database, a four-eyes gate, a call routed
// to approvers or a parent skill's gate (a person is what those ask for):
// the deadline rejects instead. A rule without a timeout lets the call wait.
//
// Reminders and escalation (deadline.go): the shortest remindAfter of the
// rules reminds the call's deciders. escalateTo adds principals to who may
// decide the call (after the shortest escalateAfter, or at the deadline
// with onTimeout escalate), but only those every rule naming approvers
// names in its own escalateTo: an escalation never widens a route it is not
// part of. With nobody left, an onTimeout escalate rejects instead.

// gateRules are the rules a run's calls are decided by.
type gateRules struct {
	policy agent.ToolPolicy
	// policyErr: the stored policy cannot be read; every call asks.
	policyErr error
	skills    []gateSkill // the run's own first, then its ancestors'
}

// gateSkill is the skill of the run or of a run above it.
type gateSkill struct {
	name      string
	skill     *agent.Skill // nil: no longer available, every call asks
	inherited bool
}

// maxGateDepth bounds the walk up the sub-agents' parents.
const maxGateDepth = 16

// gateRules reads the rules for the calls of thread t: the policy and the
// skills of t and of every thread above it, through q.
func (rt *Runtime) gateRules(ctx context.Context, q db.Querier, t db.Thread) (gateRules, error) {
	raw, err := db.GetServerSetting(ctx, q, db.SettingToolPolicy)
	if err != nil {
		return gateRules{}, err
	}
	return rt.gateRulesOf(ctx, q, t, raw)
}

// gateRulesOf is gateRules with the tool policy already read (raw, the
// setting's value).
func (rt *Runtime) gateRulesOf(ctx context.Context, q db.Querier, t db.Thread, raw string) (gateRules, error) {
	var r gateRules
	var err error
	if r.policy, err = agent.ParseToolPolicy([]byte(raw)); err != nil {
		// Checked when saved, so only a hand edit gets here: fail closed.
		r.policyErr = err
		if rt.cfg.Logger != nil {
			rt.cfg.Logger.ErrorContext(ctx, "the stored tool policy cannot be read: every tool call asks", "err", err)
		}
	}
	for depth := 0; ; depth++ {
		if t.Skill != "" {
			s, _, err := rt.runSkill(ctx, q, t.ID, t.Skill)
			if err != nil {
				return r, err
			}
			r.skills = append(r.skills, gateSkill{name: t.Skill, skill: s, inherited: depth > 0})
		}
		if t.ParentThreadID == nil {
			return r, nil
		}
		if depth == maxGateDepth {
			return r, fmt.Errorf("thread %d: sub-agents nest deeper than %d", t.ID, maxGateDepth)
		}
		if t, err = db.GetRunThread(ctx, q, *t.ParentThreadID); err != nil {
			return r, err
		}
	}
}

// gate decides a call of tool name in thread threadID, reading the rules
// through q (the caller's transaction, if it holds one). It is the one
// entry point for callers that decide a single call, such as a run_js
// script's tools.call.
func (rt *Runtime) gate(ctx context.Context, q db.Querier, threadID int64, name string) (tools.Gate, error) {
	t, err := db.GetRunThread(ctx, q, threadID)
	if err != nil {
		return tools.Gate{}, err
	}
	r, err := rt.gateRules(ctx, q, t)
	if err != nil {
		return tools.Gate{}, err
	}
	tool, known := rt.cfg.Tools.Get(name)
	return r.decide(name, tool, known), nil
}

// decide applies the rules to a call of tool name.
func (r gateRules) decide(name string, tool tools.Tool, known bool) tools.Gate {
	aliases := policyAliases(name, tool, known)
	verdict, entry := r.policy.Verdict(name, aliases...)
	if verdict == agent.PolicyDeny {
		return tools.Gate{Deny: true, Reason: "server policy: deny " + entry}
	}
	if known && tool.Ask {
		return tools.Gate{} // ask_user is a question for a person already
	}
	var g tools.Gate
	restricted := false // AllowedDecisions is some rule's list, narrowed by the others'
	var reasons, descs []string
	var dl gateDeadline
	var nudge gateNudges
	ask := func(reason string, in agent.Interrupt) {
		g.Ask = true
		dl.add(in, true)
		nudge.add(in, len(in.Approvers) > 0)
		reasons = append(reasons, reason)
		g.Route(in.Approvers, in.DistinctApprover)
		switch {
		case in.AllowedDecisions == nil: // the policy's: any decision
		case !restricted:
			g.AllowedDecisions, restricted = slices.Clone(in.AllowedDecisions), true
		default:
			g.AllowedDecisions = slices.DeleteFunc(g.AllowedDecisions, func(d string) bool { return !in.Allows(d) })
		}
		if in.Description != "" && !slices.Contains(descs, in.Description) {
			descs = append(descs, in.Description)
		}
	}
	// The policy's own asks are bound by its routes' deadline.
	var policyIn agent.Interrupt
	for _, route := range r.policy.RoutesFor(name, aliases...) {
		if in := route.Interrupt(); in.Timeout > 0 {
			policyIn = in
			break
		}
	}
	switch {
	case r.policyErr != nil:
		ask("server policy cannot be read, so every call asks", agent.Interrupt{})
	case verdict == agent.PolicyAsk:
		ask("server policy: ask "+entry, policyIn)
	case verdict == agent.PolicyUnset && outsideEffects(name, tool, known):
		ask("server policy default: "+name+" acts outside Pizza Bot, so it asks unless the policy allows it", policyIn)
	}
	inheritedAsk := false
	for _, s := range r.skills {
		who := "skill " + s.name
		if s.inherited {
			who = "inherited from parent skill " + s.name
		}
		if s.skill == nil {
			ask(who+": the skill is no longer available, so every call asks", agent.Interrupt{})
			inheritedAsk = true
			continue
		}
		if in, ok := s.skill.InterruptFor(name); ok {
			ask(who+": interruptOn", in)
			inheritedAsk = inheritedAsk || s.inherited
		}
	}
	if !g.Ask {
		return tools.Gate{}
	}
	// The policy's routes say who decides a call that asks; they never
	// make a call ask by themselves.
	for _, route := range r.policy.RoutesFor(name, aliases...) {
		g.Route(route.Approvers, route.DistinctApprover)
		dl.add(route.Interrupt(), false)
		nudge.add(route.Interrupt(), len(route.Approvers) > 0)
		if len(route.Approvers) > 0 {
			reasons = append(reasons, "server policy: routed to "+db.WaitingFor([][]string{route.Approvers}))
		}
	}
	if g.DistinctApprover {
		reasons = append(reasons, "four eyes: whoever started the run may not decide")
	}
	switch {
	case !restricted:
		g.AllowedDecisions = slices.Clone(agent.DefaultDecisions)
	case len(g.AllowedDecisions) == 0:
		// The rules allow nothing in common: only the strictest remains.
		g.AllowedDecisions = []string{db.DecisionReject}
	}
	g.Timeout, g.OnTimeout = dl.resolve()
	g.RemindAfter, g.EscalateTo = nudge.remind, nudge.to()
	why := ""
	if len(g.EscalateTo) > 0 {
		g.EscalateAfter = nudge.after
	} else if g.OnTimeout == agent.OnTimeoutEscalate {
		g.OnTimeout = agent.OnTimeoutReject
		why = " (escalateTo names nobody every rule routing the call agrees to, so there is nobody to escalate to)"
	}
	if g.OnTimeout == agent.OnTimeoutApprove {
		switch {
		case outsideEffects(name, tool, known):
			// Refused at load (Runtime.Skills, CheckToolPolicy); a tool
			// that changed since rejects instead.
			why = " (" + name + " acts outside Pizza Bot, so nobody's silence approves it)"
		case g.DistinctApprover:
			why = " (four eyes: a deadline never approves in a second person's place)"
		case len(g.Approvers) > 0:
			why = " (routed to its approvers: a deadline never approves in their place)"
		case inheritedAsk:
			why = " (a parent skill's gate asks for it: a deadline never approves in its place)"
		}
		if why != "" {
			g.OnTimeout = agent.OnTimeoutReject
		}
	}
	if g.EscalateAfter > 0 {
		reasons = append(reasons, "nobody decides within "+agent.FormatGateTimeout(g.EscalateAfter)+": also asked, "+db.WaitingFor([][]string{g.EscalateTo}))
	}
	if g.Timeout > 0 {
		words := onTimeoutWords(g.OnTimeout)
		if g.OnTimeout == agent.OnTimeoutEscalate {
			words += ", " + db.WaitingFor([][]string{g.EscalateTo})
		}
		reasons = append(reasons, "nobody decides within "+agent.FormatGateTimeout(g.Timeout)+": "+words+why)
	}
	if g.RemindAfter > 0 {
		reasons = append(reasons, "a reminder every "+agent.FormatGateTimeout(g.RemindAfter)+" while it waits")
	}
	switch {
	case r.policyErr != nil:
		g.RememberRefused = "the server policy cannot be read"
	case g.DistinctApprover:
		g.RememberRefused = "four eyes: each call needs someone else's decision"
	case len(g.Approvers) > 0:
		g.RememberRefused = "the call is routed to its approvers, who decide each one"
	case inheritedAsk:
		g.RememberRefused = "a parent skill's gate asks for each call"
	default:
		g.Rememberable, g.RememberRefused = r.policy.RememberPermitted(name, outsideEffects(name, tool, known), aliases...)
	}
	g.Reason = strings.Join(reasons, "; ")
	g.Description = strings.Join(descs, "\n")
	return g
}

// gateDeadline gathers the deadlines of the rules that decide one call.
type gateDeadline struct {
	timed []agent.Interrupt // the rules with a timeout
	// untimed: a rule that made the call ask has no timeout, so it lets
	// the call wait for a person: nothing approves it by itself.
	untimed bool
}

// add counts a rule's deadline; asking says the rule made the call ask
// (a route only says who decides, and by when).
func (d *gateDeadline) add(in agent.Interrupt, asking bool) {
	switch {
	case in.Timeout > 0:
		d.timed = append(d.timed, in)
	case asking:
		d.untimed = true
	}
}

// resolve returns the call's deadline and what it does: the shortest
// timeout with its rule's onTimeout (on a tie, not approve); approve only
// when every rule says approve, at the latest of their timeouts, so that
// it never decides before a rule's own deadline has come; a shortest
// approve that not every rule agrees with rejects.
func (d gateDeadline) resolve() (time.Duration, string) {
	if len(d.timed) == 0 {
		return 0, ""
	}
	all := !d.untimed
	first, last := d.timed[0], time.Duration(0)
	for _, in := range d.timed {
		all = all && in.OnTimeout == agent.OnTimeoutApprove
		if in.Timeout < first.Timeout || (in.Timeout == first.Timeout && first.OnTimeout == agent.OnTimeoutApprove) {
			first = in
		}
		last = max(last, in.Timeout)
	}
	switch {
	case all:
		return last, agent.OnTimeoutApprove
	case first.OnTimeout == agent.OnTimeoutApprove:
		return first.Timeout, agent.OnTimeoutReject
	}
	return first.Timeout, first.OnTimeout
}

// gateNudges gathers the reminders and escalations of the rules that
// decide one call.
type gateNudges struct {
	remind time.Duration // the shortest remindAfter
	after  time.Duration // the shortest escalateAfter
	any    []string      // every rule's escalateTo
	// routing are the escalateTo of each rule that names approvers.
	routing [][]string
}

// add counts a rule's keys; routes says it names approvers.
func (n *gateNudges) add(in agent.Interrupt, routes bool) {
	if in.RemindAfter > 0 && (n.remind == 0 || in.RemindAfter < n.remind) {
		n.remind = in.RemindAfter
	}
	if len(in.EscalateTo) > 0 && in.EscalateAfter > 0 && (n.after == 0 || in.EscalateAfter < n.after) {
		n.after = in.EscalateAfter
	}
	for _, p := range in.EscalateTo {
		if !slices.Contains(n.any, p) {
			n.any = append(n.any, p)
		}
	}
	if routes {
		n.routing = append(n.routing, in.EscalateTo)
	}
}

// to returns whom the call may be escalated to: any rule's escalateTo,
// but when rules name approvers only the principals each of those rules
// escalates to too, so that an escalation never widens a route it did not
// write (a skill's escalateTo does not pass the admin's route).
func (n gateNudges) to() []string {
	return slices.DeleteFunc(slices.Clone(n.any), func(p string) bool {
		for _, r := range n.routing {
			if !slices.Contains(r, p) {
				return true
			}
		}
		return false
	})
}

// onTimeoutWords says what a call's deadline does, for the person deciding.
func onTimeoutWords(on string) string {
	switch on {
	case agent.OnTimeoutEscalate:
		return "it is escalated"
	case agent.OnTimeoutCancel:
		return "the run is cancelled"
	case agent.OnTimeoutApprove:
		return "the call runs as if approved"
	}
	return "the call is rejected as timed out"
}

// outsideEffects reports whether a tool may act outside the database, so
// that it asks by default: anything but database tools (Tx), read-only
// tools (Idempotent), questions (Ask), and the two tools whose effects are
// other tools' calls, each gated here on its own (task, run_js). A tool the
// toolbox does not know counts as acting outside.
func outsideEffects(name string, tool tools.Tool, known bool) bool {
	if !known {
		return true
	}
	switch {
	case tool.Tx != nil, tool.Idempotent, tool.Ask, name == tools.TaskTool, name == tools.RunJSTool:
		return false
	}
	return true
}

// offered drops the tools the policy denies from those offered to a run
// (tb knows them: an MCP tool's full name is matched too).
func (r gateRules) offered(specs []agent.ToolSpec, tb *tools.Toolbox) []agent.ToolSpec {
	return slices.DeleteFunc(specs, func(s agent.ToolSpec) bool {
		tool, known := tb.Get(s.Name)
		v, _ := r.policy.Verdict(s.Name, policyAliases(s.Name, tool, known)...)
		return v == agent.PolicyDeny
	})
}

// policyAliases are the names besides name that the tool policy matches
// for a call of tool name: an MCP tool's full name, mcp__<server>__<tool>,
// where MCPToolName shortened the name it is offered by (a server name of
// over 48 characters loses it), so that an entry such as
// mcp__<server>__* denies, asks or routes its tools as it says.
func policyAliases(name string, tool tools.Tool, known bool) []string {
	if !known || tool.Server == "" || tool.Remote == "" {
		return nil
	}
	if full := agent.MCPFullName(tool.Server, tool.Remote); full != name {
		return []string{full}
	}
	return nil
}
