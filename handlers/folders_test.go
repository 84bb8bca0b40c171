package handlers_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"pizzabot/db"
)

func TestCreateFolder(t *testing.T) {
	t.Parallel()
	b := setup(t)

	r := b.post("alice", "/folders", form("name", "  Research ", "return", "/inbox/unread")).wantStatus(http.StatusSeeOther)
	if got := r.Header().Get("Location"); got != "/inbox/unread" {
		t.Errorf("Location = %q, want /inbox/unread", got)
	}
	r = b.post("alice", "/folders", form("name", "Reading", "return", "/inbox/all"), htmx).wantStatus(http.StatusOK)
	if !r.isFragment() || r.byID("sidebar") == nil {
		t.Fatal("htmx did not get the sidebar back")
	}
	if got := r.texts("folder-item"); !slices.Equal(got, []string{"Reading", "Research"}) {
		t.Errorf("folders = %q, want [Reading Research]", got)
	}

	tests := []struct {
		name, input, want string
	}{
		{"empty", "   ", "Folder name is empty."},
		{"too long", strings.Repeat("x", 81), "Folder name is longer than 80 characters."},
		{"taken", "Research", "You already have a folder with that name."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := b.post("alice", "/folders", form("name", tt.input)).wantStatus(http.StatusUnprocessableEntity)
			if got := r.text("field-error"); got != tt.want {
				t.Errorf("error = %q, want %q", got, tt.want)
			}
			if got := attr(r.byID("new-folder-name"), "value"); got != tt.input {
				t.Errorf("the name was not kept: %q", got)
			}
			r = b.post("alice", "/folders", form("name", tt.input), htmx).wantStatus(http.StatusUnprocessableEntity)
			if !r.isFragment() || r.text("field-error") != tt.want {
				t.Errorf("htmx: fragment %v, error %q", r.isFragment(), r.text("field-error"))
			}
		})
	}
	fs, err := db.ListFolders(b.ctx, b.pool, b.alice.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 2 {
		t.Errorf("alice has %d folders, want 2", len(fs))
	}

	t.Run("another user may use the same name", func(t *testing.T) {
		b.post("bob", "/folders", form("name", "Research")).wantStatus(http.StatusSeeOther)
	})
}

func TestRenameFolder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	research := b.folder(b.alice, "Research")
	b.folder(b.alice, "Reading")
	path := "/folders/" + itoa(research.ID) + "/rename"

	r := b.post("alice", path, form("name", "Papers")).wantStatus(http.StatusSeeOther)
	if got := r.Header().Get("Location"); got != "/folders" {
		t.Errorf("Location = %q, want /folders", got)
	}
	r = b.post("alice", path, form("name", "Studies"), htmx).wantStatus(http.StatusOK)
	if row := r.byID("folder-" + itoa(research.ID)); row == nil {
		t.Fatal("htmx did not get the folder's row back")
	}
	if got := attr(r.byID("folder-name-"+itoa(research.ID)), "value"); got != "Studies" {
		t.Errorf("row shows %q, want Studies", got)
	}
	if got := r.texts("folder-item"); !slices.Equal(got, []string{"Reading", "Studies"}) {
		t.Errorf("sidebar folders = %q", got)
	}

	tests := []struct {
		name, input, want string
	}{
		{"empty", "", "Folder name is empty."},
		{"taken", "Reading", "You already have a folder with that name."},
	}
	for _, tt := range tests {
		for _, hdr := range []map[string]string{nil, htmx} {
			r := b.post("alice", path, form("name", tt.input), hdr).wantStatus(http.StatusUnprocessableEntity)
			if got := r.text("field-error"); got != tt.want {
				t.Errorf("%s: error = %q, want %q", tt.name, got, tt.want)
			}
			if got := attr(r.byID("folder-name-"+itoa(research.ID)), "value"); got != tt.input {
				t.Errorf("%s: the name was not kept: %q", tt.name, got)
			}
		}
	}
	if f, _ := db.GetFolder(b.ctx, b.pool, b.alice.ID, research.ID); f.Name != "Studies" {
		t.Errorf("name = %q, want Studies", f.Name)
	}
	b.post("alice", "/folders/999999/rename", form("name", "x")).wantStatus(http.StatusNotFound)
}

func TestDeleteFolder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	research := b.folder(b.alice, "Research")
	th := b.thread(b.alice, "kept", db.StatusDone)
	b.move(b.alice, research.ID, th.ID)
	path := "/folders/" + itoa(research.ID) + "/delete"

	r := b.post("alice", path, form()).wantStatus(http.StatusSeeOther)
	if got := r.Header().Get("Location"); got != "/folders" {
		t.Errorf("Location = %q, want /folders", got)
	}
	if got := b.reload(b.alice, th.ID); got.FolderID != nil {
		t.Errorf("thread still in folder %d", *got.FolderID)
	}
	if got := b.get("alice", "/inbox/unread").threadIDs(); !slices.Equal(got, []int64{th.ID}) {
		t.Errorf("unread = %v, want the thread of the deleted folder", got)
	}
	b.get("alice", "/inbox/all?folder="+itoa(research.ID)).wantStatus(http.StatusNotFound)
	b.post("alice", path, form()).wantStatus(http.StatusNotFound)

	reading := b.folder(b.alice, "Reading")
	r = b.post("alice", "/folders/"+itoa(reading.ID)+"/delete", form(), htmx).wantStatus(http.StatusOK)
	if len(r.all("folder-item")) != 0 {
		t.Error("the sidebar still lists the deleted folder")
	}
	if !strings.Contains(r.text("flash"), "Reading") {
		t.Errorf("flash = %q", r.text("flash"))
	}
}

func TestFoldersPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	research := b.folder(b.alice, "Research")
	th := b.thread(b.alice, "in it", db.StatusDone)
	b.move(b.alice, research.ID, th.ID)

	r := b.get("alice", "/folders").wantStatus(http.StatusOK)
	if got := r.texts("folder-row"); len(got) != 1 || !strings.Contains(got[0], "1 thread, 1 unread") {
		t.Errorf("rows = %q", got)
	}
	r = b.get("carol", "/folders").wantStatus(http.StatusOK)
	if !strings.HasPrefix(r.text("empty-state"), "No folders yet") {
		t.Errorf("empty state = %q", r.text("empty-state"))
	}

	t.Run("folder view", func(t *testing.T) {
		r := b.get("alice", "/inbox/unread?folder="+itoa(research.ID)).wantStatus(http.StatusOK)
		if got := r.text("page-heading"); got != "Research" {
			t.Errorf("heading = %q, want Research", got)
		}
		if got, want := r.title(), "Research · Unread · Pizza Bot"; got != want {
			t.Errorf("title = %q, want %q", got, want)
		}
		for _, n := range r.all("folder-item") {
			if attr(n, "aria-current") != "page" {
				t.Error("the folder is not marked as the current place")
			}
		}
		if got := r.threadIDs(); !slices.Equal(got, []int64{th.ID}) {
			t.Errorf("threads = %v", got)
		}
	})
}
