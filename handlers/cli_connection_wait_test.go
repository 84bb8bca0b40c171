package handlers_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"pizzabot/cli"
	"pizzabot/db"
)

// The terminal client's show, run against the real handlers as alice, of
// a run waiting for her own ${user:API_KEY} value of a server: it says to
// enter that value for the server, with the connect URL, not to connect
// the server; an OAuth wait beside it still says connect.
func TestCLIShowsAWaitForTheUsersSecret(t *testing.T) {
	b := setup(t)
	th := b.thread(b.alice, "Update my deals", db.StatusWaiting)
	if err := db.WaitForConnections(b.ctx, b.pool, th.ID, b.alice.ID, []db.ConnectionWait{
		{Server: "crm", Secret: "API_KEY", Reason: "your API_KEY is not entered"},
		{Server: "notes", Reason: "not connected"},
	}); err != nil {
		t.Fatal(err)
	}
	id := strconv.FormatInt(th.ID, 10)
	out := cliShow(t, b, "alice", id)
	for _, want := range []string{
		"  enter your API_KEY for crm  (your API_KEY is not entered)\n" +
			"    open /connect/crm?return=%2Fthreads%2F" + id + " on the server in a browser where you are signed in: the run goes on by itself\n",
		"  connect notes  (not connected)\n    open /connect/notes?return=%2Fthreads%2F" + id + " on the server",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "connect crm") {
		t.Errorf("show says to connect crm:\n%s", out)
	}

	// Another reader of the thread cannot enter alice's value.
	b.inGroups(b.bob)
	f := b.folder(b.alice, "Sales")
	b.move(b.alice, f.ID, th.ID)
	if _, err := db.ShareFolder(b.ctx, b.pool, b.alice.ID, f.ID, "user:"+b.bob.Email, db.RoleViewer); err != nil {
		t.Fatal(err)
	}
	if out, want := cliShow(t, b, "bob", id), "  the run's owner's API_KEY for crm  (your API_KEY is not entered)\n    the run's owner must enter their API_KEY\n"; !strings.Contains(out, want) {
		t.Errorf("bob's show lacks %q:\n%s", want, out)
	}
}

// cliShow runs the client's show of thread id as user, against the test's
// server, and returns what it printed.
func cliShow(t *testing.T, b *bundle, user, id string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("X-Test-User", user)
		b.srv.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	show, ok := cli.Lookup("show")
	if !ok {
		t.Fatal("no show command")
	}
	env := map[string]string{"PIZZA_URL": srv.URL, "NO_COLOR": "1", "HOME": t.TempDir()}
	var out, errOut bytes.Buffer
	if code := show.Run(context.Background(), []string{id}, cli.Env{
		Getenv: func(k string) string { return env[k] }, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut,
	}); code != 0 {
		t.Fatalf("show as %s: exit %d; stderr:\n%s", user, code, errOut.String())
	}
	return out.String()
}
