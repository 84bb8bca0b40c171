package jobs_test

import (
	"context"
	"strings"
	"testing"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
)

// TestStopsShownAsWhatTheyAre checks that an answer cut off at the output
// token limit, or stopped by the provider's filter, ends its run as failed
// with words that say so, and that what the model wrote is kept.
func TestStopsShownAsWhatTheyAre(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := jobstest.Start(t, jobstest.Options{Script: scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastUserContains: "long"}, Replies: []scriptmodel.Reply{{Content: "The first half of a long", FinishReason: "length"}}},
		{Match: scriptmodel.Match{LastUserContains: "forbidden"}, Replies: []scriptmodel.Reply{{Content: "I can't", FinishReason: "content_filter"}}},
		{Match: scriptmodel.Match{LastUserContains: "fine"}, Replies: []scriptmodel.Reply{{Content: "All done."}}},
	}}})
	user, err := db.UpsertUser(ctx, h.Pool, "test", "alice", "alice@example.com", "Alice", false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		prompt, status, say, kept string
	}{
		{"write something long", db.StatusFailed, "output token limit", "The first half of a long"},
		{"something forbidden", db.StatusFailed, "refused", "I can't"},
		{"a fine task", db.StatusDone, "", "All done."},
	} {
		th, err := h.Start(ctx, user, jobs.StartRequest{Prompt: tt.prompt})
		if err != nil {
			t.Fatal(err)
		}
		got := jobstest.Wait(t, h.Pool, user, th.ID, tt.status)
		if tt.say != "" && !strings.Contains(got.Error, tt.say) {
			t.Errorf("%q: run error = %q, want it to say %q", tt.prompt, got.Error, tt.say)
		}
		if tt.say == "" && got.Error != "" {
			t.Errorf("%q: run error = %q, want none", tt.prompt, got.Error)
		}
		ms, err := db.ListMessages(ctx, h.Pool, user.ID, th.ID)
		if err != nil {
			t.Fatal(err)
		}
		if last := ms[len(ms)-1]; last.Role != db.RoleAssistant || last.Content != tt.kept {
			t.Errorf("%q: last message = %s %q, want the assistant's %q kept", tt.prompt, last.Role, last.Content, tt.kept)
		}
	}
}
