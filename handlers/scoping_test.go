package handlers_test

import (
	"net/http"
	"testing"

	"pizzabot/db"
)

// TestUserScoping checks that a user neither sees nor changes another's
// threads and folders, and that trying looks like asking for nothing.
func TestUserScoping(t *testing.T) {
	t.Parallel()
	b := setup(t)
	folder := b.folder(b.alice, "Alice's")
	th := b.thread(b.alice, "Alice's secret", db.StatusWaiting)
	b.move(b.alice, folder.ID, th.ID)
	bobs := b.thread(b.bob, "Bob's", db.StatusDone)

	t.Run("listings and counts", func(t *testing.T) {
		for _, path := range []string{"/inbox/all", "/inbox/unread", "/inbox/action"} {
			r := b.get("bob", path).wantStatus(http.StatusOK)
			for _, id := range r.threadIDs() {
				if id == th.ID {
					t.Errorf("%s lists alice's thread", path)
				}
			}
			if got := r.count("count-action"); got != 0 {
				t.Errorf("%s: action count = %d, want 0", path, got)
			}
			if got := r.count("count-all"); got != 1 {
				t.Errorf("%s: all count = %d, want 1", path, got)
			}
			if n := len(r.all("folder-item")); n != 0 {
				t.Errorf("%s lists %d of alice's folders", path, n)
			}
		}
	})

	thread := "/threads/" + itoa(th.ID)
	folderPath := "/folders/" + itoa(folder.ID)
	tests := []struct {
		method, path string
		form         []string
	}{
		{"GET", thread, nil},
		{"GET", "/inbox/all?folder=" + itoa(folder.ID), nil},
		{"POST", thread + "/read", nil},
		{"POST", thread + "/unread", nil},
		{"POST", thread + "/archive", nil},
		{"POST", thread + "/unarchive", nil},
		{"POST", thread + "/move", []string{"folder", "none"}},
		{"POST", folderPath + "/rename", []string{"name", "Mine now"}},
		{"POST", folderPath + "/delete", nil},
		// Moving one's own thread into another user's folder.
		{"POST", "/threads/" + itoa(bobs.ID) + "/move", []string{"folder", itoa(folder.ID)}},
		{"POST", "/threads/bulk", []string{"action", "move", "ids", itoa(bobs.ID), "folder", itoa(folder.ID)}},
	}
	for _, tt := range tests {
		for _, hdr := range []map[string]string{nil, htmx} {
			var r *response
			if tt.method == "GET" {
				r = b.get("bob", tt.path, hdr)
			} else {
				r = b.post("bob", tt.path, form(tt.form...), hdr)
			}
			if r.Code != http.StatusNotFound {
				t.Errorf("bob %s %s (htmx %v) = %d, want 404", tt.method, tt.path, hdr != nil, r.Code)
			}
		}
	}

	got := b.reload(b.alice, th.ID)
	if got.Archived || !got.Unread || got.FolderID == nil || *got.FolderID != folder.ID {
		t.Errorf("bob changed alice's thread: %+v", got)
	}
	if f, err := db.GetFolder(b.ctx, b.pool, b.alice.ID, folder.ID); err != nil || f.Name != "Alice's" {
		t.Errorf("bob changed alice's folder: %+v, %v", f, err)
	}
	if got := b.reload(b.bob, bobs.ID); got.FolderID != nil {
		t.Error("bob's thread went into alice's folder")
	}
}
