package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"pizzabot/agent"
	"pizzabot/apiv1"
	"pizzabot/db"
	"pizzabot/triggers"
	"pizzabot/views"
)

// Schedules: the pages that list, create, edit, pause and delete them, the
// preview of an expression's next fires, and the JSON API under
// /api/v1/schedules. What a valid schedule is, and when it fires, is
// package triggers'; the runs themselves are started by jobs.ScheduleWorker.

// firesShown is how many of a schedule's latest fires its page lists.
const firesShown = 50

// triggerSkills returns the skills available now (none when the runtime has
// no skill source, as in some tests).
func (h *Handler) triggerSkills() agent.SkillSet {
	if h.runs == nil {
		return agent.SkillSet{}
	}
	return h.runs.Skills()
}

// checkSchedule cleans a submitted schedule against the skills of now
// (triggers.CheckSchedule).
func (h *Handler) checkSchedule(in db.ScheduleFields, prev *db.Schedule, now time.Time) (db.ScheduleFields, triggers.Problems) {
	return triggers.CheckSchedule(in, prev, now, h.triggerSkills())
}

// previewFires is the form's preview of an expression (triggers.PreviewFires).
func previewFires(expr, tz string, now time.Time) views.SchedulePreview {
	p := triggers.PreviewFires(expr, tz, now)
	return views.SchedulePreview{Times: p.Times, CronError: p.CronError, ZoneError: p.ZoneError}
}

// listSchedules shows the user's schedules: GET /schedules.
func (h *Handler) listSchedules(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	ss, err := db.ListSchedules(ctx, h.pool, user.ID)
	if err != nil {
		return err
	}
	nav, err := h.loadNav(ctx, r, user)
	if err != nil {
		return err
	}
	p := views.Schedules{Nav: nav, Now: h.now()}
	for _, s := range ss {
		p.Rows = append(p.Rows, views.ScheduleRow{Schedule: s, Next: triggers.NextFire(s)})
	}
	// Skills may declare a schedule (SKILL.md "schedule"). Schedules belong
	// to users, so a declared one is offered here, not created for
	// everyone.
	for _, sk := range h.triggerSkills().Skills {
		if sk.Schedule != nil && sk.Schedule.Cron != "" {
			p.Suggestions = append(p.Suggestions, views.SkillSchedule{Skill: sk.Name, Cron: sk.Schedule.Cron, Timezone: sk.Schedule.Timezone})
		}
	}
	return h.render(w, r, http.StatusOK, views.SchedulesPage(p))
}

// scheduleEdit assembles the schedule page around a form.
func (h *Handler) scheduleEdit(ctx context.Context, r *http.Request, user db.User, form views.ScheduleForm, s *db.Schedule) (views.ScheduleEdit, error) {
	nav, err := h.loadNav(ctx, r, user)
	if err != nil {
		return views.ScheduleEdit{}, err
	}
	p := views.ScheduleEdit{Nav: nav, Form: form, Schedule: s, Now: h.now()}
	for _, sk := range h.triggerSkills().Skills {
		p.Skills = append(p.Skills, views.SkillOption{Name: sk.Name, Description: sk.Description})
	}
	if s != nil {
		if p.Fires, err = db.ListScheduleFires(ctx, h.pool, user.ID, s.ID, firesShown); err != nil {
			return views.ScheduleEdit{}, err
		}
	}
	return p, nil
}

// newScheduleForm shows the form for a new schedule: GET /schedules/new,
// or GET /schedules/new?skill=NAME filled in from the schedule the skill
// declares.
func (h *Handler) newScheduleForm(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	form := views.ScheduleForm{Timezone: views.Field{Value: "UTC"}}
	if name := r.URL.Query().Get("skill"); name != "" {
		if sk, ok := h.triggerSkills().Get(name); ok {
			form.Skill.Value = sk.Name
			form.Name.Value = sk.Name
			if sc := sk.Schedule; sc != nil {
				form.Cron.Value = sc.Cron
				if sc.Timezone != "" {
					form.Timezone.Value = sc.Timezone
				}
				form.Prompt.Value = sc.Prompt
			}
			if form.Prompt.Value == "" {
				form.Prompt.Value = "Do the scheduled work of the " + sk.Name + " skill."
			}
		}
	}
	form.Preview = previewFires(form.Cron.Value, form.Timezone.Value, h.now())
	p, err := h.scheduleEdit(ctx, r, user, form, nil)
	if err != nil {
		return err
	}
	return h.render(w, r, http.StatusOK, views.ScheduleEditPage(p))
}

// showSchedule shows a schedule's form and latest fires: GET /schedules/{id}.
func (h *Handler) showSchedule(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	id, err := pathID(r)
	if err != nil {
		return err
	}
	s, err := db.GetSchedule(ctx, h.pool, user.ID, id)
	if err != nil {
		return err
	}
	form := scheduleFormOf(s)
	form.Preview = previewFires(s.Cron, s.Timezone, h.now())
	p, err := h.scheduleEdit(ctx, r, user, form, &s)
	if err != nil {
		return err
	}
	return h.render(w, r, http.StatusOK, views.ScheduleEditPage(p))
}

func scheduleFormOf(s db.Schedule) views.ScheduleForm {
	f := views.ScheduleForm{
		ID:            s.ID,
		Name:          views.Field{Value: s.Name},
		Skill:         views.Field{Value: s.Skill},
		Prompt:        views.Field{Value: s.Prompt},
		Cron:          views.Field{Value: s.Cron},
		Timezone:      views.Field{Value: s.Timezone},
		SkipIfRunning: s.SkipIfRunning,
	}
	if s.FolderID != nil {
		f.Folder.Value = strconv.FormatInt(*s.FolderID, 10)
	}
	return f
}

// schedulePreview answers the form's preview as the user types:
// GET /schedules/preview?cron=...&timezone=... renders the next five fires,
// and the fields' error messages out of band.
func (h *Handler) schedulePreview(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	p := previewFires(q.Get("cron"), q.Get("timezone"), h.now())
	p.OOB = true
	return h.render(w, r, http.StatusOK, views.SchedulePreviewBox(p))
}

// createSchedule saves a new schedule from the form: POST /schedules.
func (h *Handler) createSchedule(w http.ResponseWriter, r *http.Request) error {
	return h.saveSchedule(w, r, nil)
}

// updateSchedule saves a schedule's form: POST /schedules/{id}.
func (h *Handler) updateSchedule(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := pathID(r)
	if err != nil {
		return err
	}
	s, err := db.GetSchedule(ctx, h.pool, userFrom(ctx).ID, id)
	if err != nil {
		return err
	}
	return h.saveSchedule(w, r, &s)
}

// saveSchedule creates (prev nil) or updates a schedule from the form. A
// refused form, or one sent with the Preview button, comes back with what
// was typed, the messages next to their fields and the next fires.
func (h *Handler) saveSchedule(w http.ResponseWriter, r *http.Request, prev *db.Schedule) error {
	ctx := r.Context()
	user := userFrom(ctx)
	if err := parseForm(w, r); err != nil {
		return err
	}
	pf := r.PostForm
	form := views.ScheduleForm{
		Name:          views.Field{Value: pf.Get("name")},
		Skill:         views.Field{Value: pf.Get("skill")},
		Prompt:        views.Field{Value: strings.TrimSpace(strings.ReplaceAll(pf.Get("prompt"), "\r\n", "\n"))},
		Cron:          views.Field{Value: pf.Get("cron")},
		Timezone:      views.Field{Value: pf.Get("timezone")},
		Folder:        views.Field{Value: pf.Get("folder")},
		SkipIfRunning: pf.Get("skip_if_running") != "",
	}
	in := db.ScheduleFields{
		Name: form.Name.Value, Skill: form.Skill.Value, Prompt: form.Prompt.Value,
		Cron: form.Cron.Value, Timezone: form.Timezone.Value, SkipIfRunning: form.SkipIfRunning,
	}
	if prev != nil {
		form.ID = prev.ID
		in.Paused = prev.Paused
	}
	if s := form.Folder.Value; s != "" {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 {
			return httpError{http.StatusBadRequest, "The folder is not valid."}
		}
		in.FolderID = &id
	}
	now := h.now()
	fields, probs := h.checkSchedule(in, prev, now)
	form.Preview = previewFires(form.Cron.Value, form.Timezone.Value, now)
	if len(probs) == 0 && pf.Get("preview") == "" {
		var s db.Schedule
		var err error
		if prev == nil {
			s, err = db.CreateSchedule(ctx, h.pool, user.ID, fields)
		} else {
			s, err = db.UpdateSchedule(ctx, h.pool, user.ID, prev.ID, fields)
		}
		switch {
		case err == nil:
			return seeOther(w, r, "/schedules/"+strconv.FormatInt(s.ID, 10))
		case errors.Is(err, db.ErrNotFound) && in.FolderID != nil:
			probs = triggers.Problems{"folder": "That folder does not exist any more. Choose another."}
		default:
			return err
		}
	}
	form.Name.Error = probs["name"]
	form.Skill.Error = probs["skill"]
	form.Prompt.Error = probs["prompt"]
	form.Folder.Error = probs["folder"]
	// The expression's and zone's messages come with the preview.
	form.Preview.CronError, form.Preview.ZoneError = probs["cron"], probs["timezone"]
	p, err := h.scheduleEdit(ctx, r, user, form, prev)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if len(probs) > 0 {
		status = http.StatusUnprocessableEntity
	}
	return h.render(w, r, status, views.ScheduleEditPage(p))
}

// pauseSchedule stops a schedule from firing: POST /schedules/{id}/pause.
func (h *Handler) pauseSchedule(w http.ResponseWriter, r *http.Request) error {
	return h.setSchedulePaused(w, r, true)
}

// resumeSchedule lets a paused schedule fire again from now on; the fires
// due while it was paused are not caught up: POST /schedules/{id}/resume.
func (h *Handler) resumeSchedule(w http.ResponseWriter, r *http.Request) error {
	return h.setSchedulePaused(w, r, false)
}

func (h *Handler) setSchedulePaused(w http.ResponseWriter, r *http.Request, paused bool) error {
	ctx := r.Context()
	user := userFrom(ctx)
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if _, err := h.pauseOrResume(ctx, user, id, paused); err != nil {
		return err
	}
	return seeOther(w, r, localURL(refererPath(r), "/schedules"))
}

// pauseOrResume sets a schedule's paused state. Resuming computes the next
// fire from now.
func (h *Handler) pauseOrResume(ctx context.Context, user db.User, id int64, paused bool) (db.Schedule, error) {
	s, err := db.GetSchedule(ctx, h.pool, user.ID, id)
	if err != nil {
		return db.Schedule{}, err
	}
	if s.Paused == paused {
		return s, nil
	}
	in := s.Fields()
	in.Paused = paused
	fields, probs := h.checkSchedule(in, &s, h.now())
	if len(probs) > 0 {
		if _, ok := probs["skill"]; ok && paused {
			// Pausing is always allowed, even a schedule whose skill is gone.
			fields = s.Fields()
			fields.Paused = true
		} else {
			return db.Schedule{}, httpError{http.StatusConflict, "This schedule cannot be resumed as it is: " + probs.First() + " Edit it first."}
		}
	}
	return db.UpdateSchedule(ctx, h.pool, user.ID, id, fields)
}

// refererPath is the path of the page that sent the request, when it is
// ours.
func refererPath(r *http.Request) string {
	if isHTMX(r) {
		if p := sameOriginPath(r, r.Header.Get("HX-Current-URL")); p != "" {
			return p
		}
	}
	return sameOriginPath(r, r.Header.Get("Referer"))
}

// deleteSchedule deletes a schedule; the threads it started stay:
// POST /schedules/{id}/delete.
func (h *Handler) deleteSchedule(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := db.DeleteSchedule(ctx, h.pool, userFrom(ctx).ID, id); err != nil {
		return err
	}
	return seeOther(w, r, "/schedules")
}

// The JSON API.

func toAPISchedule(s db.Schedule) apiv1.Schedule {
	out := apiv1.Schedule{
		ID: s.ID, Name: s.Name, Skill: optional(s.Skill), Prompt: s.Prompt, Cron: s.Cron, Timezone: s.Timezone,
		Paused: s.Paused, SkipIfRunning: s.SkipIfRunning, NextFires: []time.Time{},
		URL: "/schedules/" + strconv.FormatInt(s.ID, 10), CreatedAt: s.CreatedAt.UTC(), UpdatedAt: s.UpdatedAt.UTC(),
	}
	if s.FolderID != nil {
		out.Folder = &apiv1.Folder{ID: *s.FolderID, Name: s.FolderName}
	}
	if s.LastFiredAt != nil {
		t := s.LastFiredAt.UTC()
		out.LastFiredAt = &t
	}
	for _, t := range triggers.NextFires(s, 5) {
		out.NextFires = append(out.NextFires, t.UTC())
	}
	return out
}

// apiScheduleID parses the {id} of the path; a malformed id names nothing.
func apiScheduleID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, errScheduleNotFound
	}
	return id, nil
}

var errScheduleNotFound = httpError{http.StatusNotFound, "schedule not found"}

func scheduleErr(err error) error {
	if errors.Is(err, db.ErrNotFound) {
		return errScheduleNotFound
	}
	return err
}

// apiListSchedules lists the user's schedules: GET /api/v1/schedules.
func (h *Handler) apiListSchedules(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	ss, err := db.ListSchedules(ctx, h.pool, userFrom(ctx).ID)
	if err != nil {
		return err
	}
	out := apiv1.ScheduleList{Schedules: []apiv1.Schedule{}}
	for _, s := range ss {
		out.Schedules = append(out.Schedules, toAPISchedule(s))
	}
	return writeJSON(w, http.StatusOK, out)
}

// apiShowSchedule shows a schedule with its latest fires:
// GET /api/v1/schedules/{id}.
func (h *Handler) apiShowSchedule(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	id, err := apiScheduleID(r)
	if err != nil {
		return err
	}
	s, err := db.GetSchedule(ctx, h.pool, user.ID, id)
	if err != nil {
		return scheduleErr(err)
	}
	fires, err := db.ListScheduleFires(ctx, h.pool, user.ID, id, firesShown)
	if err != nil {
		return err
	}
	out := apiv1.ScheduleDetail{Schedule: toAPISchedule(s), Fires: []apiv1.Fire{}}
	for _, f := range fires {
		out.Fires = append(out.Fires, apiv1.Fire{
			DueAt: f.DueAt.UTC(), FirstDueAt: f.FirstDueAt.UTC(), Covers: f.Covers, RanAt: f.RanAt.UTC(),
			Outcome: f.Outcome, Detail: optional(f.Detail), ThreadID: f.ThreadID,
		})
	}
	return writeJSON(w, http.StatusOK, out)
}

// applyScheduleRequest sets the request's fields on in.
func (h *Handler) applyScheduleRequest(ctx context.Context, userID int64, req apiv1.ScheduleRequest, in *db.ScheduleFields) error {
	set := func(dst *string, src *string) {
		if src != nil {
			*dst = *src
		}
	}
	set(&in.Name, req.Name)
	set(&in.Skill, req.Skill)
	set(&in.Prompt, req.Prompt)
	set(&in.Cron, req.Cron)
	set(&in.Timezone, req.Timezone)
	if req.Paused != nil {
		in.Paused = *req.Paused
	}
	if req.SkipIfRunning != nil {
		in.SkipIfRunning = *req.SkipIfRunning
	}
	// A RawMessage, not a pointer: a pointer would read null as absent.
	if len(req.Folder) > 0 {
		var v any
		if err := json.Unmarshal(req.Folder, &v); err != nil {
			return httpError{http.StatusBadRequest, `field "folder" must be a folder's id or name, or null`}
		}
		var s string
		switch v := v.(type) {
		case nil:
		case string:
			s = strings.TrimSpace(v)
		case float64:
			s = strconv.FormatFloat(v, 'f', -1, 64)
		default:
			return httpError{http.StatusBadRequest, `field "folder" must be a folder's id or name, or null`}
		}
		in.FolderID = nil
		if s != "" {
			f, err := h.apiFolderParam(ctx, userID, s)
			if err != nil {
				return err
			}
			in.FolderID = &f.ID
		}
	}
	return nil
}

// apiCreateSchedule creates a schedule: POST /api/v1/schedules
// {"prompt", "cron", "timezone", "name"?, "skill"?, "folder"?, "paused"?,
// "skip_if_running"?} answers 201 with it. timezone defaults to UTC.
func (h *Handler) apiCreateSchedule(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	var req apiv1.ScheduleRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	in := db.ScheduleFields{Timezone: "UTC"}
	if err := h.applyScheduleRequest(ctx, user.ID, req, &in); err != nil {
		return err
	}
	fields, probs := h.checkSchedule(in, nil, h.now())
	if len(probs) > 0 {
		return httpError{http.StatusBadRequest, probs.First()}
	}
	s, err := db.CreateSchedule(ctx, h.pool, user.ID, fields)
	if errors.Is(err, db.ErrNotFound) {
		return httpError{http.StatusBadRequest, "folder: that folder does not exist any more"}
	}
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/api/v1/schedules/"+strconv.FormatInt(s.ID, 10))
	return writeJSON(w, http.StatusCreated, toAPISchedule(s))
}

// apiUpdateSchedule changes the fields given: PATCH /api/v1/schedules/{id}.
// "paused": false resumes from now, without catching up.
func (h *Handler) apiUpdateSchedule(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	user := userFrom(ctx)
	id, err := apiScheduleID(r)
	if err != nil {
		return err
	}
	var req apiv1.ScheduleRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	prev, err := db.GetSchedule(ctx, h.pool, user.ID, id)
	if err != nil {
		return scheduleErr(err)
	}
	in := prev.Fields()
	if err := h.applyScheduleRequest(ctx, user.ID, req, &in); err != nil {
		return err
	}
	fields, probs := h.checkSchedule(in, &prev, h.now())
	if len(probs) > 0 {
		return httpError{http.StatusBadRequest, probs.First()}
	}
	s, err := db.UpdateSchedule(ctx, h.pool, user.ID, id, fields)
	if errors.Is(err, db.ErrNotFound) {
		// The schedule, or the folder, went in the meantime.
		if _, gerr := db.GetSchedule(ctx, h.pool, user.ID, id); gerr != nil {
			return scheduleErr(gerr)
		}
		return httpError{http.StatusBadRequest, "folder: that folder does not exist any more"}
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, toAPISchedule(s))
}

// apiDeleteSchedule deletes a schedule; its threads stay:
// DELETE /api/v1/schedules/{id} answers 204.
func (h *Handler) apiDeleteSchedule(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, err := apiScheduleID(r)
	if err != nil {
		return err
	}
	if err := db.DeleteSchedule(ctx, h.pool, userFrom(ctx).ID, id); err != nil {
		return scheduleErr(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
