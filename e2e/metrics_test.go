package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db/dbtest"
	"pizzabot/internal/eventually"
)

// TestMetrics runs the real server with PIZZA_METRICS_ADDR and a few runs
// (one done after a tool call, one failing at the provider, one waiting
// for an answer, one started by a webhook), then reads the series back
// from /metrics on its own address.
func TestMetrics(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	model := scriptmodel.New(scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastUserContains: "Fail"}, Replies: []scriptmodel.Reply{{Status: 400, ErrorMessage: "bad request"}}},
		{Match: scriptmodel.Match{LastUserContains: "Ask", LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{Name: "ask_user", Arguments: `{"question": "Which region?"}`}}}}},
		{Match: scriptmodel.Match{LastUserContains: "Write", LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
			{Name: "write_file", Arguments: `{"path": "notes.md", "content": "hello"}`}}}}},
	}, Default: &scriptmodel.Reply{Content: "Done."}})
	modelURL := scripted(t, model)
	addr, maddr := freeAddr(t), freeAddr(t)
	p := startServe(t, bin, "DATABASE_URL="+dbtest.NewURL(t), "PIZZA_ADDR="+addr, "PIZZA_DATA_ROOT="+dataRoot(t),
		"PIZZA_METRICS_ADDR="+maddr, "PIZZA_MODEL=compatible:scripted", "COMPATIBLE_BASE_URL="+modelURL+"/v1")
	waitReady(t, addr, p)
	base := "http://" + addr
	post := func(path, ctype, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("Origin", base)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, prompt := range []string{"Write notes", "Fail please", "Ask me"} {
		resp := post("/api/v1/threads", "application/json", `{"prompt": "`+prompt+`"}`)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("start %q: %s", prompt, resp.Status)
		}
	}
	resp := post("/webhooks/pizza-guide", "application/x-www-form-urlencoded", url.Values{"signature": {"none"}}.Encode())
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	hook := regexp.MustCompile(`/hooks/pizza-guide/pzh_[A-Za-z0-9_-]+`).Find(page)
	if hook == nil {
		t.Fatalf("no webhook URL on its page: %s", resp.Status)
	}
	resp = post(string(hook), "application/json", `{"n": 1}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("webhook delivery: %s", resp.Status)
	}

	scrape := func() map[string]float64 {
		t.Helper()
		resp, err := http.Get("http://" + maddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /metrics: %s", resp.Status)
		}
		series := map[string]float64{}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			i := strings.LastIndexByte(line, ' ')
			v, err := strconv.ParseFloat(line[i+1:], 64)
			if err != nil {
				t.Fatalf("bad line %q", line)
			}
			series[line[:i]] = v
		}
		return series
	}
	// Four runs: two done (the tool run and the webhook's), one failed, one
	// waiting for its answer. Five steps at least: the tool run's model turn
	// runs its write_file in the same step (a database tool), then one
	// more model step; one step each for the others, and the waiting run's.
	want := map[string]func(float64) bool{
		`pizza_model_calls_total{outcome="ok",provider="compatible"}`:             func(v float64) bool { return v >= 4 },
		`pizza_model_calls_total{outcome="provider_error",provider="compatible"}`: func(v float64) bool { return v == 1 },
		`pizza_model_tokens_total{kind="prompt",provider="compatible"}`:           func(v float64) bool { return v > 0 },
		`pizza_tool_calls_total{outcome="ok",tool="write_file"}`:                  func(v float64) bool { return v == 1 },
		`pizza_step_duration_seconds_count{outcome="ok"}`:                         func(v float64) bool { return v >= 5 },
		`pizza_step_queue_seconds_count`:                                          func(v float64) bool { return v >= 5 },
		`pizza_runs{status="waiting"}`:                                            func(v float64) bool { return v == 1 },
		`pizza_runs{status="running"}`:                                            func(v float64) bool { return v == 0 },
		`pizza_calls_waiting`:                                                     func(v float64) bool { return v == 1 },
		`pizza_calls_waiting_oldest_seconds`:                                      func(v float64) bool { return v >= 0 },
		`pizza_webhook_deliveries_total{status="202"}`:                            func(v float64) bool { return v == 1 },
		`pizza_river_jobs{state="available"}`:                                     func(v float64) bool { return v >= 0 },
		`pizza_db_pool_max_connections{pool="request"}`:                           func(v float64) bool { return v == 16 },
		`pizza_db_pool_max_connections{pool="worker"}`:                            func(v float64) bool { return v == 16 },
		`pizza_live_streams`:                                                      func(v float64) bool { return v == 0 },
		`pizza_db_up`:                                                             func(v float64) bool { return v == 1 },
	}
	var bad []string
	eventually.Ok(t, 60*time.Second, p.holds("the metrics to show the runs", func() bool {
		got := scrape()
		bad = bad[:0]
		for name, ok := range want {
			v, found := got[name]
			if !found || !ok(v) {
				bad = append(bad, fmt.Sprintf("%s = %v (present: %v)", name, v, found))
			}
		}
		if len(bad) > 0 {
			t.Logf("waiting for: %s", strings.Join(bad, "; "))
		}
		return len(bad) == 0
	}))
}
