package handlers_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"pizzabot/agent"
	"pizzabot/db"
	"pizzabot/handlers"
	"pizzabot/jobs"
	"pizzabot/jobs/jobstest"
)

const triggerTestSkills = `---
name: researcher
description: Gathers material and writes notes.
allowed-tools: read_file write_file
---
Research the topic.
`

const triggerNotesSkill = `---
name: notes
description: Writes the weekly CRM notes.
allowed-tools: write_file
schedule:
  cron: "0 9 * * 1"
  timezone: Europe/Paris
  prompt: Write the weekly notes.
---
Write notes.
`

// triggerBundle is a server whose runtime knows two skills. Its River
// client inserts jobs without working them: a started run stays running.
type triggerBundle struct {
	*bundle
	rt *jobs.Runtime
}

func triggerSetup(t *testing.T, opts ...func(*handlers.Deps)) *triggerBundle {
	t.Helper()
	skills := agent.LoadSkills(fstest.MapFS{
		"researcher/SKILL.md": {Data: []byte(triggerTestSkills)},
		"notes/SKILL.md":      {Data: []byte(triggerNotesSkill)},
	}, "")
	if len(skills.Errors) > 0 {
		t.Fatalf("skills: %v", skills.Errors)
	}
	tb := &triggerBundle{}
	tb.bundle = setup(t, append([]func(*handlers.Deps){func(d *handlers.Deps) {
		tb.rt = jobstest.New(t, jobs.Config{Pool: d.Pool, Logger: d.Logger, Skills: func() agent.SkillSet { return skills }})
		d.Runs = tb.rt
	}}, opts...)...)
	return tb
}

// hook sends a request to a webhook URL (a path) with the given body and
// headers, as another system would: no user, no browser headers.
func (b *triggerBundle) hook(method, path, body string, hdr map[string]string) *apiResp {
	b.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	b.srv.ServeHTTP(rec, req)
	return &apiResp{ResponseRecorder: rec, t: b.t}
}

// createWebhook creates alice's webhook for the skill on its page and
// returns the URL's path and the signing secret, as shown once.
func (b *triggerBundle) createWebhook(user, skill string, f map[string]string) (path, secret string) {
	b.t.Helper()
	kv := []string{}
	for k, v := range f {
		kv = append(kv, k, v)
	}
	res := b.post(user, "/webhooks/"+skill, form(kv...)).wantStatus(http.StatusOK)
	if cc := res.Header().Get("Cache-Control"); cc != "no-store" {
		b.t.Errorf("Cache-Control of the page showing the token = %q, want no-store", cc)
	}
	u := res.text("webhook-url")
	_, path, ok := strings.Cut(u, "://example.com")
	if !ok || !strings.HasPrefix(path, "/hooks/"+skill+"/pzh_") {
		b.t.Fatalf("webhook URL = %q", u)
	}
	return path, res.text("webhook-secret")
}

// answer is a webhook's JSON answer.
type answer struct {
	ThreadID  *int64 `json:"thread_id"`
	URL       string `json:"url"`
	Duplicate bool   `json:"duplicate"`
	Error     string `json:"error"`
}

func (r *apiResp) answer() answer {
	r.t.Helper()
	var a answer
	r.decode(&a)
	return a
}

func (b *triggerBundle) deliveries(u db.User, skill string) []db.Delivery {
	b.t.Helper()
	wh, err := db.GetWebhook(b.ctx, b.pool, u.ID, skill)
	if err != nil {
		b.t.Fatal(err)
	}
	ds, err := db.ListDeliveries(b.ctx, b.pool, u.ID, wh.ID, 100)
	if err != nil {
		b.t.Fatal(err)
	}
	return ds
}

func (b *triggerBundle) threadCount(u db.User) int {
	b.t.Helper()
	ts, _, err := db.ListThreads(b.ctx, b.pool, db.OwnerAccess(u.ID), db.ThreadFilter{Queue: db.QueueAll}, nil, 1000)
	if err != nil {
		b.t.Fatal(err)
	}
	return len(ts)
}

// signStandard signs a delivery the way the Standard Webhooks specification
// describes it, written from the specification and independent of the
// server's verifier: the secret is "whsec_" and the base64 of the key; the
// signed content is "<msg_id>.<timestamp>.<body>"; the header is
// "v1," and the base64 of its HMAC-SHA256.
func signStandard(secret, msgID string, ts int64, body string) string {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		panic(err)
	}
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msgID + "." + strconv.FormatInt(ts, 10) + "." + body))
	return "v1," + base64.StdEncoding.EncodeToString(h.Sum(nil))
}

func standardHeaders(secret, msgID string, ts int64, body string) map[string]string {
	return map[string]string{
		"Content-Type":      "application/json",
		"webhook-id":        msgID,
		"webhook-timestamp": strconv.FormatInt(ts, 10),
		"webhook-signature": signStandard(secret, msgID, ts, body),
	}
}

func TestStandardWebhooksSignerMatchesTheSpecExample(t *testing.T) {
	t.Parallel()
	// The example of the specification's reference libraries.
	got := signStandard("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, `{"test": 2432232314}`)
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("signature = %s, want %s", got, want)
	}
}

func TestWebhookWithStandardSignature(t *testing.T) {
	t.Parallel()
	b := triggerSetup(t)
	path, secret := b.createWebhook("alice", "researcher", map[string]string{"signature": "standard"})
	if !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("generated secret = %q, want whsec_…", secret)
	}
	token := path[strings.LastIndex(path, "/")+1:]

	// Shown once: the page afterwards has neither the token nor the secret.
	page := b.get("alice", "/webhooks/researcher").wantStatus(http.StatusOK)
	if strings.Contains(page.body(), token) || strings.Contains(page.body(), secret) {
		t.Error("the webhook page shows the token or the secret again")
	}
	if got := page.text("webhook-signature"); !strings.Contains(got, "Standard Webhooks") {
		t.Errorf("signature shown = %q", got)
	}

	body := `{"deal":"ACME renewal","stage":"closed won"}`
	now := time.Now().Unix()
	res := b.hook(http.MethodPost, path, body, standardHeaders(secret, "msg_1", now, body)).want(http.StatusAccepted)
	a := res.answer()
	if a.ThreadID == nil || a.URL != "http://example.com/threads/"+itoa(*a.ThreadID) {
		t.Fatalf("answer = %+v", a)
	}
	th := b.reload(b.alice, *a.ThreadID)
	if th.TriggerKind != db.TriggerWebhook || th.TriggerRef != "msg_1" || th.Skill != "researcher" || th.Status != db.StatusRunning {
		t.Errorf("thread = %+v", th)
	}
	ms, err := db.ListMessages(b.ctx, b.pool, b.alice.ID, th.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || !strings.Contains(ms[0].Content, "```json\n"+body+"\n```") || !strings.Contains(ms[0].Content, "webhook") {
		t.Errorf("prompt = %q, want the body fenced after an instruction", ms[0].Content)
	}

	// Rotating the sender's secret: several signatures, one of them good.
	body2 := `{"deal":"Globex"}`
	hdr := standardHeaders(secret, "msg_2", now, body2)
	hdr["webhook-signature"] = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= " + hdr["webhook-signature"] + " v1a,bm90IGEgc2lnbmF0dXJl"
	b.hook(http.MethodPost, path, body2, hdr).want(http.StatusAccepted)

	// A sender that adds a browser's Origin header is still judged by its
	// token and signature alone, not refused as a cross-site request.
	body3 := `{"deal":"Initech"}`
	hdr = standardHeaders(secret, "msg_3b", now, body3)
	hdr["Origin"] = "https://sender.example"
	hdr["Sec-Fetch-Site"] = "cross-site"
	b.hook(http.MethodPost, path, body3, hdr).want(http.StatusAccepted)

	refused := []struct {
		name string
		body string
		hdr  map[string]string
		want string
	}{
		{"tampered body", `{"deal":"ACME renewal","stage":"closed lost"}`, standardHeaders(secret, "msg_3", now, body), "match"},
		{"other message id", body, func() map[string]string {
			h := standardHeaders(secret, "msg_4", now, body)
			h["webhook-id"] = "msg_5"
			return h
		}(), "match"},
		{"stale timestamp", body, standardHeaders(secret, "msg_6", now-6*60, body), "timestamp"},
		{"future timestamp", body, standardHeaders(secret, "msg_7", now+6*60, body), "timestamp"},
		{"another secret", body, standardHeaders("whsec_"+base64.StdEncoding.EncodeToString([]byte("another secret of 24 byte")), "msg_8", now, body), "match"},
		{"no signature", body, map[string]string{"Content-Type": "application/json", "webhook-id": "msg_9", "webhook-timestamp": strconv.FormatInt(now, 10)}, "missing"},
	}
	for _, tt := range refused {
		res := b.hook(http.MethodPost, path, tt.body, tt.hdr)
		if msg := res.wantError(http.StatusUnauthorized, tt.want); msg == "" {
			t.Errorf("%s: no message", tt.name)
		}
	}
	if n := b.threadCount(b.alice); n != 3 {
		t.Errorf("%d threads, want 3: refused deliveries start nothing", n)
	}
	// Every delivery is recorded, and shown on the page.
	ds := b.deliveries(b.alice, "researcher")
	counts := map[string]int{}
	for _, d := range ds {
		counts[d.Outcome]++
		if d.Outcome == db.DeliveryRejected && (d.Status != http.StatusUnauthorized || d.Reason == "") {
			t.Errorf("rejected delivery = %+v", d)
		}
	}
	if counts[db.DeliveryAccepted] != 3 || counts[db.DeliveryRejected] != len(refused) {
		t.Errorf("deliveries = %v", counts)
	}
	page = b.get("alice", "/webhooks/researcher").wantStatus(http.StatusOK)
	if got := len(page.all("delivery-row")); got != len(ds) {
		t.Errorf("page lists %d deliveries, want %d", got, len(ds))
	}
	if !slicesContain(page.texts("delivery-reason"), "timestamp") {
		t.Errorf("reasons shown = %v", page.texts("delivery-reason"))
	}
	// The token never reaches the log.
	if strings.Contains(b.logs.String(), token) {
		t.Error("the log holds the webhook token")
	}
}

func slicesContain(ss []string, sub string) bool {
	for _, s := range ss {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// signGitHub signs a body the way GitHub documents X-Hub-Signature-256.
func signGitHub(secret, body string) string {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(body))
	return "sha256=" + hex.EncodeToString(h.Sum(nil))
}

func TestGitHubSignerMatchesGitHubsExample(t *testing.T) {
	t.Parallel()
	// The example in GitHub's documentation on validating deliveries.
	got := signGitHub("It's a Secret to Everybody", "Hello, World!")
	if want := "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"; got != want {
		t.Fatalf("signature = %s, want %s", got, want)
	}
}

func TestWebhookWithGitHubSignature(t *testing.T) {
	t.Parallel()
	b := triggerSetup(t)
	const secret = "a secret typed in GitHub's settings"
	path, shown := b.createWebhook("alice", "researcher", map[string]string{"signature": "github", "secret": secret})
	if shown != "" {
		t.Errorf("a typed secret was shown back: %q", shown)
	}
	body := `{"action":"opened","issue":{"title":"Crash on start"}}`
	gh := func(event, delivery, sig string) map[string]string {
		return map[string]string{"Content-Type": "application/json", "X-GitHub-Event": event, "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": sig}
	}

	// GitHub's hello when the hook is added starts nothing.
	ping := `{"zen":"Keep it logically awesome."}`
	b.hook(http.MethodPost, path, ping, gh("ping", "d-0", signGitHub(secret, ping))).want(http.StatusOK)
	if n := b.threadCount(b.alice); n != 0 {
		t.Fatalf("a ping started %d runs", n)
	}

	a := b.hook(http.MethodPost, path, body, gh("issues", "d-1", signGitHub(secret, body))).want(http.StatusAccepted).answer()
	th := b.reload(b.alice, *a.ThreadID)
	if th.Title != "researcher webhook: issues" || th.TriggerRef != "d-1" {
		t.Errorf("thread = %+v", th)
	}
	b.hook(http.MethodPost, path, body, gh("issues", "d-2", signGitHub("wrong secret", body))).wantError(http.StatusUnauthorized, "X-Hub-Signature-256")
	b.hook(http.MethodPost, path, body+" ", gh("issues", "d-3", signGitHub(secret, body))).wantError(http.StatusUnauthorized)
	b.hook(http.MethodPost, path, body, gh("issues", "d-4", "")).wantError(http.StatusUnauthorized, "missing")
	if n := b.threadCount(b.alice); n != 1 {
		t.Errorf("%d threads, want 1", n)
	}
}

func TestWebhookRedeliveredConcurrentlyStartsOneRun(t *testing.T) {
	t.Parallel()
	b := triggerSetup(t)
	path, _ := b.createWebhook("alice", "researcher", map[string]string{"signature": "none"})
	body := `{"deal":"ACME"}`
	const n = 20
	answers := make([]*apiResp, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			answers[i] = b.hook(http.MethodPost, path, body, map[string]string{"Content-Type": "application/json", "Idempotency-Key": "deal-4711"})
		})
	}
	wg.Wait()
	var first int64
	accepted := 0
	for _, res := range answers {
		if res.Code != http.StatusAccepted && res.Code != http.StatusOK {
			t.Fatalf("status %d: %s", res.Code, res.Body.String())
		}
		a := res.answer()
		if a.ThreadID == nil {
			t.Fatalf("answer without a thread: %s", res.Body.String())
		}
		if first == 0 {
			first = *a.ThreadID
		}
		if *a.ThreadID != first {
			t.Errorf("deliveries answered threads %d and %d, want one", first, *a.ThreadID)
		}
		if res.Code == http.StatusAccepted {
			accepted++
		} else if !a.Duplicate {
			t.Errorf("a 200 answer is not marked duplicate: %s", res.Body.String())
		}
	}
	if accepted != 1 {
		t.Errorf("%d deliveries accepted, want 1", accepted)
	}
	if got := b.threadCount(b.alice); got != 1 {
		t.Errorf("%d threads, want 1", got)
	}
	var dups int
	for _, d := range b.deliveries(b.alice, "researcher") {
		if d.Outcome == db.DeliveryDuplicate {
			dups++
			if d.ThreadID == nil || *d.ThreadID != first {
				t.Errorf("duplicate delivery = %+v, want it to point at thread %d", d, first)
			}
		}
	}
	if dups != n-1 {
		t.Errorf("%d duplicates recorded, want %d", dups, n-1)
	}
	// Another delivery id is another run.
	b.hook(http.MethodPost, path, body, map[string]string{"Content-Type": "application/json", "Idempotency-Key": "deal-4712"}).want(http.StatusAccepted)
	// Without an id, every call is a run.
	b.hook(http.MethodPost, path, "plain text", map[string]string{"Content-Type": "text/plain"}).want(http.StatusAccepted)
	b.hook(http.MethodPost, path, "plain text", map[string]string{"Content-Type": "text/plain"}).want(http.StatusAccepted)
	if got := b.threadCount(b.alice); got != 4 {
		t.Errorf("%d threads, want 4", got)
	}
}

func TestWebhookRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := triggerSetup(t)
	path, _ := b.createWebhook("alice", "researcher", map[string]string{"signature": "none"})
	token := path[strings.LastIndex(path, "/")+1:]
	asJSON := map[string]string{"Content-Type": "application/json"}

	b.hook(http.MethodPost, "/hooks/researcher/pzh_"+strings.Repeat("A", 43), "{}", asJSON).wantError(http.StatusNotFound)
	b.hook(http.MethodPost, "/hooks/researcher/nonsense", "{}", asJSON).wantError(http.StatusNotFound)
	b.hook(http.MethodPost, "/hooks/notes/"+token, "{}", asJSON).wantError(http.StatusNotFound)
	b.hook(http.MethodPost, "/hooks/no-such-skill/"+token, "{}", asJSON).wantError(http.StatusNotFound)
	b.hook(http.MethodPost, "/hooks/researcher", "{}", asJSON).wantError(http.StatusNotFound)
	b.hook(http.MethodPost, "/hooks/researcher/"+token+"/extra", "{}", asJSON).wantError(http.StatusNotFound)
	res := b.hook(http.MethodGet, path, "", nil)
	res.wantError(http.StatusMethodNotAllowed, "POST")
	if got := res.Header().Get("Allow"); got != "POST" {
		t.Errorf("Allow = %q, want POST", got)
	}
	b.hook(http.MethodPut, path, "{}", asJSON).wantError(http.StatusMethodNotAllowed)
	big := `{"x":"` + strings.Repeat("a", 100<<10) + `"}`
	b.hook(http.MethodPost, path, big, asJSON).wantError(http.StatusRequestEntityTooLarge, "KB")
	b.hook(http.MethodPost, path, "\x89PNG", map[string]string{"Content-Type": "image/png"}).wantError(http.StatusUnsupportedMediaType)
	b.hook(http.MethodPost, path, "{not json", asJSON).wantError(http.StatusBadRequest, "JSON")
	b.hook(http.MethodPost, path, "{}", map[string]string{"Content-Type": "application/json", "Idempotency-Key": strings.Repeat("k", 201)}).wantError(http.StatusBadRequest, "Idempotency-Key")
	if n := b.threadCount(b.alice); n != 0 {
		t.Fatalf("bad input started %d runs", n)
	}
	var reasons []string
	for _, d := range b.deliveries(b.alice, "researcher") {
		if d.Outcome != db.DeliveryRejected {
			t.Errorf("delivery = %+v, want rejected", d)
		}
		reasons = append(reasons, strconv.Itoa(d.Status)+" "+d.Reason)
	}
	// Unknown tokens belong to no one; the rest are recorded.
	if len(reasons) != 8 {
		t.Errorf("recorded %d rejections, want 8: %q", len(reasons), reasons)
	}

	// Rotating: the old URL stops, the new one works.
	newPath, _ := b.createWebhook("alice", "researcher", map[string]string{"signature": "none"})
	b.hook(http.MethodPost, path, "{}", asJSON).wantError(http.StatusNotFound)
	b.hook(http.MethodPost, newPath, "{}", asJSON).want(http.StatusAccepted)
	// Revoking: nothing works.
	b.post("alice", "/webhooks/researcher/revoke", form()).wantStatus(http.StatusSeeOther)
	b.hook(http.MethodPost, newPath, "{}", asJSON).wantError(http.StatusNotFound)
	page := b.get("alice", "/webhooks/researcher").wantStatus(http.StatusOK)
	if got := page.text("webhook-state"); !strings.HasPrefix(got, "Revoked") {
		t.Errorf("state = %q, want Revoked", got)
	}
	if strings.Contains(b.logs.String(), token) {
		t.Error("the log holds a webhook token")
	}
}

func TestWebhookFormRefusesBadSecrets(t *testing.T) {
	t.Parallel()
	b := triggerSetup(t)
	for _, f := range []map[string]string{
		{"signature": "standard", "secret": "whsec_not base64!"},
		{"signature": "standard", "secret": "whsec_" + base64.StdEncoding.EncodeToString([]byte("short"))},
		{"signature": "github", "secret": "short"},
		{"signature": "none", "secret": "whatever it is"},
		{"signature": "rot13"},
	} {
		kv := []string{}
		for k, v := range f {
			kv = append(kv, k, v)
		}
		res := b.post("alice", "/webhooks/researcher", form(kv...)).wantStatus(http.StatusUnprocessableEntity)
		if res.text("field-error") == "" || res.text("webhook-url") != "" {
			t.Errorf("%v: want an error next to the field and no URL", f)
		}
	}
	if _, err := db.GetWebhook(b.ctx, b.pool, b.alice.ID, "researcher"); err == nil {
		t.Error("a refused form created a webhook")
	}
}

func TestWebhookPagesAreTheirOwners(t *testing.T) {
	t.Parallel()
	b := triggerSetup(t)
	path, _ := b.createWebhook("alice", "researcher", map[string]string{"signature": "none"})
	b.hook(http.MethodPost, path, "{}", map[string]string{"Content-Type": "application/json"}).want(http.StatusAccepted)

	// Bob sees his own state of the skill's webhook: none, no deliveries.
	page := b.get("bob", "/webhooks/researcher").wantStatus(http.StatusOK)
	if got := page.text("webhook-state"); got != "Not set up" {
		t.Errorf("bob's state = %q", got)
	}
	if len(page.all("delivery-row")) != 0 {
		t.Error("bob sees alice's deliveries")
	}
	b.post("bob", "/webhooks/researcher/revoke", form()).wantStatus(http.StatusNotFound)
	b.get("bob", "/webhooks/no-such-skill").wantStatus(http.StatusNotFound)
	// Alice's webhook still works, and the run is hers.
	a := b.hook(http.MethodPost, path, "{}", map[string]string{"Content-Type": "application/json"}).want(http.StatusAccepted).answer()
	b.get("bob", "/threads/"+itoa(*a.ThreadID)).wantStatus(http.StatusNotFound)
	list := b.get("alice", "/webhooks").wantStatus(http.StatusOK)
	states := map[string]string{}
	for _, row := range list.all("webhook-row") {
		states[attr(row, "data-skill")] = text(row)
	}
	if !strings.Contains(states["researcher"], "Active") || !strings.Contains(states["notes"], "Not set up") {
		t.Errorf("alice's webhooks = %v", states)
	}
	if got := b.get("bob", "/webhooks").text("webhook-state"); got == "" || strings.Contains(got, "Active") {
		t.Errorf("bob's list shows %q", got)
	}
}
