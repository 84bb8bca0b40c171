package handlers_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"pizzabot/db"
)

// wantWeekdayMornings checks a page's five previewed fires: at 8:00 Paris time,
// on weekdays, in order, in the future.
func wantWeekdayMornings(t *testing.T, res *response) {
	t.Helper()
	fires := res.all("next-fire")
	if len(fires) != 5 {
		t.Fatalf("%d next fires shown, want 5: %v", len(fires), res.texts("next-fire"))
	}
	paris, _ := time.LoadLocation("Europe/Paris")
	var prev time.Time
	for _, n := range fires {
		var at time.Time
		for d := range n.Descendants() {
			if hasAttr(d, "datetime") {
				var err error
				if at, err = time.Parse(time.RFC3339, attr(d, "datetime")); err != nil {
					t.Fatal(err)
				}
			}
		}
		local := at.In(paris)
		if local.Hour() != 8 || local.Minute() != 0 || local.Weekday() == time.Saturday || local.Weekday() == time.Sunday ||
			!at.After(prev) || !at.After(time.Now()) {
			t.Errorf("fire %v (%s) is not a weekday 8:00 in Paris after %v", at, text(n), prev)
		}
		if !strings.Contains(text(n), "08:00 CE") {
			t.Errorf("fire shown as %q, want it in Paris time", text(n))
		}
		prev = at
	}
}

func TestScheduleFormPreviewsAndRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := triggerSetup(t)

	// As the user types: the preview, with the fields' errors out of band.
	q := url.Values{"cron": {"0 8 * * 1-5"}, "timezone": {"Europe/Paris"}}
	res := b.get("alice", "/schedules/preview?"+q.Encode(), htmx).wantStatus(http.StatusOK)
	if !res.isFragment() {
		t.Fatal("the preview is a whole page")
	}
	wantWeekdayMornings(t, res)
	if res.text("field-error") != "" {
		t.Errorf("errors shown for a valid expression: %q", res.text("field-error"))
	}
	q = url.Values{"cron": {"0 25 * * *"}, "timezone": {"Mars/Olympus"}}
	res = b.get("alice", "/schedules/preview?"+q.Encode(), htmx).wantStatus(http.StatusOK)
	if len(res.all("next-fire")) != 0 || res.text("preview-invalid") == "" {
		t.Error("an invalid expression is previewed")
	}
	cronSlot, zoneSlot := res.byID("schedule-cron-error-slot"), res.byID("schedule-timezone-error-slot")
	if cronSlot == nil || attr(cronSlot, "hx-swap-oob") != "true" || !strings.Contains(text(cronSlot), "Not a valid cron expression") {
		t.Errorf("cron error slot = %v", cronSlot)
	}
	if zoneSlot == nil || !strings.Contains(text(zoneSlot), "Unknown time zone") {
		t.Errorf("time zone error slot = %v", zoneSlot)
	}

	// The form, filled in from a skill's declared schedule.
	res = b.get("alice", "/schedules/new?skill=notes").wantStatus(http.StatusOK)
	if got := attr(res.byID("schedule-cron"), "value"); got != "0 9 * * 1" {
		t.Errorf("cron from the skill = %q", got)
	}
	if got := attr(res.byID("schedule-timezone"), "value"); got != "Europe/Paris" {
		t.Errorf("time zone from the skill = %q", got)
	}
	if len(res.all("next-fire")) != 5 {
		t.Error("the form does not preview the skill's schedule")
	}

	// Submitted with errors: back with each message next to its field,
	// nothing saved.
	res = b.post("alice", "/schedules", form("name", "Brief", "prompt", "", "cron", "0 8 * *", "timezone", "Nowhere/City")).
		wantStatus(http.StatusUnprocessableEntity)
	for id, want := range map[string]string{
		"schedule-prompt-error":   "Write what the agent should do",
		"schedule-cron-error":     "Not a valid cron expression",
		"schedule-timezone-error": "Unknown time zone",
	} {
		n := res.byID(id)
		if n == nil || !strings.Contains(text(n), want) {
			t.Errorf("#%s = %v, want %q", id, n, want)
		}
	}
	if got := attr(res.byID("schedule-cron"), "aria-invalid"); got != "true" {
		t.Errorf("cron field aria-invalid = %q", got)
	}
	if got := attr(res.byID("schedule-name"), "value"); got != "Brief" {
		t.Errorf("the name typed was lost: %q", got)
	}
	// The Preview button (for browsers without JavaScript) saves nothing.
	res = b.post("alice", "/schedules", form("name", "Brief", "prompt", "Do it", "cron", "0 8 * * 1-5", "timezone", "Europe/Paris", "preview", "1")).
		wantStatus(http.StatusOK)
	wantWeekdayMornings(t, res)
	if ss, _ := db.ListSchedules(b.ctx, b.pool, b.alice.ID); len(ss) != 0 {
		t.Errorf("%d schedules saved, want none", len(ss))
	}
}

func TestSchedulePagesCreateEditPauseDelete(t *testing.T) {
	t.Parallel()
	b := triggerSetup(t)
	if b.get("alice", "/schedules").wantStatus(http.StatusOK).text("empty-state") == "" {
		t.Error("no empty state without schedules")
	}
	if got := b.get("alice", "/schedules").texts("schedule-suggestion"); len(got) != 1 || !strings.Contains(got[0], "notes") {
		t.Errorf("suggestions = %v, want the notes skill's schedule", got)
	}

	folder := b.folder(b.alice, "Briefs")
	res := b.post("alice", "/schedules", form(
		"name", "Morning brief", "skill", "researcher", "prompt", "Summarize the news.",
		"cron", "0 8 * * 1-5", "timezone", "Europe/Paris", "folder", itoa(folder.ID), "skip_if_running", "on",
	)).wantStatus(http.StatusSeeOther)
	loc := res.Header().Get("Location")
	if !strings.HasPrefix(loc, "/schedules/") {
		t.Fatalf("Location = %q", loc)
	}
	ss, err := db.ListSchedules(b.ctx, b.pool, b.alice.ID)
	if err != nil || len(ss) != 1 {
		t.Fatalf("schedules = %v, %v", ss, err)
	}
	s := ss[0]
	if s.Skill != "researcher" || s.FolderID == nil || *s.FolderID != folder.ID || !s.SkipIfRunning || s.NextDueAt == nil || s.Paused {
		t.Errorf("saved = %+v", s)
	}

	page := b.get("alice", loc).wantStatus(http.StatusOK)
	wantWeekdayMornings(t, page)
	if got := page.text("no-fires"); !strings.Contains(got, "first run is due") {
		t.Errorf("fires section = %q", got)
	}
	if got := b.get("alice", "/schedules").text("schedule-next"); !strings.HasPrefix(got, "Next ") || !strings.Contains(got, "08:00") {
		t.Errorf("list shows %q as the next fire", got)
	}

	// Edit: a new expression moves the next fire.
	b.post("alice", loc, form("name", "Evening brief", "skill", "researcher", "prompt", "Summarize the day.",
		"cron", "30 18 * * *", "timezone", "Europe/Paris", "folder", "")).wantStatus(http.StatusSeeOther)
	s2, err := db.GetSchedule(b.ctx, b.pool, b.alice.ID, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	paris, _ := time.LoadLocation("Europe/Paris")
	if s2.Name != "Evening brief" || s2.FolderID != nil || s2.SkipIfRunning || s2.NextDueAt.In(paris).Format("15:04") != "18:30" {
		t.Errorf("edited = %+v", s2)
	}

	// Pause and resume.
	b.post("alice", loc+"/pause", form()).wantStatus(http.StatusSeeOther)
	if got := b.get("alice", "/schedules").text("schedule-next"); got != "Paused" {
		t.Errorf("paused schedule shows %q", got)
	}
	if got := b.get("alice", loc).text("schedule-state"); got != "Paused" {
		t.Errorf("state = %q", got)
	}
	b.post("alice", loc+"/resume", form()).wantStatus(http.StatusSeeOther)
	s3, _ := db.GetSchedule(b.ctx, b.pool, b.alice.ID, s.ID)
	if s3.Paused || s3.NextDueAt == nil || !s3.NextDueAt.After(time.Now()) {
		t.Errorf("resumed = %+v", s3)
	}

	// Delete.
	b.post("alice", loc+"/delete", form()).wantStatus(http.StatusSeeOther)
	b.get("alice", loc).wantStatus(http.StatusNotFound)
}

func TestSchedulePageShowsTriggerRecords(t *testing.T) {
	t.Parallel()
	b := triggerSetup(t)
	now := time.Now()
	hour := now.Truncate(time.Hour)
	mk := func(name string, next time.Time) db.Schedule {
		s, err := db.CreateSchedule(b.ctx, b.pool, b.alice.ID, db.ScheduleFields{
			Name: name, Prompt: "Report.", Cron: "0 * * * *", Timezone: "UTC", NextDueAt: &next,
		})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// One schedule missed three fires while no server ran; the other is
	// due this hour.
	missed := mk("Missed", hour.Add(-2*time.Hour))
	onTime := mk("On time", hour)
	if _, err := b.rt.FireDueSchedules(b.ctx, hour.Add(30*time.Second)); err != nil {
		t.Fatal(err)
	}

	page := b.get("alice", "/schedules/"+itoa(missed.ID)).wantStatus(http.StatusOK)
	rows := page.all("fire-row")
	if len(rows) != 1 || attr(rows[0], "data-outcome") != db.FireCatchup {
		t.Fatalf("fires shown = %v", page.texts("fire-row"))
	}
	if got := page.text("fire-covers"); !strings.HasPrefix(got, "covers 3 fires since") {
		t.Errorf("covers = %q", got)
	}
	if got := page.text("fire-outcome"); got != "Catch-up" {
		t.Errorf("outcome = %q", got)
	}
	threadLink := ""
	for _, n := range page.all("fire-thread") {
		threadLink = attr(n, "href")
	}
	th := b.get("alice", threadLink).wantStatus(http.StatusOK)
	if got := th.text("thread-trigger"); !strings.HasPrefix(got, "Catch-up, due") || !strings.Contains(got, "covers 3 missed fires") {
		t.Errorf("thread trigger = %q", got)
	}

	page = b.get("alice", "/schedules/"+itoa(onTime.ID)).wantStatus(http.StatusOK)
	if got := page.text("fire-outcome"); got != "Started" {
		t.Errorf("on-time outcome = %q", got)
	}
	if got := page.text("fire-due"); !strings.Contains(got, hour.UTC().Format("15:04")) {
		t.Errorf("due shown = %q, want %s", got, hour.UTC().Format("15:04"))
	}

	// The inbox filters by trigger.
	if ids := b.get("alice", "/inbox/all?trigger=catchup").threadIDs(); len(ids) != 1 {
		t.Errorf("catch-up filter lists %v", ids)
	}
	if ids := b.get("alice", "/inbox/all?trigger=schedule").threadIDs(); len(ids) != 1 {
		t.Errorf("schedule filter lists %v", ids)
	}
}

func TestSchedulesAreTheirOwners(t *testing.T) {
	t.Parallel()
	b := triggerSetup(t)
	next := time.Now().Add(time.Hour)
	s, err := db.CreateSchedule(b.ctx, b.pool, b.alice.ID, db.ScheduleFields{
		Name: "Alice's", Prompt: "Report.", Cron: "0 * * * *", Timezone: "UTC", NextDueAt: &next,
	})
	if err != nil {
		t.Fatal(err)
	}
	id := itoa(s.ID)
	b.get("bob", "/schedules/"+id).wantStatus(http.StatusNotFound)
	for _, action := range []string{"", "/pause", "/resume", "/delete"} {
		b.post("bob", "/schedules/"+id+action, form("prompt", "Mine now", "cron", "* * * * *", "timezone", "UTC")).wantStatus(http.StatusNotFound)
	}
	if len(b.get("bob", "/schedules").all("schedule-row")) != 0 {
		t.Error("bob's list shows alice's schedule")
	}
	b.apiGet("bob", "/api/v1/schedules/"+id).wantError(http.StatusNotFound)
	b.apiDo("bob", http.MethodPatch, "/api/v1/schedules/"+id, `{"paused":true}`).wantError(http.StatusNotFound)
	b.apiDo("bob", http.MethodDelete, "/api/v1/schedules/"+id, nil).wantError(http.StatusNotFound)
	var list struct {
		Schedules []any `json:"schedules"`
	}
	b.apiGet("bob", "/api/v1/schedules").want(http.StatusOK).decode(&list)
	if len(list.Schedules) != 0 {
		t.Errorf("bob's API list = %v", list.Schedules)
	}
	// Alice's schedule is untouched.
	got, err := db.GetSchedule(b.ctx, b.pool, b.alice.ID, s.ID)
	if err != nil || got.Paused || got.Prompt != "Report." {
		t.Errorf("alice's schedule = %+v, %v", got, err)
	}
	// Without a sign-in, nothing.
	b.get("", "/schedules").wantStatus(http.StatusUnauthorized)
	b.apiGet("", "/api/v1/schedules").wantError(http.StatusUnauthorized)
}

// wireSchedule is a schedule as an API client reads it.
type wireSchedule struct {
	ID     int64   `json:"id"`
	Name   string  `json:"name"`
	Skill  *string `json:"skill"`
	Prompt string  `json:"prompt"`
	Cron   string  `json:"cron"`
	Zone   string  `json:"timezone"`
	Folder *struct {
		ID   int64  `json:"id"`
		Name string `json:"name"`
	} `json:"folder"`
	Paused        bool        `json:"paused"`
	SkipIfRunning bool        `json:"skip_if_running"`
	NextFires     []time.Time `json:"next_fires"`
	URL           string      `json:"url"`
	Fires         []struct {
		Outcome string `json:"outcome"`
		Covers  int    `json:"covers"`
	} `json:"fires"`
}

func TestScheduleAPI(t *testing.T) {
	t.Parallel()
	b := triggerSetup(t)
	b.folder(b.alice, "Reports")

	var list struct {
		Schedules []wireSchedule `json:"schedules"`
	}
	b.apiGet("alice", "/api/v1/schedules").want(http.StatusOK).decode(&list)
	if list.Schedules == nil || len(list.Schedules) != 0 {
		t.Errorf("empty list = %+v, want []", list.Schedules)
	}

	for _, tt := range []struct {
		body string
		want string
	}{
		{`{"prompt":"x","cron":"0 8 * *"}`, "cron: Not a valid cron expression"},
		{`{"prompt":"x","cron":"0 8 * * *","timezone":"Mars/Olympus"}`, "timezone: Unknown time zone"},
		{`{"cron":"0 8 * * *"}`, "prompt:"},
		{`{"prompt":"x","cron":"0 8 * * *","skill":"nope"}`, `skill: There is no skill named "nope"`},
		{`{"prompt":"x","cron":"0 8 * * *","folder":"Nowhere"}`, "no folder"},
		{`{"prompt":"x","cron":"0 8 * * *","colour":"red"}`, "unknown field"},
	} {
		b.apiPost("alice", "/api/v1/schedules", tt.body).wantError(http.StatusBadRequest, tt.want)
	}

	res := b.apiPost("alice", "/api/v1/schedules", map[string]any{
		"name": "Weekly", "skill": "researcher", "prompt": "Report on the week.", "cron": "30 17 * * 5",
		"timezone": "America/New_York", "folder": "Reports", "skip_if_running": true,
	}).want(http.StatusCreated)
	var s wireSchedule
	res.decode(&s)
	if res.Header().Get("Location") != "/api/v1/schedules/"+itoa(s.ID) {
		t.Errorf("Location = %q", res.Header().Get("Location"))
	}
	ny, _ := time.LoadLocation("America/New_York")
	if s.Name != "Weekly" || s.Skill == nil || *s.Skill != "researcher" || s.Folder == nil || s.Folder.Name != "Reports" ||
		!s.SkipIfRunning || len(s.NextFires) != 5 || s.URL != "/schedules/"+itoa(s.ID) {
		t.Fatalf("created = %+v", s)
	}
	for _, f := range s.NextFires {
		if l := f.In(ny); l.Weekday() != time.Friday || l.Format("15:04") != "17:30" {
			t.Errorf("next fire %v is not Friday 17:30 in New York", f)
		}
	}

	// PATCH changes only what it names.
	var p wireSchedule
	b.apiDo("alice", http.MethodPatch, "/api/v1/schedules/"+itoa(s.ID), `{"paused":true,"folder":null}`).want(http.StatusOK).decode(&p)
	if !p.Paused || len(p.NextFires) != 0 || p.Folder != nil || p.Cron != "30 17 * * 5" || p.Name != "Weekly" {
		t.Errorf("patched = %+v", p)
	}
	b.apiDo("alice", http.MethodPatch, "/api/v1/schedules/"+itoa(s.ID), `{"cron":"nope"}`).wantError(http.StatusBadRequest, "cron:")
	b.apiDo("alice", http.MethodPatch, "/api/v1/schedules/"+itoa(s.ID), `{"paused":false,"cron":"@daily","timezone":"UTC"}`).want(http.StatusOK).decode(&p)
	if p.Paused || len(p.NextFires) != 5 || p.NextFires[0].UTC().Format("15:04") != "00:00" {
		t.Errorf("resumed = %+v", p)
	}

	var one wireSchedule
	b.apiGet("alice", "/api/v1/schedules/"+itoa(s.ID)).want(http.StatusOK).decode(&one)
	if one.ID != s.ID || one.Fires == nil {
		t.Errorf("one = %+v", one)
	}
	b.apiGet("alice", "/api/v1/schedules").want(http.StatusOK).decode(&list)
	if len(list.Schedules) != 1 {
		t.Errorf("list = %+v", list.Schedules)
	}

	del := b.apiDo("alice", http.MethodDelete, "/api/v1/schedules/"+itoa(s.ID), nil)
	if del.Code != http.StatusNoContent {
		t.Fatalf("delete = %d %s", del.Code, del.Body.String())
	}
	b.apiGet("alice", "/api/v1/schedules/"+itoa(s.ID)).wantError(http.StatusNotFound)
	b.apiGet("alice", "/api/v1/schedules/abc").wantError(http.StatusNotFound)
}
