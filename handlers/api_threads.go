package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"pizzabot/apiv1"
	"pizzabot/db"
	"pizzabot/jobs"
)

// The threads of the JSON API: the same runs as the web's, through the same
// jobs.Runtime, so a thread started here shows in the inbox and the other way
// round. docs/api.md documents every route.

func toAPIAttachments(as []db.Attachment) []apiv1.Attachment {
	out := make([]apiv1.Attachment, 0, len(as))
	for _, a := range as {
		out = append(out, apiv1.Attachment{
			ID: a.ID, Name: a.Name, Size: a.Size, ContentType: a.ContentType,
			URL: "/attachments/" + strconv.FormatInt(a.ID, 10),
		})
	}
	return out
}

func toAPIThread(t db.Thread) apiv1.Thread {
	out := apiv1.Thread{
		ID: t.ID, Title: t.Title, Status: t.Status, Unread: t.Unread, Archived: t.Archived,
		Summary:   t.Summary(),
		Skill:     optional(t.Skill),
		Trigger:   apiv1.Trigger{Kind: t.TriggerKind, At: t.TriggerAt.UTC(), Ref: optional(t.TriggerRef)},
		URL:       "/threads/" + strconv.FormatInt(t.ID, 10),
		CreatedAt: t.CreatedAt.UTC(), UpdatedAt: t.UpdatedAt.UTC(),
		Role: t.Role, WaitingFor: t.WaitingFor(), Undecidable: t.Status == db.StatusWaiting && t.Undecidable,
	}
	if t.FolderID != nil {
		out.Folder = &apiv1.Folder{ID: *t.FolderID, Name: t.FolderName}
	}
	return out
}

// optional is nil for "": absent values are null in the API, not "".
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// apiArguments shows a tool call's arguments as the JSON the model sent, or
// as the raw text in a JSON string when it is not valid JSON (a model can
// send anything). The string is encoded as writeJSON encodes, without
// escaping HTML.
func apiArguments(raw string) json.RawMessage {
	if json.Valid([]byte(raw)) {
		return json.RawMessage(raw)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(raw) // a string always encodes
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// errThreadNotFound answers for a thread that does not exist or is another
// user's: the two look the same.
var errThreadNotFound = httpError{http.StatusNotFound, "thread not found"}

// apiThreadID parses the {id} of the path; a malformed id names nothing.
func apiThreadID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, errThreadNotFound
	}
	return id, nil
}

// threadErr says "thread not found" for an error that means the thread of
// the path is not the user's.
func threadErr(err error) error {
	if errors.Is(err, db.ErrNotFound) {
		return errThreadNotFound
	}
	return err
}

// apiCreateThread starts a thread: POST /api/v1/threads
// {"prompt": "...", "skill": "name", "folder": "name"} answers 201 with the
// thread, its run queued. The same fields as multipart/form-data, with
// files in "files", start it with the files attached (in the same
// transaction: a refused file leaves nothing behind); the answer lists them.
func (h *Handler) apiCreateThread(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	if err := h.checkRunRate(ctx); err != nil {
		return err
	}
	var req apiv1.CreateThreadRequest
	var uploads []jobs.Upload
	if isMultipart(r) {
		var closeUploads func()
		var err error
		if req, uploads, closeUploads, err = apiUploadRequest(w, r); err != nil {
			return err
		}
		defer closeUploads()
	} else if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	start := jobs.StartRequest{Prompt: req.Prompt, Skill: strings.TrimSpace(req.Skill), TriggerKind: db.TriggerManual, Files: uploads}
	if name := strings.TrimSpace(req.Folder); name != "" {
		f, err := db.GetFolderByName(ctx, h.pool, user.ID, name)
		if errors.Is(err, db.ErrNotFound) {
			return httpError{http.StatusBadRequest, fmt.Sprintf("there is no folder named %q", name)}
		}
		if err != nil {
			return err
		}
		start.FolderID = &f.ID
	}
	t, err := h.runs.Start(ctx, user, start)
	if errors.Is(err, db.ErrNotFound) {
		// The folder was deleted between the lookup and the start.
		return httpError{http.StatusBadRequest, fmt.Sprintf("there is no folder named %q", strings.TrimSpace(req.Folder))}
	}
	if err != nil {
		return err
	}
	// The run has started: its answer is not refused as busy once the
	// start's admission deadline passes (counting a PDF's pages may take
	// the rest of it).
	ctx = context.WithoutCancel(ctx)
	var as []db.Attachment
	if len(uploads) > 0 {
		if as, err = db.ListAttachments(ctx, h.pool, user.ID, t.ID); err != nil {
			return err
		}
	}
	w.Header().Set("Location", "/api/v1/threads/"+strconv.FormatInt(t.ID, 10))
	return writeJSON(w, http.StatusCreated, apiv1.CreatedThread{Thread: toAPIThread(t), Attachments: toAPIAttachments(as)})
}

// apiUploadRequest reads a multipart POST /api/v1/threads: the fields of
// apiv1.CreateThreadRequest and the files of "files", checked against the
// attachment limits. Unknown fields are refused, as in the JSON body. The
// returned function closes the files.
func apiUploadRequest(w http.ResponseWriter, r *http.Request) (apiv1.CreateThreadRequest, []jobs.Upload, func(), error) {
	none := func() {}
	if err := parseUploadForm(w, r); err != nil {
		var he httpError
		if errors.As(err, &he) && he.status == http.StatusRequestEntityTooLarge {
			he.msg = fmt.Sprintf("the body is larger than %d MB", maxUploadBody>>20)
			return apiv1.CreateThreadRequest{}, nil, none, he
		}
		return apiv1.CreateThreadRequest{}, nil, none, httpError{http.StatusBadRequest, "the multipart/form-data body could not be read"}
	}
	known := []string{"prompt", "skill", "folder"}
	for k, v := range r.MultipartForm.Value {
		if !slices.Contains(known, k) {
			return apiv1.CreateThreadRequest{}, nil, none, httpError{http.StatusBadRequest, fmt.Sprintf("unknown field %q (known: prompt, skill, folder, and files for the files)", k)}
		}
		if len(v) > 1 {
			return apiv1.CreateThreadRequest{}, nil, none, httpError{http.StatusBadRequest, fmt.Sprintf("field %q is given %d times", k, len(v))}
		}
	}
	for k := range r.MultipartForm.File {
		if k != uploadField {
			return apiv1.CreateThreadRequest{}, nil, none, httpError{http.StatusBadRequest, fmt.Sprintf("files go in the field %q, not %q", uploadField, k)}
		}
	}
	req := apiv1.CreateThreadRequest{Prompt: r.PostForm.Get("prompt"), Skill: r.PostForm.Get("skill"), Folder: r.PostForm.Get("folder")}
	files := uploadedFiles(r)
	if status, msg := checkUploads(files); status != 0 {
		return apiv1.CreateThreadRequest{}, nil, none, httpError{status, msg}
	}
	uploads, closeUploads, err := openUploads(files)
	if err != nil {
		return apiv1.CreateThreadRequest{}, nil, none, err
	}
	return req, uploads, closeUploads, nil
}

// maxAPIPage bounds the threads of one page of a listing.
const maxAPIPage = 200

// apiListParams are the query parameters a listing takes.
var apiListParams = []string{"queue", "folder", "trigger", "q", "cursor", "limit"}

// apiListThreads lists the user's threads, newest activity first:
// GET /api/v1/threads?queue=all|unread|action&folder=ID|NAME&trigger=KIND&q=QUERY&cursor=C&limit=N.
// next_cursor, when not null, asks for the next page.
func (h *Handler) apiListThreads(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	v := r.URL.Query()
	for k := range v {
		if !slices.Contains(apiListParams, k) {
			return httpError{http.StatusBadRequest, fmt.Sprintf("unknown query parameter %q (known: %s)", k, strings.Join(apiListParams, ", "))}
		}
	}
	f := db.ThreadFilter{Queue: db.QueueAll}
	if s := v.Get("queue"); s != "" {
		q, ok := db.ParseQueue(s)
		if !ok {
			return httpError{http.StatusBadRequest, fmt.Sprintf("queue %q is not one of all, unread, action", s)}
		}
		f.Queue = q
	}
	if s := v.Get("folder"); s != "" {
		id, err := h.apiListFolder(ctx, user.ID, s)
		if err != nil {
			return err
		}
		f.FolderID = id
	}
	if s := v.Get("trigger"); s != "" {
		if !slices.Contains(db.TriggerKinds, s) {
			return httpError{http.StatusBadRequest, fmt.Sprintf("trigger %q is not one of %s", s, strings.Join(db.TriggerKinds, ", "))}
		}
		f.Trigger = s
	}
	if s := strings.TrimSpace(v.Get("q")); s != "" {
		if len(s) > db.MaxSearchQuery {
			return httpError{http.StatusBadRequest, fmt.Sprintf("q is longer than %d bytes", db.MaxSearchQuery)}
		}
		f.Search = db.ParseSearch(s)
	}
	var after *db.Cursor
	if s := v.Get("cursor"); s != "" {
		c, err := db.ParseCursor(s)
		if err != nil {
			return httpError{http.StatusBadRequest, "cursor is not valid: pass next_cursor from the previous page as is"}
		}
		after = &c
	}
	limit := pageSize
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxAPIPage {
			return httpError{http.StatusBadRequest, fmt.Sprintf("limit must be a number from 1 to %d", maxAPIPage)}
		}
		limit = n
	}

	a, err := h.access(ctx)
	if err != nil {
		return err
	}
	threads, next, err := db.ListThreads(ctx, h.pool, a, f, after, limit)
	if err != nil {
		return err
	}
	counts, err := db.CountThreads(ctx, h.pool, a)
	if err != nil {
		return err
	}
	out := apiv1.ThreadList{
		Threads: make([]apiv1.Thread, 0, len(threads)),
		Counts:  apiv1.Counts{All: counts.All, Unread: counts.Unread, Action: counts.Action},
	}
	for _, t := range threads {
		at := toAPIThread(t)
		if f.Search.Raw != "" {
			snippet := t.Snippet.HTML()
			at.Snippet = &snippet
		}
		out.Threads = append(out.Threads, at)
	}
	if next != nil {
		s := next.String()
		out.NextCursor = &s
	}
	return writeJSON(w, http.StatusOK, out)
}

// apiFolderParam finds the user's folder named by a query parameter: an id,
// or else a name (a folder may well be called "2026").
// apiListFolder is apiFolderParam for a listing, which may also name a
// folder shared with the user, by id.
func (h *Handler) apiListFolder(ctx context.Context, userID int64, s string) (int64, error) {
	if id, err := strconv.ParseInt(s, 10, 64); err == nil && id > 0 {
		a, err := h.access(ctx)
		if err != nil {
			return 0, err
		}
		if _, ok := a.Folder(id); ok {
			return id, nil
		}
	}
	f, err := h.apiFolderParam(ctx, userID, s)
	return f.ID, err
}

func (h *Handler) apiFolderParam(ctx context.Context, userID int64, s string) (db.Folder, error) {
	if id, err := strconv.ParseInt(s, 10, 64); err == nil && id > 0 {
		f, err := db.GetFolder(ctx, h.pool, userID, id)
		if !errors.Is(err, db.ErrNotFound) {
			return f, err
		}
	}
	f, err := db.GetFolderByName(ctx, h.pool, userID, s)
	if errors.Is(err, db.ErrNotFound) {
		return db.Folder{}, httpError{http.StatusBadRequest, fmt.Sprintf("there is no folder with id or name %q", s)}
	}
	return f, err
}

// apiShowThread shows a thread with its conversation, pending calls,
// decisions and usage: GET /api/v1/threads/{id}. Unlike opening the thread
// in the browser, reading it here does not mark it read: a script polling a
// run must not empty the user's Unread queue. POST .../read does.
func (h *Handler) apiShowThread(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	id, err := apiThreadID(r)
	if err != nil {
		return err
	}
	// One snapshot, so that a step committing meanwhile cannot show a
	// pending call without the message that asked for it.
	v, err := db.ReadThreadView(ctx, h.pool, user.ID, id)
	if err != nil {
		return threadErr(err)
	}
	out := apiv1.ThreadDetail{
		Thread:    toAPIThread(v.Thread),
		Model:     v.Thread.Model,
		Error:     optional(v.Thread.Error),
		Messages:  make([]apiv1.Message, 0, len(v.Messages)),
		Pending:   []apiv1.Pending{},
		Decisions: []apiv1.Decision{},
		Usage: apiv1.Usage{Steps: v.Usage.Steps, PromptTokens: v.Usage.PromptTokens, CompletionTokens: v.Usage.CompletionTokens,
			CacheReadTokens: v.Usage.CacheReadTokens, CacheWriteTokens: v.Usage.CacheWriteTokens, ReasoningTokens: v.Usage.ReasoningTokens,
			CostUSD: math.Round(v.Usage.Cost.Dollars()*1e6) / 1e6, UnpricedCalls: v.Usage.Unpriced},

		Attachments: toAPIAttachments(v.Attachments),
	}
	for _, m := range v.Messages {
		am := apiv1.Message{ID: m.ID, Role: m.Role, Content: m.Content, CreatedAt: m.CreatedAt.UTC()}
		for _, c := range m.ToolCalls {
			am.ToolCalls = append(am.ToolCalls, apiv1.ToolCall{ID: c.ID, Name: c.Name, Arguments: apiArguments(c.Arguments)})
		}
		if m.Role == db.RoleTool {
			isError := m.IsError
			am.ToolCallID, am.Name, am.IsError = m.ToolCallID, m.ToolName, &isError
		}
		out.Messages = append(out.Messages, am)
	}
	for _, c := range v.Calls {
		if c.AwaitsDecision() {
			out.Pending = append(out.Pending, toAPIPending(c, v, user.IsAdmin))
		}
		if c.Decision != "" && c.DecidedAt != nil {
			out.Decisions = append(out.Decisions, toAPIDecision(c))
		}
	}
	for _, c := range waitingSubagentCalls(v.Subagents) {
		out.Pending = append(out.Pending, toAPIPending(c, v, user.IsAdmin))
	}
	for _, cw := range v.Thread.ConnectionWaits {
		out.Pending = append(out.Pending, toAPIConnectionWait(cw, v, user))
	}
	out.LeftOut = v.Thread.LeftOut
	return writeJSON(w, http.StatusOK, out)
}

// subagentWaits returns the calls the waiting sub-agents of one of the
// user's threads wait at, in the order they were made: the parent shows
// them in "pending", so a client finds them where it looks.
func subagentWaits(ctx context.Context, q db.Querier, userID, parentID int64) ([]db.ToolCallRow, error) {
	kids, err := db.ListSubagents(ctx, q, userID, parentID)
	if err != nil {
		return nil, err
	}
	byKid, err := db.SubagentToolCalls(ctx, q, userID, parentID)
	if err != nil {
		return nil, err
	}
	subs := make([]db.SubagentView, 0, len(kids))
	for _, k := range kids {
		subs = append(subs, db.SubagentView{Thread: k, Calls: byKid[k.ID]})
	}
	return waitingSubagentCalls(subs), nil
}

// waitingSubagentCalls returns the calls waiting sub-agents wait at.
func waitingSubagentCalls(subs []db.SubagentView) []db.ToolCallRow {
	var out []db.ToolCallRow
	for _, k := range subs {
		if k.Thread.Status != db.StatusWaiting {
			continue
		}
		for _, c := range k.Calls {
			if c.AwaitsDecision() {
				out = append(out, c)
			}
		}
	}
	return out
}

// toAPIPending shows a waiting call of v as its reader reads it: whether
// they may decide it (v.Deciders, nil: all of them), whether nobody could
// (v.Undecidable) and whether they may then decide it as an admin.
func toAPIPending(c db.ToolCallRow, v db.ThreadView, admin bool) apiv1.Pending {
	deciders := v.Deciders
	kind := c.WaitKind
	if kind == "" {
		kind = db.WaitApproval
		if c.State == db.CallUnknown {
			kind = db.WaitUnknown
		}
	}
	allowed := c.AllowedDecisions
	if allowed == nil {
		allowed = []string{}
	}
	p := apiv1.Pending{
		ID: c.ID, ThreadID: c.ThreadID, CallID: c.CallID, Tool: c.Name, Kind: kind,
		// An unknown-outcome call may have been edited before it ran: show
		// what a retry would run.
		Arguments:        apiArguments(c.EffectiveArguments()),
		AllowedDecisions: allowed,
		Description:      c.Description,
		Reason:           c.GateReason,
		WaitingFor:       db.WaitingFor(c.Approvers),
		Yours:            deciders == nil || deciders[c.ID] == db.DecideOK,
	}
	if c.DecideBy != nil && c.State == db.CallPending {
		at := c.DecideBy.UTC()
		p.DecideBy, p.OnTimeout = &at, c.OnTimeout
	}
	if c.NextRemindAt != nil && c.AwaitsDecision() { // pending, or its outcome unknown
		at := c.NextRemindAt.UTC()
		p.NextRemindAt = &at
	}
	if c.EscalatedAt != nil {
		at := c.EscalatedAt.UTC()
		p.EscalatedTo, p.EscalatedFrom, p.EscalatedAt = c.EscalatedTo, c.EscalatedFrom, &at
	}
	if u, ok := v.Undecidable[c.ID]; ok {
		p.Undecidable, p.AdminOverride = u.Reason, admin && !u.ReaderStarted
	}
	if in := c.InnerCall; in != nil && c.State == db.CallPending {
		p.InnerCall = &apiv1.InnerCall{Seq: in.Seq, Tool: in.Tool, Arguments: apiArguments(in.Arguments)}
	}
	return p
}

// toAPIConnectionWait shows a run's wait for its user's connection to an
// MCP server: only that user can connect it, so only they get the URL.
func toAPIConnectionWait(cw db.ConnectionWait, v db.ThreadView, reader db.User) apiv1.Pending {
	p := apiv1.Pending{
		ThreadID: cw.ThreadID, Kind: db.WaitConnection, Server: cw.Server, Secret: cw.Secret,
		Arguments: json.RawMessage("{}"), AllowedDecisions: []string{},
		Description: cw.Description(), Reason: cw.Reason,
		Yours: reader.ID == v.Thread.UserID,
	}
	if p.Yours {
		p.ConnectURL = cw.ConnectURL(v.Thread.ID)
	} else {
		p.WaitingFor = "the run's owner, who must connect " + cw.Server
		if cw.Secret != "" {
			p.WaitingFor = "the run's owner, who must enter their " + cw.Secret + " for " + cw.Server
		}
	}
	return p
}

func toAPIDecision(c db.ToolCallRow) apiv1.Decision {
	d := apiv1.Decision{
		ID: c.ID, CallID: c.CallID, Tool: c.Name, Type: c.Decision,
		DecidedAt: c.DecidedAt.UTC(), Message: c.DecisionMessage,
		Arguments: apiArguments(c.Arguments),
		TimedOut:  c.TimedOut,

		AllowedByRule: c.AllowedByRule,
	}
	if c.DecidedBy != nil {
		d.DecidedBy = &apiv1.User{ID: *c.DecidedBy, Name: c.DecidedByName}
	}
	if c.EditedArguments != nil {
		d.EditedArguments = apiArguments(*c.EditedArguments)
	}
	return d
}

// apiDecide applies decisions to the calls waiting in a thread:
// POST /api/v1/threads/{id}/decisions. Calls may be decided together or one
// by one: once none waits the run resumes (202); while others wait the
// answer is 200. A refused decision changes nothing, not even the other
// decisions of the same request (the runtime decides in one transaction).
func (h *Handler) apiDecide(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	id, err := apiThreadID(r)
	if err != nil {
		return err
	}
	var req apiv1.DecisionsRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	in, err := decisionInputs(req.Decisions)
	if err != nil {
		return err
	}
	// The calls may be a sub-agent's, listed in this thread's "pending":
	// they are decided on the sub-agent's run.
	target, err := h.decisionTarget(ctx, user.ID, id, in)
	if err != nil {
		return threadErr(err)
	}
	out, err := h.runs.Decide(ctx, user, target, in)
	if err != nil {
		return threadErr(err)
	}
	return h.apiThreadAfter(w, r, id, resumedStatus(out))
}

// decisionTarget returns the thread whose calls the decisions are for: the
// thread id itself, or the sub-agent of it whose waiting calls they name.
// One request decides one run's calls, so that a refusal changes nothing
// (a run's decisions commit together); a mix is refused (400).
func (h *Handler) decisionTarget(ctx context.Context, userID, id int64, in []jobs.DecisionInput) (int64, error) {
	if _, err := db.GetThread(ctx, h.pool, userID, id); err != nil {
		return 0, err
	}
	kids, err := subagentWaits(ctx, h.pool, userID, id)
	if err != nil {
		return 0, err
	}
	owner := map[int64]int64{}
	for _, c := range kids {
		owner[c.ID] = c.ThreadID
	}
	target := int64(0)
	for i, d := range in {
		t, ok := owner[d.CallID]
		if !ok {
			t = id // this thread's, or none: the runtime says which
		}
		if i > 0 && t != target {
			return 0, httpError{http.StatusBadRequest, fmt.Sprintf(
				"decisions[%d]: its call waits in thread %d, the others' in thread %d: decide each thread's calls (see pending[].thread_id) in a request of its own", i, t, target)}
		}
		target = t
	}
	return target, nil
}

// resumedStatus is the answer to a change that may have resumed the run:
// 202 when the runtime queued its next step, 200 when it still waits for a
// person. The runtime says which, from inside the transaction that
// decided, so the answer does not depend on how far the resumed run got or
// on decisions made meanwhile in another tab.
func resumedStatus(out jobs.Outcome) int {
	if out.Resumed {
		return http.StatusAccepted
	}
	return http.StatusOK
}

// decisionInputs checks the decisions of a request and turns them into the
// runtime's. Whether a call allows a decision is the runtime's to check.
func decisionInputs(ds []apiv1.DecisionInput) ([]jobs.DecisionInput, error) {
	bad := func(i int, format string, args ...any) error {
		return httpError{http.StatusBadRequest, fmt.Sprintf("decisions[%d]: ", i) + fmt.Sprintf(format, args...)}
	}
	if len(ds) == 0 {
		return nil, httpError{http.StatusBadRequest, `"decisions" is empty: give at least one {"id": ..., "type": ...}`}
	}
	out := make([]jobs.DecisionInput, 0, len(ds))
	for i, d := range ds {
		if d.ID <= 0 {
			return nil, bad(i, `"id" is missing: use the id of a call in the thread's "pending"`)
		}
		if !db.IsDecision(d.Type) {
			return nil, bad(i, `"type" %q is not one of %s`, d.Type, strings.Join(db.Decisions, ", "))
		}
		in := jobs.DecisionInput{CallID: d.ID, Type: d.Type, Message: d.Message, InnerSeq: d.InnerSeq}
		if d.Remember != nil {
			rem, err := parseRemember(d.Remember.Scope, d.Remember.For, d.Remember.Match)
			if err != nil {
				return nil, bad(i, "%s", err.(httpError).msg)
			}
			in.Remember = rem
		}
		if d.OverrideReason != nil {
			if in.Override = strings.TrimSpace(*d.OverrideReason); in.Override == "" {
				return nil, bad(i, `"override_reason" is empty: say why you decide in the approvers' place`)
			}
		}
		hasArgs := len(d.Arguments) > 0 && string(d.Arguments) != "null"
		switch {
		case d.Type == db.DecisionEdit && !hasArgs:
			return nil, bad(i, `an edit needs "arguments", the call's new arguments as a JSON object`)
		case d.Type == db.DecisionEdit:
			if !bytes.HasPrefix(bytes.TrimSpace(d.Arguments), []byte("{")) {
				return nil, bad(i, `"arguments" must be a JSON object`)
			}
			var compact bytes.Buffer
			if err := json.Compact(&compact, d.Arguments); err != nil {
				return nil, bad(i, `"arguments" is not valid JSON: %v`, err)
			}
			in.Arguments = compact.String()
		case hasArgs:
			return nil, bad(i, `"arguments" only goes with an edit, not %s`, d.Type)
		}
		if strings.TrimSpace(d.Message) != "" && d.Type != db.DecisionReject && d.Type != db.DecisionRespond {
			return nil, bad(i, `"message" only goes with reject (a reason for the model) or respond (the answer), not %s`, d.Type)
		}
		out = append(out, in)
	}
	return out, nil
}

// apiReply continues a thread whose run has ended with the user's message:
// POST /api/v1/threads/{id}/messages {"content": "..."}. The run is queued (202).
func (h *Handler) apiReply(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := apiThreadID(r)
	if err != nil {
		return err
	}
	var req apiv1.ReplyRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	if err := h.runs.Reply(ctx, userFrom(ctx), id, req.Content); err != nil {
		return threadErr(err)
	}
	return h.apiThreadAfter(w, r, id, http.StatusAccepted)
}

// apiCancel stops a running or waiting run: POST /api/v1/threads/{id}/cancel.
func (h *Handler) apiCancel(w http.ResponseWriter, r *http.Request) error {
	return h.apiThreadChange(w, r, func(ctx context.Context, user db.User, id int64) (int, error) {
		return http.StatusOK, h.runs.Cancel(ctx, user, id)
	})
}

// apiRetry runs a failed or cancelled thread again from its last committed
// step: POST /api/v1/threads/{id}/retry. A run that had stopped for a person
// goes back to waiting for them (200); any other is queued (202).
func (h *Handler) apiRetry(w http.ResponseWriter, r *http.Request) error {
	return h.apiThreadChange(w, r, func(ctx context.Context, user db.User, id int64) (int, error) {
		out, err := h.runs.Retry(ctx, user, id)
		return resumedStatus(out), err
	})
}

// apiMarkRead and apiMarkUnread set a thread's read state:
// POST /api/v1/threads/{id}/read and .../unread.
func (h *Handler) apiMarkRead(w http.ResponseWriter, r *http.Request) error {
	return h.apiThreadChange(w, r, h.apiSetRead(true))
}

func (h *Handler) apiMarkUnread(w http.ResponseWriter, r *http.Request) error {
	return h.apiThreadChange(w, r, h.apiSetRead(false))
}

func (h *Handler) apiSetRead(read bool) func(ctx context.Context, user db.User, id int64) (int, error) {
	return func(ctx context.Context, user db.User, id int64) (int, error) {
		if _, err := db.GetThread(ctx, h.pool, user.ID, id); err != nil {
			return 0, err
		}
		_, err := db.MarkRead(ctx, h.pool, user.ID, []int64{id}, read)
		return http.StatusOK, err
	}
}

// apiArchive and apiUnarchive move a thread out of All (archived threads
// leave Unread too, as in the inbox) and back:
// POST /api/v1/threads/{id}/archive and .../unarchive.
func (h *Handler) apiArchive(w http.ResponseWriter, r *http.Request) error {
	return h.apiThreadChange(w, r, h.apiSetArchived(true))
}

func (h *Handler) apiUnarchive(w http.ResponseWriter, r *http.Request) error {
	return h.apiThreadChange(w, r, h.apiSetArchived(false))
}

func (h *Handler) apiSetArchived(archived bool) func(ctx context.Context, user db.User, id int64) (int, error) {
	return func(ctx context.Context, user db.User, id int64) (int, error) {
		t, err := db.GetThread(ctx, h.pool, user.ID, id)
		if err != nil {
			return 0, err
		}
		return http.StatusOK, h.setArchived(ctx, user.ID, t, archived)
	}
}

// apiThreadChange runs a change that takes no parameters on the thread of
// the path and answers with the thread as it is after it, with the status
// the change returns.
func (h *Handler) apiThreadChange(w http.ResponseWriter, r *http.Request, change func(ctx context.Context, user db.User, id int64) (int, error)) error {
	ctx := r.Context()
	id, err := apiThreadID(r)
	if err != nil {
		return err
	}
	if err := decodeNoBody(w, r); err != nil {
		return err
	}
	status, err := change(ctx, userFrom(ctx), id)
	if err != nil {
		return threadErr(err)
	}
	return h.apiThreadAfter(w, r, id, status)
}

// apiThreadAfter answers a change with the thread's summary: status is 202
// when the change queued work on the run, 200 otherwise.
func (h *Handler) apiThreadAfter(w http.ResponseWriter, r *http.Request, id int64, status int) error {
	ctx := r.Context()
	t, err := db.GetThread(ctx, h.pool, userFrom(ctx).ID, id)
	if err != nil {
		return threadErr(err)
	}
	return writeJSON(w, status, toAPIThread(t))
}
