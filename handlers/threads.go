package handlers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"pizzabot/db"
	"pizzabot/jobs"
	"pizzabot/refusal"
	"pizzabot/views"
)

// showThread shows a thread and its conversation.
func (h *Handler) showThread(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	id, err := pathID(r)
	if err != nil {
		return err
	}
	t, err := db.GetThread(ctx, h.pool, user.ID, id)
	if err != nil {
		return err
	}
	// Opening an unread thread marks it read, here in the GET handler. A GET
	// with a side effect is a deliberate choice: it is what every mail client
	// does, it changes only the viewer's own state, and it is idempotent.
	// Nothing prefetches thread pages, so only a person opening one reads it.
	if t.Unread {
		if _, err := db.MarkRead(ctx, h.pool, user.ID, []int64{id}, true); err != nil {
			return err
		}
	}
	v, err := h.loadThreadView(ctx, user, id, backURL(r))
	if err != nil {
		return err
	}
	nav, err := h.loadNav(ctx, r, user) // after marking read, so the counts agree
	if err != nil {
		return err
	}
	return h.render(w, r, http.StatusOK, views.ThreadPage(views.ThreadDetail{Nav: nav, View: v}))
}

// loadThreadView loads everything the thread page shows of one of the
// user's threads (db.ErrNotFound for another's), with the approval forms of
// its waiting calls as the tool schemas make them. back is where the header's
// back link goes ("" for the inbox). The live parts of the page (see
// views.ThreadView) are rendered again from it alone. The thread's parts
// come from one snapshot (db.ReadThreadView), as the API's do; the folders
// of the move menu are the user's, not the thread's, and read after it.
func (h *Handler) loadThreadView(ctx context.Context, user db.User, id int64, back string) (views.ThreadView, error) {
	tv, err := db.ReadThreadView(ctx, h.pool, user.ID, id)
	if err != nil {
		return views.ThreadView{}, err
	}
	v := views.ThreadView{
		Thread: tv.Thread, Messages: tv.Messages, Calls: tv.Calls, Compactions: tv.Compactions, Usage: tv.Usage,
		Attachments: tv.Attachments, Parent: tv.Parent, Back: back, Deciders: tv.Deciders,
		Undecidable: tv.Undecidable,
	}
	if v.Folders, err = db.ListFolders(ctx, h.pool, user.ID); err != nil {
		return views.ThreadView{}, err
	}
	// An admin sees "Approve once" on a run a budget stopped, and may
	// decide a call nobody else can (its override form).
	v.Budget, v.Admin = tv.Budget, user.IsAdmin
	v.Forms = h.decisionForms(v)
	// The sub-agents it delegated to, each a complete view of its own with
	// its approval forms (activity.go).
	v.Subagents = h.subagentViews(v, tv.Subagents)
	return v, nil
}

// backURL is the listing a thread page goes back to: the one the user came
// from, or the inbox.
func backURL(r *http.Request) string {
	ref := sameOriginPath(r, r.Header.Get("Referer"))
	if isHTMX(r) {
		ref = sameOriginPath(r, r.Header.Get("HX-Current-URL"))
	}
	if _, ok := parseListURL(ref); ok {
		return ref
	}
	return "/inbox/all"
}

// composeForm shows the new-thread form, GET /threads/new?folder=ID&skill=NAME
// with the folder and the skill chosen.
func (h *Handler) composeForm(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	nav, err := h.loadNav(ctx, r, userFrom(ctx))
	if err != nil {
		return err
	}
	p := views.Compose{Nav: nav}
	q := r.URL.Query()
	if id, err := strconv.ParseInt(q.Get("folder"), 10, 64); err == nil && nav.Folder(id) != nil {
		p.Folder.Value = strconv.FormatInt(id, 10)
	}
	h.fillSkills(&p)
	for _, s := range p.Skills {
		if s.Name == q.Get("skill") && len(s.Missing) == 0 {
			p.Skill.Value = s.Name
		}
	}
	return h.render(w, r, http.StatusOK, views.ComposePage(p))
}

// fillSkills lists the skills in the compose form: those that can run, those
// missing a tool, and those that failed to load.
func (h *Handler) fillSkills(p *views.Compose) {
	if h.runs == nil {
		return
	}
	set := h.runs.Skills()
	for i := range set.Skills {
		s := &set.Skills[i]
		c := views.SkillChoice{Name: s.Name, Description: s.Description}
		c.Missing = h.runs.Missing(s)
		c.Needs = h.runs.Toolbox().Needs(c.Missing)
		p.Skills = append(p.Skills, c)
	}
	for _, e := range set.Errors {
		name := e.Name
		if name == "" {
			name = e.Source + " skills"
		}
		msg := "unknown error"
		if e.Err != nil {
			msg = e.Err.Error()
		}
		p.SkillErrors = append(p.SkillErrors, views.SkillProblem{Name: name, Error: msg})
	}
}

// createThread starts a thread from the new-thread form and sends the user
// to it, with the files chosen attached. A refused form comes back with the
// text kept and the error next to its field; files over the limits are
// refused before anything is written, and a form over maxUploadBody in all
// is a 413 page.
func (h *Handler) createThread(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	if err := h.checkRunRate(ctx); err != nil {
		return err
	}
	parse := parseForm
	if isMultipart(r) {
		parse = parseUploadForm
	}
	if err := parse(w, r); err != nil {
		return err
	}
	files := uploadedFiles(r)
	// Browsers send a textarea's line breaks as CRLF.
	prompt := strings.TrimSpace(strings.ReplaceAll(r.PostForm.Get("prompt"), "\r\n", "\n"))
	form := views.Compose{
		Prompt: views.Field{Value: prompt},
		Folder: views.Field{Value: r.PostForm.Get("folder")},
		Skill:  views.Field{Value: strings.TrimSpace(r.PostForm.Get("skill"))},
	}
	switch {
	case prompt == "":
		form.Prompt.Error = "Write what the agent should do."
	case len(prompt) > jobs.MaxPrompt:
		form.Prompt.Error = fmt.Sprintf("The prompt is %d KB; the limit is %d KB.", (len(prompt)+1023)>>10, jobs.MaxPrompt>>10)
	}
	_, form.Files.Error = checkUploads(files)
	var folderID *int64
	if s := form.Folder.Value; s != "" {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return httpError{http.StatusBadRequest, "The folder is not valid."}
		}
		folderID = &id
	}
	if form.Prompt.Error == "" && form.Files.Error == "" {
		uploads, closeUploads, err := openUploads(files)
		if err != nil {
			return err
		}
		t, err := h.startThread(ctx, user, prompt, folderID, form.Skill.Value, uploads)
		closeUploads()
		ref, refused := refusal.As(err)
		switch {
		case err == nil:
			return seeOther(w, r, "/threads/"+strconv.FormatInt(t.ID, 10))
		case errors.Is(err, db.ErrNotFound):
			// Deleted in another tab, or never the user's: same answer.
			form.Folder.Error = "That folder does not exist any more. Choose another."
		case refused && ref.Field == "prompt":
			form.Prompt.Error = sentence(ref.Msg)
		case refused && ref.Field == "files":
			// A file the checks above let through.
			form.Files.Error = sentence(ref.Msg)
		case refused && ref.Field == "skill":
			// Gone, or missing a tool since the form was shown.
			form.Skill.Error = sentence(ref.Msg)
		default:
			return err
		}
	}

	if len(files) > 0 {
		form.Files.Value = uploadNames(files)
	}
	nav, err := h.loadNav(ctx, r, user)
	if err != nil {
		return err
	}
	form.Nav = nav
	h.fillSkills(&form)
	if wantsFragment(r) {
		return h.render(w, r, http.StatusUnprocessableEntity, views.ComposeForm(form))
	}
	return h.render(w, r, http.StatusUnprocessableEntity, views.ComposePage(form))
}

// startThread creates a thread with its first user message and its
// attachments and queues its run, in one transaction: the one place the web
// interface starts runs. folderID, when set, must be one of the user's
// folders (db.ErrNotFound otherwise); skill, when set, must be a skill whose
// tools are all connected (a *refusal.Error about "skill" otherwise).
func (h *Handler) startThread(ctx context.Context, user db.User, prompt string, folderID *int64, skill string, files []jobs.Upload) (db.Thread, error) {
	return h.runs.Start(ctx, user, jobs.StartRequest{Prompt: prompt, FolderID: folderID, Skill: skill, TriggerKind: db.TriggerManual, Files: files})
}

// The actions on one thread, from the thread page. Archive and mark unread
// are "done with it for now": they take the user back to the list they came
// from, as a mail client does. The others keep the user on the thread.

func (h *Handler) markRead(w http.ResponseWriter, r *http.Request) error {
	return h.threadAction(w, r, false, func(ctx context.Context, userID int64, t db.Thread) error {
		_, err := db.MarkRead(ctx, h.pool, userID, []int64{t.ID}, true)
		return err
	})
}

func (h *Handler) markUnread(w http.ResponseWriter, r *http.Request) error {
	return h.threadAction(w, r, true, func(ctx context.Context, userID int64, t db.Thread) error {
		_, err := db.MarkRead(ctx, h.pool, userID, []int64{t.ID}, false)
		return err
	})
}

func (h *Handler) archive(w http.ResponseWriter, r *http.Request) error {
	return h.threadAction(w, r, true, func(ctx context.Context, userID int64, t db.Thread) error {
		return h.setArchived(ctx, userID, t, true)
	})
}

func (h *Handler) unarchive(w http.ResponseWriter, r *http.Request) error {
	return h.threadAction(w, r, false, func(ctx context.Context, userID int64, t db.Thread) error {
		return h.setArchived(ctx, userID, t, false)
	})
}

// setArchived archives or restores a thread the user can read: the
// owner's to do (ownerOnly).
func (h *Handler) setArchived(ctx context.Context, userID int64, t db.Thread, archived bool) error {
	verb := "archive"
	if !archived {
		verb = "restore"
	}
	if err := ownerOnly(userID, t, verb); err != nil {
		return err
	}
	_, err := db.SetArchived(ctx, h.pool, userID, []int64{t.ID}, archived)
	return err
}

// moveThread puts a thread into one of the user's folders (folder=ID) or
// takes it out of any (folder=none). Another user's folder is a 404; a
// thread shared with the user is its owner's to move.
func (h *Handler) moveThread(w http.ResponseWriter, r *http.Request) error {
	return h.threadAction(w, r, false, func(ctx context.Context, userID int64, t db.Thread) error {
		if err := ownerOnly(userID, t, "move"); err != nil {
			return err
		}
		folderID, err := parseMoveTarget(r.PostForm.Get("folder"))
		if err != nil {
			return err
		}
		_, err = db.MoveThreads(ctx, h.pool, userID, []int64{t.ID}, folderID)
		return err
	})
}

// ownerOnly refuses what only a thread's owner may do to it (archive,
// restore, move, delete: they change where the thread is for everyone)
// when the user reads it through a shared folder or a routed call. Read
// state is each person's own, and not refused.
func ownerOnly(userID int64, t db.Thread, verb string) error {
	if t.UserID == userID {
		return nil
	}
	return refusal.New(refusal.Forbidden, "", "Only the thread's owner can %s it.", verb)
}

// threadAction applies change to the thread of the path, after checking
// that it is the user's (a 404 otherwise). With leave set the user goes back
// to the list the form names in "return"; otherwise they stay on the thread,
// whose header htmx swaps for its new state, with the sidebar's counts.
func (h *Handler) threadAction(w http.ResponseWriter, r *http.Request, leave bool, change func(ctx context.Context, userID int64, t db.Thread) error) error {
	ctx := r.Context()
	user := userFrom(ctx)
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := parseForm(w, r); err != nil {
		return err
	}
	t, err := db.GetThread(ctx, h.pool, user.ID, id)
	if err != nil {
		return err
	}
	if err := change(ctx, user.ID, t); err != nil {
		return err
	}
	back := localURL(r.PostForm.Get("return"), "/inbox/all")
	if leave {
		return seeOther(w, r, back)
	}
	if !wantsFragment(r) {
		return seeOther(w, r, "/threads/"+strconv.FormatInt(id, 10))
	}
	t, err = db.GetThread(ctx, h.pool, user.ID, id)
	if err != nil {
		return err
	}
	usage, err := db.ThreadUsage(ctx, h.pool, user.ID, id)
	if err != nil {
		return err
	}
	nav, err := h.loadNav(ctx, r, user)
	if err != nil {
		return err
	}
	return h.render(w, r, http.StatusOK,
		views.ThreadHeader(views.ThreadView{Thread: t, Usage: usage, Folders: nav.Folders, Back: back}),
		views.Sidebar(nav, true))
}

// parseMoveTarget reads the folder a move goes to: "none" for no folder.
func parseMoveTarget(s string) (*int64, error) {
	switch s {
	case "none":
		return nil, nil
	case "":
		return nil, httpError{http.StatusBadRequest, "Choose the folder to move to."}
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return nil, httpError{http.StatusBadRequest, "The folder is not valid."}
	}
	return &id, nil
}

// maxBulk bounds the threads of one bulk action.
const maxBulk = 1000

// bulkAction applies an action to the threads selected in a listing:
// POST /threads/bulk with ids=1&ids=2&action=read|unread|archive|move|delete
// (and folder=ID|none for move). Ids that are not the user's are skipped by
// the scoped updates, without saying whether they exist; the message says
// how many an archive, move or delete left alone (threads shared with the
// user are their owners' to change: ownerOnly). htmx gets the
// listing named by "return" in its new state; a plain form is sent back to it.
func (h *Handler) bulkAction(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	if err := parseForm(w, r); err != nil {
		return err
	}
	ids, err := parseIDs(r.PostForm["ids"])
	if err != nil {
		return err
	}
	if r.PostForm.Get("action") == "review" {
		// Their alike calls, side by side (decisions_bulk.go).
		return seeOther(w, r, reviewURL(ids))
	}
	var done string
	doneKind := "ok"
	switch action := r.PostForm.Get("action"); action {
	case "read", "unread":
		_, err = db.MarkRead(ctx, h.pool, user.ID, ids, action == "read")
		done = "Marked " + threadCount(len(ids)) + " " + action + "."
	case "archive":
		var n int64
		n, err = db.SetArchived(ctx, h.pool, user.ID, ids, true)
		doneKind, done = leftToOwners(doneKind, "Archived "+threadCount(int(n))+".", len(ids)-int(n), "archive")
	case "move":
		var folderID *int64
		var n int64
		folderID, err = parseMoveTarget(r.PostForm.Get("folder"))
		if err == nil {
			n, err = db.MoveThreads(ctx, h.pool, user.ID, ids, folderID)
		}
		done = "Moved " + threadCount(int(n)) + "."
		if folderID == nil {
			done = "Took " + threadCount(int(n)) + " out of their folder."
		}
		doneKind, done = leftToOwners(doneKind, done, len(ids)-int(n), "move")
	case "delete": // see threads_delete.go
		var d db.ThreadDeletion
		d, err = h.deleteThreads(ctx, user.ID, ids)
		doneKind, done = bulkDeleteMessage(d)
		doneKind, done = leftToOwners(doneKind, done, len(ids)-len(d.Deleted)-len(d.Running), "delete")
	default:
		return httpError{http.StatusBadRequest, "Choose an action for the selected threads."}
	}
	if err != nil {
		return err
	}

	back := localURL(r.PostForm.Get("return"), "/inbox/all")
	q, isList := parseListURL(back)
	if !wantsFragment(r) || !isList {
		return seeOther(w, r, back)
	}
	a, err := h.access(ctx)
	if err != nil {
		return err
	}
	list, err := h.loadListing(ctx, a, q)
	if err != nil {
		return err
	}
	nav, err := h.loadNav(ctx, r, user)
	if err != nil {
		return err
	}
	return h.render(w, r, http.StatusOK,
		views.ThreadList(list),
		views.Sidebar(nav, true),
		views.FlashOOB(doneKind, done))
}

// parseIDs reads the selected thread ids of a bulk action.
func parseIDs(raw []string) ([]int64, error) {
	if len(raw) == 0 {
		return nil, httpError{http.StatusBadRequest, "Select at least one thread."}
	}
	if len(raw) > maxBulk {
		return nil, httpError{http.StatusBadRequest, fmt.Sprintf("Select at most %d threads at once.", maxBulk)}
	}
	ids := make([]int64, 0, len(raw))
	for _, s := range raw {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 {
			return nil, httpError{http.StatusBadRequest, "The selection is not valid."}
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// leftToOwners adds to a bulk action's message the threads it left alone:
// those shared with the user, whose owner alone may archive, move or
// delete them (ownerOnly), or gone meanwhile.
func leftToOwners(kind, msg string, left int, verb string) (string, string) {
	if left <= 0 {
		return kind, msg
	}
	return "error", fmt.Sprintf("%s Left %s alone: only a thread's owner can %s it.", msg, threadCount(left), verb)
}

func threadCount(n int) string {
	if n == 1 {
		return "1 thread"
	}
	return strconv.Itoa(n) + " threads"
}
