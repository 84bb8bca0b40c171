package jobs

import (
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"pizzabot/agent"
	"pizzabot/db"
)

// The context a run keeps (docs/context.md). Every model step sends the
// conversation, and a model reads at most its context window of it. So a
// step fits the conversation to the window before it calls the model:
//
//   - A tool result larger than a share of the window is kept whole as a
//     scratch file of the thread (tool-results/...), and the model is sent a
//     preview, its size and the file's name: it reads the rest with
//     read_file's offset and length. The message itself stays whole: the
//     page shows the whole result.
//   - Before a request would pass compactAt (0.8, or the skill's) of the
//     window, the older turns are summarized by the same model into one
//     summary, kept with the run (db.Compaction): the request then carries
//     the task, the summary and the recent turns. Whole turns are kept (an
//     assistant message with its tool calls and all their results), with
//     the provider state of each kept assistant message: what was dropped
//     is summarized, never cut in half.
//   - A provider that refuses a request as too long for its window teaches
//     the window (db.LearnWindow), and the step compacts and asks again
//     instead of failing.
//
// Compaction is durable as every step is: the summary commits under the
// step's lease, with the usage of its model call. A crash before that
// commit makes one more summary call on the next job; after it, the next
// job finds the summary and uses it (one summary per range,
// db.InsertCompaction).

// defaultCompactAt is the share of the window past which a run compacts.
const defaultCompactAt = 0.8

// defaultLargeResultTokens is the size, estimated, from which a tool result
// is kept as a file (PIZZA_LARGE_RESULT_TOKENS).
const defaultLargeResultTokens = 20_000

// resultPreviewBytes is how much of a result kept as a file the model sees.
const resultPreviewBytes = 2000

// imageTokens is what an image shown to the model is counted for, as
// agent.EstimateMessage counts it.
const imageTokens = 1600

// resultDir is the scratch folder of the results kept as files.
const resultDir = "tool-results"

// contextError is a failure of the database (or a lost lease) met while
// fitting the conversation to the window: modelStep returns it as it is,
// for River to retry, where a provider's failure fails the run.
type contextError struct{ err error }

func (e *contextError) Error() string { return e.err.Error() }
func (e *contextError) Unwrap() error { return e.err }

// tooBigError is a conversation that compacting cannot fit in the window:
// its task or its last turn alone is too big.
type tooBigError struct {
	tokens, window int64
	refused        string // the provider's refusal, when it refused
}

func (e *tooBigError) Error() string {
	msg := fmt.Sprintf("The conversation does not fit the model's context window of %d tokens, even compacted: "+
		"the task or the last turn alone is about %d tokens, and nothing older is left to summarize. "+
		"Use a model with a larger window, or give the task in smaller parts (large texts as attachments the agent reads in parts).",
		e.window, e.tokens)
	if e.refused != "" {
		msg += " The provider said: " + e.refused
	}
	return msg
}

// window is a model's context window as a step uses it.
type window struct {
	tokens    int64
	compactAt float64
}

// limit is the context past which the step compacts.
func (w window) limit() int64 { return int64(float64(w.tokens) * w.compactAt) }

// largeResult is the size from which a tool result is kept as a file:
// PIZZA_LARGE_RESULT_TOKENS, at most three quarters of what the window
// holds before compacting, so that a result always fits with the rest.
func (w window) largeResult(getenv func(string) string) int64 {
	n := int64(defaultLargeResultTokens)
	if getenv != nil {
		if v, err := strconv.ParseInt(strings.TrimSpace(getenv("PIZZA_LARGE_RESULT_TOKENS")), 10, 64); err == nil && v > 0 {
			n = v
		}
	}
	return min(n, w.limit()*3/4)
}

// contextWindows is the table of windows set: PIZZA_CONTEXT_WINDOWS (checked
// at start) with the settings page's (checked when saved) over it, entry by
// entry. A value that does not parse counts as empty.
func (rt *Runtime) contextWindows(setting string) agent.WindowTable {
	t := agent.WindowTable{}
	if rt.cfg.Getenv != nil {
		if env, err := agent.ParseContextWindows(rt.cfg.Getenv("PIZZA_CONTEXT_WINDOWS")); err == nil {
			t = env
		}
	}
	if set, err := agent.ParseContextWindows(setting); err == nil {
		for k, n := range set {
			t[k] = n
		}
	}
	return t
}

// stepInWindow takes the model step of modelStep with the run's
// conversation fitted to the model's window: large results as files, older
// turns compacted. A provider that refuses the request as too long teaches
// the window, and the step compacts and asks again.
func (rt *Runtime) stepInWindow(ctx context.Context, jobID int64, a StepArgs, v db.RunView, skill *agent.Skill, in agent.StepInput) (*agent.StepOutput, error) {
	t := v.Thread
	state := v.Context // read with the run, for the thread's model
	if spec := in.Model.Spec.String(); spec != t.Model {
		var err error
		if state, err = db.ReadContextState(ctx, rt.cfg.Pool, t.ID, spec); err != nil {
			return nil, &contextError{err}
		}
	}
	w := window{tokens: rt.contextWindows(state.Windows).For(in.Model.Spec), compactAt: defaultCompactAt}
	if state.LearnedWindow > 0 && state.LearnedWindow < w.tokens {
		w.tokens = state.LearnedWindow
	}
	if skill != nil && skill.CompactAt > 0 {
		w.compactAt = skill.CompactAt
	}
	const attempts = 3
	for attempt := 1; ; attempt++ {
		msgs, err := rt.fitContext(ctx, jobID, a, v, &state, in, w, attempt > 1)
		if err != nil {
			return nil, err
		}
		in.Messages = msgs
		if v.Images > 0 {
			if err := rt.attachImages(ctx, t, in.Messages); err != nil { // see images.go
				return nil, &contextError{err}
			}
		}
		if in.Model.Wire == agent.WireAnthropic {
			if err := rt.attachDocuments(ctx, t, in.Messages); err != nil { // see images.go
				return nil, &contextError{err}
			}
		}
		out, err := rt.stepShowingImages(ctx, t.ID, in)
		named, exceeded := agent.ContextExceeded(err)
		if !exceeded {
			return out, err
		}
		sent := agent.EstimateRequest(in.System, in.Messages, in.Tools)
		if attempt == attempts {
			return nil, &tooBigError{tokens: sent, window: w.tokens, refused: err.Error()}
		}
		// The window in our estimate's units: the provider's figure when
		// it names one below what we sent, else a tenth under what we
		// sent (our estimate fell short of its tokenizer).
		learned := named
		if learned == 0 || learned >= sent {
			learned = sent * 9 / 10
		}
		learned = min(learned, w.tokens)
		rt.cfg.Logger.InfoContext(ctx, "the model refused a request as too long: compacting", "thread_id", t.ID,
			"model", t.Model, "estimated_tokens", sent, "window", learned)
		if err := db.LearnWindow(ctx, rt.cfg.Pool, in.Model.Spec.String(), learned); err != nil {
			return nil, &contextError{err}
		}
		w.tokens = learned
	}
}

// fitContext returns the conversation the step sends: v's messages with
// large results as files, and the older turns replaced by the compaction's
// summary when one stands. When the conversation would pass the window's
// limit (or force, after a refusal), it compacts first, committing the
// summary, and state's compaction becomes it.
func (rt *Runtime) fitContext(ctx context.Context, jobID int64, a StepArgs, v db.RunView, state *db.ContextState, in agent.StepInput, w window, force bool) ([]agent.Message, error) {
	msgs := toAgent(v.Messages)
	if err := rt.fileLargeResults(ctx, jobID, a, v.Messages, msgs, w.largeResult(rt.cfg.Getenv)); err != nil {
		return nil, err
	}
	// The task: what comes before the model's first answer.
	head := len(msgs)
	for i, m := range msgs {
		if m.Role == agent.RoleAssistant {
			head = i
			break
		}
	}
	sent, from := conversationAfter(v.Messages, msgs, head, state.Compaction)
	// The images shown with the task are attached after (images.go).
	est := contextTokens(in, sent, state) + int64(v.Images)*imageTokens
	if est <= w.limit() && !force {
		return sent, nil
	}
	// Compact: summarize msgs[from:cut], keep msgs[cut:]. A cut is at the
	// start of a turn (not a tool result), so a call and its results stay
	// together; the latest cut that keeps the recent turns under half the
	// limit, and at least the last turn.
	keep := w.limit() / 2
	cut := -1
	var tail int64
	for i := len(msgs) - 1; i > from; i-- {
		tail += agent.EstimateMessage(msgs[i])
		if msgs[i].Role == agent.RoleTool {
			continue
		}
		if cut >= 0 && tail > keep {
			break
		}
		cut = i
	}
	if cut < 0 {
		// Nothing older than the last turn to summarize.
		if est > w.tokens || force {
			return nil, &tooBigError{tokens: est, window: w.tokens}
		}
		return sent, nil // over the limit, under the window: it may fit
	}
	var prev string
	if c := state.Compaction; c != nil {
		prev = c.Summary
	}
	started := time.Now()
	summary, usage, err := rt.summarize(ctx, in, msgs[:head], prev, msgs[from:cut], w)
	if err != nil {
		return nil, err
	}
	c := db.Compaction{ThreadID: v.Thread.ID, FirstMessageID: v.Messages[from].ID, ThroughMessageID: v.Messages[cut-1].ID,
		Summary: summary, Model: v.Thread.Model, TokensBefore: est}
	if prev := state.Compaction; prev != nil {
		c.FirstMessageID = prev.FirstMessageID
	}
	after, _ := conversationAfter(v.Messages, msgs, head, &c)
	c.TokensAfter = agent.EstimateRequest(in.System, after, in.Tools)
	err = rt.commit(ctx, jobID, a, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := db.InsertCompaction(ctx, tx, c); err != nil {
			return err
		}
		// The summary's call is a model call of the run, counted and
		// priced as the others.
		return db.InsertStep(ctx, tx, db.Step{ThreadID: v.Thread.ID, Kind: "model", Model: v.Thread.Model,
			PromptTokens: usage.PromptTokens, CompletionTokens: usage.CompletionTokens,
			CacheReadTokens: usage.CacheReadTokens, CacheWriteTokens: usage.CacheWriteTokens,
			ReasoningTokens: usage.ReasoningTokens, StartedAt: started})
	})
	if err != nil {
		return nil, &contextError{err}
	}
	rt.cfg.Logger.InfoContext(ctx, "compacted the conversation", "thread_id", v.Thread.ID,
		"tokens_before", c.TokensBefore, "tokens_after", c.TokensAfter, "window", w.tokens)
	// What the provider reported last is of the conversation before.
	c.CreatedAt = time.Now()
	state.Compaction, state.LastTokens = &c, 0
	return after, nil
}

// conversationAfter is the conversation sent with compaction c (nil: none):
// the task (msgs[:head]) with c's summary, then the messages after c's
// range; and the index in msgs of the first message not summarized.
// The summary joins the task's last message, and a user message right
// after it joins too, so that roles still alternate as providers want.
func conversationAfter(rows []db.Message, msgs []agent.Message, head int, c *db.Compaction) ([]agent.Message, int) {
	if c == nil {
		return msgs, head
	}
	from := head
	for from < len(rows) && rows[from].ID <= c.ThroughMessageID {
		from++
	}
	out := make([]agent.Message, 0, head+1+len(msgs)-from)
	out = append(out, msgs[:head]...)
	block := "[Earlier work on this task, summarized to fit the model's context window. The whole transcript is kept; the latest turns follow as they happened.]\n\n" + c.Summary
	rest := msgs[from:]
	switch {
	case head > 0 && out[head-1].Role == agent.RoleUser:
		m := out[head-1]
		m.Content += "\n\n" + block
		out[head-1] = m
	default:
		out = append(out, agent.UserMessage(block))
	}
	if len(rest) > 0 && rest[0].Role == agent.RoleUser {
		m := out[len(out)-1]
		m.Content += "\n\n" + rest[0].Content
		out[len(out)-1] = m
		rest = rest[1:]
	}
	return append(out, rest...), from
}

// contextTokens is the context a request fills: the larger of its
// estimate and what the provider reported of the last call (its input and
// output) plus an estimate of what came after its answer. The provider's
// figure is used only when it was of the conversation as now compacted.
func contextTokens(in agent.StepInput, sent []agent.Message, state *db.ContextState) int64 {
	est := agent.EstimateRequest(in.System, sent, in.Tools)
	if state.LastTokens == 0 || (state.Compaction != nil && !state.LastStartedAt.After(state.Compaction.CreatedAt)) {
		return est
	}
	last := -1
	for i, m := range sent {
		if m.Role == agent.RoleAssistant {
			last = i
		}
	}
	if last < 0 {
		return est
	}
	reported := state.LastTokens
	for _, m := range sent[last+1:] {
		reported += agent.EstimateMessage(m)
	}
	return max(est, reported)
}

// summarySystem asks the model for a summary that lets it go on.
const summarySystem = `You summarize the earlier part of a background agent's run so that the agent can go on with its task without it: the earlier messages will be replaced by your summary. Write in Markdown, in the language of the task, under these headings:

## Task
What the user asked, with every requirement and constraint given so far.
## Done and found
What was done (tools called, files written in the scratch space, with their names) and what was found: facts, figures, names, URLs, quotes the rest of the work needs. Keep exact values.
## Left to do
What remains of the task, in order.
## Open decisions
Questions not settled, choices made and why, anything the user was asked or told.

Be complete but dense: no pleasantries, no commentary on the summary itself.`

// summarize asks the model for a summary of turns (following the previous
// summary prev, if any) for the run whose task is task. The transcript is
// rendered as text, each message cut to fit the window when needed.
func (rt *Runtime) summarize(ctx context.Context, in agent.StepInput, task []agent.Message, prev string, turns []agent.Message, w window) (string, agent.Usage, error) {
	budget := w.limit()*3/4 - agent.EstimateTokens(prev) - agent.EstimateRequest("", task, nil) - agent.EstimateTokens(summarySystem)
	for try := 0; ; try++ {
		var b strings.Builder
		b.WriteString("<task>\n")
		for _, m := range task {
			b.WriteString(m.Content)
			b.WriteString("\n")
		}
		b.WriteString("</task>\n\n")
		if prev != "" {
			b.WriteString("<summary-so-far>\n" + prev + "\n</summary-so-far>\n\n")
		}
		b.WriteString("<transcript>\n" + renderTurns(turns, max(budget, 1024)*4) + "</transcript>\n\n")
		b.WriteString("Write the summary of the task's work so far (the summary so far, if any, and the transcript after it), under the four headings.")
		called := time.Now()
		out, err := agent.Step(ctx, agent.StepInput{Model: in.Model, System: summarySystem, Messages: []agent.Message{agent.UserMessage(b.String())}, Effort: in.Effort})
		var usage agent.Usage
		if out != nil {
			usage = out.Usage
		}
		rt.cfg.Metrics.ModelCall(providerOf(in.Model.Spec.String()), modelOutcome(err), time.Since(called), usage.InputTokens(), usage.CompletionTokens)
		if _, exceeded := agent.ContextExceeded(err); exceeded && try < 2 {
			budget /= 2
			continue
		}
		if err != nil {
			return "", usage, err
		}
		text := strings.TrimSpace(out.Assistant.Content)
		if text == "" {
			return "", usage, errors.New("the model answered the request to summarize the earlier conversation with nothing")
		}
		return text, usage, nil
	}
}

// renderTurns renders messages as a transcript of at most about limit
// bytes: each message's text is cut in its middle when they would not fit.
func renderTurns(ms []agent.Message, limit int64) string {
	var total int64
	for _, m := range ms {
		total += int64(len(m.Content) + 64)
		for _, c := range m.ToolCalls {
			total += int64(len(c.Name) + len(c.Arguments) + 16)
		}
	}
	per := int64(-1) // no cut
	if total > limit && len(ms) > 0 {
		per = max(limit/int64(len(ms)), 400)
	}
	var b strings.Builder
	for _, m := range ms {
		switch m.Role {
		case agent.RoleTool:
			label := "result of " + m.Name
			if m.IsError {
				label = "error of " + m.Name
			}
			fmt.Fprintf(&b, "[%s]\n%s\n\n", label, cutMiddle(m.Content, per))
		default:
			fmt.Fprintf(&b, "[%s]\n", m.Role)
			if m.Content != "" {
				b.WriteString(cutMiddle(m.Content, per) + "\n")
			}
			for _, c := range m.ToolCalls {
				fmt.Fprintf(&b, "-> calls %s %s\n", c.Name, cutMiddle(c.Arguments, per))
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

// cutMiddle keeps the start and the end of s within n bytes (n < 0: all).
func cutMiddle(s string, n int64) string {
	if n < 0 || int64(len(s)) <= n {
		return s
	}
	half := int(n / 2)
	return validPrefix(s, half) + fmt.Sprintf("\n[... %d bytes left out ...]\n", len(s)-2*half) + validSuffix(s, half)
}

// validPrefix is the longest prefix of s of at most n bytes that does not
// cut a UTF-8 character.
func validPrefix(s string, n int) string {
	if n >= len(s) {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// validSuffix is validPrefix's counterpart at the end of s.
func validSuffix(s string, n int) string {
	if n >= len(s) {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

// resultPath is the scratch file a large tool result is kept in, named by
// its call's id (tool-results/call_abc.txt) so that the model can tell
// which result it is; taken, with other content, by a result of an earlier
// call of the same id (some providers number calls per turn), the message's
// id tells them apart.
func resultPath(m db.Message, taken bool) string {
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '-'
	}, m.ToolCallID)
	if len(name) > 100 {
		name = name[:100]
	}
	if name == "" || taken {
		return fmt.Sprintf("%s/%s-%d.txt", resultDir, name, m.ID)
	}
	return fmt.Sprintf("%s/%s.txt", resultDir, name)
}

// keptResults reports where each large result of rows is kept, and whether
// all of them are, from the files' digests (one read, no transaction): a
// step whose large results were kept by an earlier one neither reads them
// back nor commits.
func (rt *Runtime) keptResults(ctx context.Context, threadID int64, rows []db.Message, large []int) (map[int]string, bool, error) {
	var candidates []string
	for _, i := range large {
		candidates = append(candidates, resultPath(rows[i], false), resultPath(rows[i], true))
	}
	sums, err := db.ScratchDigests(ctx, rt.cfg.Pool, threadID, candidates)
	if err != nil {
		return nil, false, err
	}
	paths := map[int]string{}
	for _, i := range large {
		sum := fmt.Sprintf("%x", md5.Sum([]byte(rows[i].Content)))
		p := resultPath(rows[i], false)
		if have, ok := sums[p]; ok && have != sum {
			p = resultPath(rows[i], true) // the name is taken by another file
		}
		if sums[p] != sum {
			return map[int]string{}, false, nil
		}
		paths[i] = p
	}
	return paths, true, nil
}

// fileLargeResults keeps the tool results of rows above limit tokens as
// scratch files (those not kept yet, in one commit under the lease) and
// puts a preview in their place in msgs. A result the storage quota
// refuses is cut instead, and the model told so.
func (rt *Runtime) fileLargeResults(ctx context.Context, jobID int64, a StepArgs, rows []db.Message, msgs []agent.Message, limit int64) error {
	var large []int
	for i, m := range rows {
		if m.Role == db.RoleTool && agent.EstimateTokens(m.Content) > limit {
			large = append(large, i)
		}
	}
	if len(large) == 0 {
		return nil
	}
	refused := map[int]error{}
	paths, kept, err := rt.keptResults(ctx, a.ThreadID, rows, large)
	if err != nil {
		return &contextError{err}
	}
	if !kept {
		// Some are not kept yet: write them under the lease, checking
		// each file again in the transaction.
		err = rt.commit(ctx, jobID, a, func(ctx context.Context, tx pgx.Tx) error {
			clear(refused)
			for _, i := range large {
				p := resultPath(rows[i], false)
				kept, err := db.ReadScratch(ctx, tx, a.ThreadID, p)
				if err == nil && kept != rows[i].Content {
					p = resultPath(rows[i], true)
					kept, err = db.ReadScratch(ctx, tx, a.ThreadID, p)
				}
				paths[i] = p
				if err == nil {
					continue // kept by an earlier step
				}
				if !errors.Is(err, db.ErrNotFound) {
					return err
				}
				err = db.WriteScratch(ctx, tx, a.ThreadID, p, rows[i].Content, 0)
				var qe *db.QuotaError
				if errors.As(err, &qe) {
					refused[i] = err
					continue
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err != nil {
		return &contextError{err}
	}
	for _, i := range large {
		m := rows[i]
		size := len(m.Content)
		preview := validPrefix(m.Content, resultPreviewBytes)
		if qerr, ok := refused[i]; ok {
			msgs[i].Content = fmt.Sprintf("[This result is %d bytes (about %d tokens), too large for the conversation, and it could not be kept as a file (%v). Its first %d bytes:]\n%s\n[... the rest is left out.]",
				size, agent.EstimateTokens(m.Content), qerr, len(preview), preview)
			continue
		}
		msgs[i].Content = fmt.Sprintf("[This result is %d bytes (about %d tokens), too large for the conversation: it is kept whole in the scratch file %s. "+
			"Read it in parts with read_file (path %q, with offset and length in bytes, e.g. 40000 bytes at a time), and note what you need as you go. Its first %d bytes:]\n%s\n[... %d more bytes in %s]",
			size, agent.EstimateTokens(m.Content), paths[i], paths[i], len(preview), preview, size-len(preview), paths[i])
	}
	return nil
}
