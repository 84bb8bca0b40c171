package jobs_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
	"pizzabot/tools"
)

// Skills that differ only in what they say about their tools and model.
var offerSkills = fstest.MapFS{
	// public is how public Agent Skills look: no allowed-tools.
	"public/SKILL.md": {Data: []byte("---\nname: public\ndescription: A public skill that lists no tools.\n---\nWork.\n")},
	// listed names two tools.
	"listed/SKILL.md": {Data: []byte("---\nname: listed\ndescription: Lists two tools.\nallowed-tools: [read_file, publish_brief]\n---\nWork.\n")},
	// none declares an empty list: no tools at all.
	"none/SKILL.md": {Data: []byte("---\nname: none\ndescription: Declares no tools.\nallowed-tools: []\n---\nWork.\n")},
	// pinned runs on its own model.
	"pinned/SKILL.md": {Data: []byte("---\nname: pinned\ndescription: Pins its model.\nmodel: compatible:pinned-model\nallowed-tools: [task]\n---\nWork.\n")},
}

// allowed-tools omitted offers what the server's policy offers (its denies
// dropped); present offers exactly that list (an empty list: nothing). The
// offered tools still pass the gate: an undeclared skill's call of a tool
// with outside effects asks, as it would without a skill.
func TestOfferFollowsAllowedTools(t *testing.T) {
	t.Parallel()
	b := setupWith(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: withRole(skillRun("public"), "user"), Replies: publishCall("p1", "Public")},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: say("Done.")},
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: say("Done.")},
	}}, offerSkills, tools.WorkspaceTools(tools.Workspace{})...)
	setPolicy(t, b.pool, `{"permissions": {"deny": ["edit_file"]}}`)

	all := b.rt.Toolbox().Names()
	tests := []struct {
		skill string
		want  []string // nil: every tool but the denied
	}{
		{"public", nil},
		{"listed", []string{"read_file", "publish_brief"}},
		{"none", []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.skill, func(t *testing.T) {
			th := b.start(t, "Work on it.", tt.skill)
			if tt.skill == "public" {
				b.wait(t, th.ID, db.StatusWaiting) // publish_brief acts outside: the default asks
				if cs := b.pending(t, th.ID); len(cs) != 1 || cs[0].Name != "publish_brief" {
					t.Fatalf("pending = %+v", cs)
				}
				if got := b.publish.Got(); len(got) != 0 {
					t.Fatalf("published without approval: %v", got)
				}
			} else {
				b.wait(t, th.ID, db.StatusDone)
			}
			reqs := offered(b.model.Requests(), "# Skill: "+tt.skill)
			if len(reqs) == 0 {
				t.Fatal("no request for the skill")
			}
			got := reqs[0]
			if tt.want == nil {
				if slices.Contains(got, "edit_file") {
					t.Errorf("the denied edit_file was offered: %v", got)
				}
				for _, n := range all {
					if n != "edit_file" && n != tools.TaskTool && !slices.Contains(got, n) {
						t.Errorf("%s not offered to a skill without allowed-tools: %v", n, got)
					}
				}
				return
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tt.want))
			if !slices.Equal(got, want) {
				t.Errorf("offered %v, want %v", got, want)
			}
		})
	}
	// A skill without allowed-tools is never greyed out for a missing tool.
	for _, s := range b.rt.Toolbox().SkillAvailability(b.rt.Skills()) {
		if s.Skill.Name == "public" && !s.Available() {
			t.Errorf("public is unavailable: missing %v", s.Missing)
		}
	}
}

// A skill's "model" pins its runs: a start (StartTx, which schedules and
// webhooks start through too) and a delegation to the skill use it; other
// runs keep the default.
func TestSkillPinsItsModel(t *testing.T) {
	t.Parallel()
	b := setupWith(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: withRole(skillRun("public"), "user"), Replies: calls(task("t1", "pinned", "Do the pinned part."))},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: say("Done.")},
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: say("Done.")},
	}}, offerSkills)

	th := b.start(t, "Pinned work.", "pinned")
	if th.Model != "compatible:pinned-model" {
		t.Errorf("thread model = %q", th.Model)
	}
	b.wait(t, th.ID, db.StatusDone)
	plain := b.start(t, "Plain work.", "")
	if plain.Model != "compatible:scripted" {
		t.Errorf("plain thread model = %q, want the default", plain.Model)
	}
	b.wait(t, plain.ID, db.StatusDone)

	parent := b.start(t, "Delegate.", "public")
	b.wait(t, parent.ID, db.StatusDone)
	kids := b.children(t, parent.ID)
	if len(kids) != 1 || kids[0].Model != "compatible:pinned-model" {
		t.Fatalf("sub-agent = %+v, want the pinned model", kids)
	}
	for _, r := range b.model.Requests() {
		pinned := len(r.Messages) > 0 && slices.ContainsFunc(r.Messages[:1], func(m scriptmodel.RecordedMessage) bool {
			return strings.Contains(m.Content, "# Skill: pinned")
		})
		if want := map[bool]string{true: "pinned-model", false: "scripted"}[pinned]; r.Model != want {
			t.Errorf("request to model %q, want %q (pinned skill: %v)", r.Model, want, pinned)
		}
	}
}

// PIZZA_RETENTION: the hourly prune deletes the threads archived longer
// ago than the retention, and keeps those archived since, those
// unarchived, and those never archived.
func TestPruneArchivedThreads(t *testing.T) {
	t.Parallel()
	b := setupWith(t, scriptmodel.Script{}, offerSkills)
	ctx := context.Background()
	mk := func(title string, archived bool) int64 {
		th, err := db.CreateThread(ctx, b.pool, db.NewThread{UserID: b.user.ID, Title: title})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.SetThreadStatus(ctx, b.pool, th.ID, db.StatusDone, ""); err != nil {
			t.Fatal(err)
		}
		if archived {
			if _, err := db.SetArchived(ctx, b.pool, b.user.ID, []int64{th.ID}, true); err != nil {
				t.Fatal(err)
			}
		}
		return th.ID
	}
	old, recent, never, back := mk("old", true), mk("recent", true), mk("never", false), mk("back", true)
	if _, err := db.SetArchived(ctx, b.pool, b.user.ID, []int64{back}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `UPDATE thread_archives SET archived_at = now() - interval '40 days' WHERE thread_id = $1`, old); err != nil {
		t.Fatal(err)
	}
	// A runtime of the same database with no retention, then one with 30 days.
	if err := jobstest.New(t, jobs.Config{Pool: b.pool}).PruneArchived(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.GetThread(ctx, b.pool, b.user.ID, old); err != nil {
		t.Fatal("deleted without a retention")
	}
	if err := jobstest.New(t, jobs.Config{Pool: b.pool, Retention: 30 * 24 * time.Hour}).PruneArchived(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.GetThread(ctx, b.pool, b.user.ID, old); err == nil {
		t.Error("the thread archived 40 days ago is still there")
	}
	for _, id := range []int64{recent, never, back} {
		if _, err := db.GetThread(ctx, b.pool, b.user.ID, id); err != nil {
			t.Errorf("thread %d: %v", id, err)
		}
	}
	c, err := db.CountThreads(ctx, b.pool, db.OwnerAccess(b.user.ID))
	if err != nil || c.All != 3 {
		t.Errorf("counts = %+v (%v), want 3 threads", c, err)
	}
}
