package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/agent/scriptmodel"
	"pizzabot/cmd/internal/benchenv"
	"pizzabot/db"
)

// Latency (issue 29): the dead time a person feels between the steps of a
// run, measured on a real server process with a scripted model that
// answers at once, so that every millisecond is the server's:
//
//   - tool gap: from the end of the model's answer asking for one ungated
//     write_file to the run's next model request;
//   - start: from the POST of a new thread (API) to its first model request;
//   - approve: from the POST of an approval to the next model request
//     (the approved call runs in between, as a person's Approve does);
//   - webhook: from a webhook delivery's POST to the first model request.
//
// Each over n runs one after another, p50/p95/p99, on an idle server (1
// run in flight: the measured one) and beside k background runs in flight
// (-latency-flights): runs that never end, each alternating a model call
// that streams for about a second, as a provider's does, and a write_file
// call. The model server stamps each request as it arrives and each answer
// as it ends; the key in a run's prompt names the run.

// latencyKey names a benchmark run in its prompt: lat-<case>-<n>.
var latencyKey = regexp.MustCompile(`lat-(tool|start|ask|hook)-\d+`)

// stamps are the model requests of the benchmark's runs, by key.
type stamps struct {
	mu   sync.Mutex
	reqs map[string][]stamp
	wake map[string]chan struct{}
}

// stamp is one model request: when it arrived and when its answer ended.
type stamp struct{ arrived, answered time.Time }

// wrap stamps the requests the model handler serves.
func (s *stamps) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived := time.Now()
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
		key := latencyKey.Find(body)
		if key == nil || r.Method != http.MethodPost {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.reqs[string(key)] = append(s.reqs[string(key)], stamp{arrived, time.Now()})
		if c, ok := s.wake[string(key)]; ok {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	})
}

// waitFor waits until the run named key has made n model requests, and
// returns them.
func (s *stamps) waitFor(ctx context.Context, key string, n int) ([]stamp, error) {
	s.mu.Lock()
	c, ok := s.wake[key]
	if !ok {
		c = make(chan struct{}, 1)
		s.wake[key] = c
	}
	s.mu.Unlock()
	deadline := time.After(2 * time.Minute)
	for {
		s.mu.Lock()
		got := append([]stamp(nil), s.reqs[key]...)
		s.mu.Unlock()
		if len(got) >= n {
			return got, nil
		}
		select {
		case <-c:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			return nil, fmt.Errorf("run %s made %d model requests in 2 minutes, want %d", key, len(got), n)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// latencyEnv is the server, its model and what drives them.
type latencyEnv struct {
	st     *stamps
	base   string
	hook   string
	pool   *pgxpool.Pool
	client *http.Client
	seq    int
}

func latency(t *table, server string, n int, flights []int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if err := benchenv.RaiseFileLimit(20000); err != nil {
		return err
	}
	model := scriptmodel.New(scriptmodel.Script{
		Rules: []scriptmodel.Rule{
			{Match: scriptmodel.Match{LastUserContains: "lat-bg-"},
				Replies: []scriptmodel.Reply{{Content: "Working on it.", Chunks: 2, ChunkDelay: 500 * time.Millisecond,
					ToolCalls: []scriptmodel.ScriptToolCall{{Name: "write_file", Arguments: `{"path": "bg.txt", "content": "x"}`}}}}},
			{Match: scriptmodel.Match{LastUserContains: "lat-tool-", LastRole: "user"},
				Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{{Name: "write_file", Arguments: `{"path": "note.txt", "content": "x"}`}}}}},
			{Match: scriptmodel.Match{LastUserContains: "lat-ask-", LastRole: "user"},
				Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{{Name: "ls", Arguments: `{}`}}}}},
		},
		Default: &scriptmodel.Reply{Content: "Done."},
	})
	st := &stamps{reqs: map[string][]stamp{}, wake: map[string]chan struct{}{}}
	ms := httptest.NewServer(st.wrap(model.Handler()))
	defer ms.Close()
	e, err := benchenv.Start(ctx, benchenv.Options{Server: server, Env: []string{
		"PIZZA_MODEL=compatible:scripted", "COMPATIBLE_BASE_URL=" + ms.URL + "/v1",
		"PIZZA_RUN_RATE=0", "PIZZA_WEBHOOK_RATE=0",
	}})
	if err != nil {
		return err
	}
	defer e.Stop()
	pool, err := db.Open(ctx, e.DBURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	// ls asks for a person's approval; write_file (a database tool) runs
	// at once, as by default.
	if err := db.SetServerSetting(ctx, pool, db.SettingToolPolicy, `{"permissions": {"ask": ["ls"]}}`); err != nil {
		return err
	}
	le := &latencyEnv{st: st, base: "http://" + e.Addr, pool: pool, client: &http.Client{
		Timeout:   time.Minute,
		Transport: &http.Transport{MaxIdleConns: 1000, MaxIdleConnsPerHost: 1000, IdleConnTimeout: time.Minute},
	}}
	if le.hook, err = benchenv.MakeWebhook(ctx, le.client, le.base); err != nil {
		return err
	}
	// Warm up: the server's first runs build its model client and caches.
	for range 5 {
		if _, err := le.one(ctx, "tool"); err != nil {
			return err
		}
	}
	cases := []struct{ name, what, goal string }{
		{"tool", "model request -> next model request across one ungated write_file", "p50 <= 10 ms, p95 <= 30 ms"},
		{"start", "POST /api/v1/threads -> first model request", "p50 <= 15 ms"},
		{"ask", "POST approve -> next model request (the approved call runs between)", "p50 <= 20 ms, p95 <= 50 ms"},
		{"hook", "webhook POST -> first model request", "figure"},
	}
	background := 0
	for _, inFlight := range flights {
		// The background runs: as many as make inFlight with the measured one.
		for ; background < inFlight-1; background++ {
			if _, _, err := le.start(ctx, fmt.Sprintf("lat-bg-%d", background)); err != nil {
				return err
			}
		}
		if background > 0 {
			time.Sleep(3 * time.Second) // every background run is going
			var running int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM threads WHERE status = 'running'`).Scan(&running); err != nil {
				return err
			}
			if running < background {
				return fmt.Errorf("%d runs running, want the %d background runs", running, background)
			}
		}
		for _, c := range cases {
			fmt.Printf("latency: %s, %d runs, %d in flight…\n", c.name, n, inFlight)
			ds, err := le.many(ctx, c.name, n)
			if err != nil {
				return err
			}
			goal := c.goal
			if inFlight > 1 {
				goal = "p95 < 100 ms"
			}
			t.add(fmt.Sprintf("latency, %d in flight: %s (%d runs)", inFlight, c.what, n),
				fmt.Sprintf("p50 %s, **p95 %s**, p99 %s", msf(benchenv.Pct(ds, 50)), msf(benchenv.Pct(ds, 95)), msf(benchenv.Pct(ds, 99))), goal)
		}
	}
	return nil
}

// msf prints a duration in milliseconds with one decimal.
func msf(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
}

// many measures n runs of a case, one after another.
func (le *latencyEnv) many(ctx context.Context, name string, n int) ([]time.Duration, error) {
	ds := make([]time.Duration, n)
	for i := range ds {
		var err error
		if ds[i], err = le.one(ctx, name); err != nil {
			return nil, err
		}
	}
	return ds, nil
}

// one runs one case once and returns its latency.
func (le *latencyEnv) one(ctx context.Context, name string) (time.Duration, error) {
	le.st.mu.Lock()
	le.seq++
	key := fmt.Sprintf("lat-%s-%d", name, le.seq)
	le.st.mu.Unlock()
	switch name {
	case "tool":
		if _, _, err := le.start(ctx, key); err != nil {
			return 0, err
		}
		got, err := le.st.waitFor(ctx, key, 2)
		if err != nil {
			return 0, err
		}
		return got[1].arrived.Sub(got[0].answered), nil
	case "start":
		_, t0, err := le.start(ctx, key)
		if err != nil {
			return 0, err
		}
		got, err := le.st.waitFor(ctx, key, 1)
		if err != nil {
			return 0, err
		}
		return got[0].arrived.Sub(t0), nil
	case "hook":
		var t0 time.Time
		for {
			t0 = time.Now()
			status, _, err := benchenv.Post(ctx, le.client, le.hook, "", `{"event": "`+key+`"}`, key)
			if err != nil {
				return 0, err
			}
			if status == http.StatusServiceUnavailable {
				time.Sleep(busyRetry) // sent again with the same Idempotency-Key, as a sender does
				continue
			}
			if status != http.StatusAccepted && status != http.StatusOK {
				return 0, fmt.Errorf("webhook: %d", status)
			}
			break
		}
		got, err := le.st.waitFor(ctx, key, 1)
		if err != nil {
			return 0, err
		}
		return got[0].arrived.Sub(t0), nil
	case "ask":
		id, _, err := le.start(ctx, key)
		if err != nil {
			return 0, err
		}
		call, err := le.pending(ctx, id)
		if err != nil {
			return 0, err
		}
		body := fmt.Sprintf(`{"decisions": [{"id": %d, "type": "approve"}]}`, call)
		t0 := time.Now()
		status, _, err := benchenv.Post(ctx, le.client, fmt.Sprintf("%s/api/v1/threads/%d/decisions", le.base, id), le.base, body, "")
		if err != nil {
			return 0, err
		}
		if status != http.StatusAccepted {
			return 0, fmt.Errorf("approve call %d of thread %d: %d", call, id, status)
		}
		got, err := le.st.waitFor(ctx, key, 2)
		if err != nil {
			return 0, err
		}
		return got[1].arrived.Sub(t0), nil
	}
	return 0, fmt.Errorf("unknown case %q", name)
}

// busyRetry is how long a start refused as busy (503, admission control)
// waits before it is sent again: a burst of n starts at once is refused
// in part, by design, and the latency counts from the accepted request.
const busyRetry = 20 * time.Millisecond

// start posts a new thread whose prompt is key and returns its id and when
// the accepted request was sent.
func (le *latencyEnv) start(ctx context.Context, key string) (int64, time.Time, error) {
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, le.base+"/api/v1/threads", strings.NewReader(`{"prompt": "`+key+`"}`))
		if err != nil {
			return 0, time.Time{}, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", le.base)
		sent := time.Now()
		resp, err := le.client.Do(req)
		if err != nil {
			return 0, time.Time{}, err
		}
		var th struct {
			ID int64 `json:"id"`
		}
		err = json.NewDecoder(resp.Body).Decode(&th)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusServiceUnavailable:
			time.Sleep(busyRetry)
			continue
		case err != nil || resp.StatusCode != http.StatusCreated:
			return 0, time.Time{}, fmt.Errorf("start %s: %s (%v)", key, resp.Status, err)
		}
		return th.ID, sent, nil
	}
}

// pending waits until thread id waits for a decision and returns its call.
func (le *latencyEnv) pending(ctx context.Context, id int64) (int64, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		var call int64
		err := le.pool.QueryRow(ctx, `SELECT c.id FROM tool_calls c JOIN threads t ON t.id = c.thread_id
			WHERE c.thread_id = $1 AND c.state = 'pending' AND t.status = 'waiting'`, id).Scan(&call)
		if err == nil {
			return call, nil
		}
		if !errors.Is(err, db.ErrNotFound) && !strings.Contains(err.Error(), "no rows") {
			return 0, err
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0, fmt.Errorf("thread %d did not wait for a decision in 2 minutes", id)
}
