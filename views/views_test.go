package views

import (
	"context"
	"strings"
	"testing"
	"time"

	"pizzabot/db"
)

func TestPageTitle(t *testing.T) {
	t.Parallel()
	tests := []struct {
		action int64
		name   string
		want   string
	}{
		{0, "Unread", "Unread · Pizza Bot"},
		{3, "Action", "(3) Action · Pizza Bot"},
		{1, "", "(1) Pizza Bot"},
	}
	for _, tt := range tests {
		if got := PageTitle(tt.action, tt.name); got != tt.want {
			t.Errorf("PageTitle(%d, %q) = %q, want %q", tt.action, tt.name, got, tt.want)
		}
	}
}

func TestListQueryURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		q    ListQuery
		want string
	}{
		{ListQuery{Queue: db.QueueAll}, "/inbox/all"},
		{ListQuery{Queue: db.QueueUnread, FolderID: 3}, "/inbox/unread?folder=3"},
		{ListQuery{Queue: db.QueueAction, FolderID: 3, Trigger: "webhook", After: "abc"}, "/inbox/action?after=abc&folder=3&trigger=webhook"},
	}
	for _, tt := range tests {
		if got := tt.q.URL(); got != tt.want {
			t.Errorf("%+v.URL() = %q, want %q", tt.q, got, tt.want)
		}
	}
}

func TestRelTime(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		ago  time.Duration
		want string
	}{
		{10 * time.Second, "now"},
		{5 * time.Minute, "5m"},
		{3 * time.Hour, "3h"},
		{50 * time.Hour, "2d"},
		{30 * 24 * time.Hour, "Oct 30"},
		{400 * 24 * time.Hour, "Oct 25, 2025"},
	}
	for _, tt := range tests {
		if got := relTime(now.Add(-tt.ago), now); got != tt.want {
			t.Errorf("relTime(-%v) = %q, want %q", tt.ago, got, tt.want)
		}
	}
}

func TestThreadRowEscapes(t *testing.T) {
	t.Parallel()
	var sb strings.Builder
	th := db.Thread{ID: 7, Title: `<img src=x onerror="alert(1)">`, Status: db.StatusDone, TriggerKind: db.TriggerManual}
	if err := ThreadRow(th, time.Now()).Render(context.Background(), &sb); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sb.String(), "<img") {
		t.Errorf("title not escaped: %s", sb.String())
	}
}

func TestAssetCarriesHash(t *testing.T) {
	t.Parallel()
	got := Asset("app.css")
	if !strings.HasPrefix(got, "/static/") || !strings.HasSuffix(got, "/app.css") || got == "/static/missing/app.css" {
		t.Errorf("Asset(app.css) = %q", got)
	}
}
