package notify_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"pizzabot/db"
	"pizzabot/notify"
)

// A call waiting in a thread of a shared folder is posted once to the
// folder's Slack webhook although two people (the owner and a member) are
// told of it; a thread outside the folder posts nothing there.
func TestFolderWebhookPostsOncePerEvent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	bob, err := db.UpsertUser(ctx, b.pool, "https://idp.example", "bob", "bob@example.com", "Bob", false)
	if err != nil {
		t.Fatal(err)
	}
	// Sign-in verified his address: he is user:bob@example.com to shares.
	if _, err := b.pool.Exec(ctx, `UPDATE users SET email_verified = true WHERE id = $1`, bob.ID); err != nil {
		t.Fatal(err)
	}
	f, err := db.CreateFolder(ctx, b.pool, b.user.ID, "Deal desk")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ShareFolder(ctx, b.pool, b.user.ID, f.ID, "user:bob@example.com", db.RoleMember); err != nil {
		t.Fatal(err)
	}
	room, own := newReceiver(t, http.StatusOK), newReceiver(t, http.StatusOK)
	hook, _, err := b.webhooks.ConnectFolder(ctx, b.user.ID, f.ID, "slack", room.URL+"/services/T0/B0/folder", "#deal-desk")
	if err != nil {
		t.Fatal(err)
	}
	// Alice's own webhook still hears of it, and is not the folder's.
	if _, _, err := b.webhooks.Connect(ctx, b.user.ID, "slack", own.URL+"/services/T0/B0/own", "me"); err != nil {
		t.Fatal(err)
	}
	if got, err := notify.ListWebhooks(ctx, b.pool, b.user.ID, 0); err != nil || len(got) != 1 || got[0].Label != "me" {
		t.Fatalf("alice's own webhooks = %+v, %v", got, err)
	}

	inFolder, c := b.waitingCall(&f.ID, "Quote for ACME")
	outside, c2 := b.waitingCall(nil, "Private notes")

	d := b.replica(notify.Config{Channels: b.webhooks.Channels()})
	// Told as the run service tells it: each decider in turn, in one
	// transaction, then again by another replica's retry.
	deciders, err := db.CallDeciders(ctx, b.pool, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(deciders) != 2 || deciders[0] != b.user.ID || deciders[1] != bob.ID {
		t.Fatalf("deciders = %v, want alice and bob", deciders)
	}
	for range 2 {
		b.publishAll(d, notify.DecisionEvent(deciders[0], inFolder, c), notify.DecisionEvent(deciders[1], inFolder, c))
	}
	b.publishAll(d, notify.DecisionEvent(b.user.ID, outside, c2))

	key := notify.DecisionEvent(0, inFolder, c).Key
	got := b.delivery(key, "slack", hook.ID)
	if got.State != notify.StateSent || got.TargetLabel != "#deal-desk" {
		t.Fatalf("folder delivery = %+v", got)
	}
	b.delivery(notify.DecisionEvent(0, outside, c2).Key, "slack", 0) // alice's own: settled
	time.Sleep(300 * time.Millisecond)                               // a second post would have come by now
	bodies, _ := room.got()
	if len(bodies) != 1 {
		t.Fatalf("the folder's webhook got %d posts, want 1", len(bodies))
	}
	var msg struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(bodies[0], &msg); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Quote for ACME", "send_quote waits for a decision", "to: buyer@example.com"} {
		if !strings.Contains(msg.Text, want) {
			t.Errorf("folder post lacks %q:\n%s", want, msg.Text)
		}
	}
	if strings.Contains(msg.Text, "Private notes") || strings.Contains(msg.Text, "your decision") {
		t.Errorf("folder post = %s", msg.Text)
	}
	if bodies, _ := own.got(); len(bodies) != 2 {
		t.Fatalf("alice's own webhook got %d posts, want 2 (both threads)", len(bodies))
	}
	var n int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM notification_deliveries WHERE folder_id = $1`, f.ID).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d folder deliveries (%v), want 1", n, err)
	}
}

// Only the folder's owner lists, connects and removes its webhooks; to
// anyone else the folder does not exist.
func TestFolderWebhooksScopedToOwner(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	bob, err := db.UpsertUser(ctx, b.pool, "https://idp.example", "bob", "bob@example.com", "Bob", false)
	if err != nil {
		t.Fatal(err)
	}
	f, err := db.CreateFolder(ctx, b.pool, b.user.ID, "Deal desk")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ShareFolder(ctx, b.pool, b.user.ID, f.ID, "user:bob@example.com", db.RoleMember); err != nil {
		t.Fatal(err)
	}
	room := newReceiver(t, http.StatusOK)
	hook, _, err := b.webhooks.ConnectFolder(ctx, b.user.ID, f.ID, "discord", room.URL+"/api/webhooks/1/x", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.webhooks.ConnectFolder(ctx, bob.ID, f.ID, "slack", room.URL+"/s", ""); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("bob connecting to alice's folder: %v", err)
	}
	if got, err := notify.ListWebhooks(ctx, b.pool, bob.ID, f.ID); err != nil || len(got) != 0 {
		t.Fatalf("bob lists %+v, %v", got, err)
	}
	if ok, err := notify.DeleteWebhook(ctx, b.pool, bob.ID, f.ID, hook.ID); err != nil || ok {
		t.Fatalf("bob deleted alice's folder webhook: %v, %v", ok, err)
	}
	if ok, err := notify.DeleteWebhook(ctx, b.pool, b.user.ID, 0, hook.ID); err != nil || ok {
		t.Fatalf("the folder's webhook removed as a person's: %v, %v", ok, err)
	}
	if got, err := notify.ListWebhooks(ctx, b.pool, b.user.ID, f.ID); err != nil || len(got) != 1 || got[0].Host != "127.0.0.1" {
		t.Fatalf("alice lists %+v, %v", got, err)
	}
	if ok, err := notify.DeleteWebhook(ctx, b.pool, b.user.ID, f.ID, hook.ID); err != nil || !ok {
		t.Fatalf("alice deletes: %v, %v", ok, err)
	}
}

// A folder's webhook is read again when its post is sent: a webhook
// removed since the event, or a thread moved out of the folder since,
// gets nothing.
func TestFolderWebhookRecheckedAtSend(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	f, err := db.CreateFolder(ctx, b.pool, b.user.ID, "Deal desk")
	if err != nil {
		t.Fatal(err)
	}
	kept, removed := newReceiver(t, http.StatusOK), newReceiver(t, http.StatusOK)
	keptHook, _, err := b.webhooks.ConnectFolder(ctx, b.user.ID, f.ID, "slack", kept.URL+"/kept", "")
	if err != nil {
		t.Fatal(err)
	}
	removedHook, _, err := b.webhooks.ConnectFolder(ctx, b.user.ID, f.ID, "discord", removed.URL+"/removed", "")
	if err != nil {
		t.Fatal(err)
	}
	moved, c1 := b.waitingCall(&f.ID, "Moved to my own")
	stays, c2 := b.waitingCall(&f.ID, "Stays")
	// Queued with no replica running, then changed before any sends.
	queue, err := notify.New(notify.Config{Pool: b.pool, Channels: b.webhooks.Channels()})
	if err != nil {
		t.Fatal(err)
	}
	b.publishAll(queue, notify.DecisionEvent(b.user.ID, moved, c1), notify.DecisionEvent(b.user.ID, stays, c2))
	if n, err := db.MoveThreads(ctx, b.pool, b.user.ID, []int64{moved.ID}, nil); err != nil || n != 1 {
		t.Fatalf("move: %d, %v", n, err)
	}
	if ok, err := notify.DeleteWebhook(ctx, b.pool, b.user.ID, f.ID, removedHook.ID); err != nil || !ok {
		t.Fatalf("delete: %v, %v", ok, err)
	}
	b.replica(notify.Config{Channels: b.webhooks.Channels()})

	k1, k2 := notify.DecisionEvent(0, moved, c1).Key, notify.DecisionEvent(0, stays, c2).Key
	if got := b.delivery(k1, "slack", keptHook.ID); got.State != notify.StateSkipped || !strings.Contains(got.LastError, "no longer in the folder") {
		t.Errorf("post about the thread moved out = %+v, want skipped", got)
	}
	if got := b.delivery(k2, "slack", keptHook.ID); got.State != notify.StateSent {
		t.Errorf("post about the thread still in the folder = %+v, want sent", got)
	}
	for _, key := range []string{k1, k2} {
		if got := b.delivery(key, "discord", removedHook.ID); got.State != notify.StateGone {
			t.Errorf("post of %s to the removed webhook = %+v, want gone", key, got)
		}
	}
	if bodies, _ := removed.got(); len(bodies) != 0 {
		t.Errorf("the removed webhook got %d posts", len(bodies))
	}
	bodies, _ := kept.got()
	if len(bodies) != 1 || strings.Contains(string(bodies[0]), "Moved to my own") {
		t.Errorf("the folder's webhook got %d posts (%s), want only the one about the thread still in it", len(bodies), bodies)
	}
}
