// Command start-load measures how the server holds up under a burst of run
// starts: it starts a private PostgreSQL, a scripted model and a real
// pizza-bot server process (or targets -url), then drives run starts at
// each given rate, open loop (a request every 1/rate seconds whatever the
// answers), through the API (POST /api/v1/threads) and through a webhook
// URL, and reports per rate:
//
//   - how many starts were accepted, refused fast (503 busy, 429 rate
//     limit) or failed, and how many waited more than 2 s;
//   - p50/p99 latency of accepted starts, and the slowest answer of all;
//   - how fast the accepted runs finished (runs per second until the last
//     one was done);
//   - for webhooks, that every refused delivery sent again (same
//     Idempotency-Key, after its Retry-After) is accepted once: no delivery
//     is lost and none starts two runs.
//
// The saturation point is the highest rate at which nothing was refused.
// The server's per-user rate limits are off unless -limits is given, so that
// what is measured is the server's capacity, not the limit.
//
// Run it from the repository: go run ./cmd/start-load -rates 100,200,300
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/agent/scriptmodel"
	"pizzabot/cmd/internal/benchenv"
	"pizzabot/db"
)

func main() {
	var (
		rates    = flag.String("rates", "50,100,200,300", "comma-separated request rates to try, per second")
		duration = flag.Duration("duration", 10*time.Second, "how long each rate is sent")
		targets  = flag.String("targets", "api,webhook", "what to drive: api, webhook or both")
		server   = flag.String("server", "", "pizza-bot binary (default: go build it)")
		limits   = flag.Bool("limits", false, "keep the server's default per-user rate limits")
		keep     = flag.Bool("keep", false, "keep the temporary directory")
	)
	flag.Parse()
	var rs []int
	for _, f := range strings.Split(*rates, ",") {
		r, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || r <= 0 {
			fmt.Fprintf(os.Stderr, "start-load: bad rate %q\n", f)
			os.Exit(2)
		}
		rs = append(rs, r)
	}
	if err := run(rs, *duration, strings.Split(*targets, ","), *server, *limits, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "start-load:", err)
		os.Exit(1)
	}
}

func run(rates []int, duration time.Duration, targets []string, server string, limits, keep bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if err := benchenv.RaiseFileLimit(20000); err != nil {
		return err
	}
	model := scriptmodel.New(scriptmodel.Script{Default: &scriptmodel.Reply{Content: "Done."}})
	ms := httptest.NewServer(model.Handler())
	defer ms.Close()
	env := []string{"PIZZA_MODEL=compatible:scripted", "COMPATIBLE_BASE_URL=" + ms.URL + "/v1"}
	if !limits {
		env = append(env, "PIZZA_RUN_RATE=0", "PIZZA_WEBHOOK_RATE=0")
	}
	e, err := benchenv.Start(ctx, benchenv.Options{Server: server, Env: env, Keep: keep})
	if err != nil {
		return err
	}
	defer e.Stop()
	pool, err := db.Open(ctx, e.DBURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	base := "http://" + e.Addr
	client := &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{MaxIdleConns: 4000, MaxIdleConnsPerHost: 4000, IdleConnTimeout: time.Minute},
	}

	var rows []result
	for _, target := range targets {
		target = strings.TrimSpace(target)
		var send func(ctx context.Context, key string) (int, time.Duration, error)
		switch target {
		case "api":
			send = func(ctx context.Context, key string) (int, time.Duration, error) {
				return benchenv.Post(ctx, client, base+"/api/v1/threads", base, `{"prompt": "Load `+key+`"}`, "")
			}
		case "webhook":
			hook, err := benchenv.MakeWebhook(ctx, client, base)
			if err != nil {
				return err
			}
			send = func(ctx context.Context, key string) (int, time.Duration, error) {
				return benchenv.Post(ctx, client, hook, "", `{"event": "load", "key": "`+key+`"}`, key)
			}
		default:
			return fmt.Errorf("unknown target %q (want api or webhook)", target)
		}
		for _, rate := range rates {
			fmt.Printf("%s at %d/s for %s…\n", target, rate, duration)
			r, err := drive(ctx, pool, target, rate, duration, send)
			if err != nil {
				return err
			}
			rows = append(rows, r)
			fmt.Println(r.line())
		}
	}
	fmt.Println()
	fmt.Println("| target | rate/s | sent | accepted | 503 | 429 | failed | waited > 2 s | p50 accepted | p99 accepted | slowest answer | runs finished/s | refused then resent |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Println(r.row())
	}
	for _, t := range targets {
		sat := 0
		for _, r := range rows {
			if r.target == strings.TrimSpace(t) && r.busy+r.limited+r.failed == 0 {
				sat = max(sat, r.rate)
			}
		}
		fmt.Printf("%s: no start refused up to %d/s (of the rates tried)\n", strings.TrimSpace(t), sat)
	}
	return nil
}

// result is what one rate of one target gave.
type result struct {
	target                              string
	rate, sent, accepted, busy, limited int
	failed, slow                        int
	p50, p99, slowest                   time.Duration
	finishedPerSec                      float64
	resent                              string
}

func (r result) line() string {
	return fmt.Sprintf("  sent %d: accepted %d, 503 %d, 429 %d, failed %d, >2s %d; accepted p50 %s p99 %s; slowest %s; %.0f runs/s finished%s",
		r.sent, r.accepted, r.busy, r.limited, r.failed, r.slow, r.p50, r.p99, r.slowest, r.finishedPerSec, r.resent)
}

func (r result) row() string {
	return fmt.Sprintf("| %s | %d | %d | %d | %d | %d | %d | %d | %s | %s | %s | %.0f | %s |",
		r.target, r.rate, r.sent, r.accepted, r.busy, r.limited, r.failed, r.slow,
		ms(r.p50), ms(r.p99), ms(r.slowest), r.finishedPerSec, strings.TrimPrefix(r.resent, "; "))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

// answer is one request's outcome.
type answer struct {
	key     string
	status  int
	latency time.Duration
	err     error
}

// drive sends rate requests a second for d, open loop, then waits for the
// accepted runs to finish and, for webhooks, resends the refused deliveries.
func drive(ctx context.Context, pool *pgxpool.Pool, target string, rate int, d time.Duration,
	send func(ctx context.Context, key string) (int, time.Duration, error)) (result, error) {
	before, err := countThreads(ctx, pool)
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	n := int(d.Seconds() * float64(rate))
	answers := make([]answer, n)
	var wg sync.WaitGroup
	tick := time.Second / time.Duration(rate)
	for i := range n {
		// Open loop: each request leaves on its own schedule.
		if wait := time.Until(start.Add(time.Duration(i) * tick)); wait > 0 {
			time.Sleep(wait)
		}
		key := fmt.Sprintf("%s-%d-%d-%d", target, rate, start.UnixNano(), i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, lat, err := send(ctx, key)
			answers[i] = answer{key, status, lat, err}
		}()
	}
	wg.Wait()
	r := result{target: target, rate: rate, sent: n}
	var ok []time.Duration
	var refused []string
	for _, a := range answers {
		r.slowest = max(r.slowest, a.latency)
		if a.latency > 2*time.Second {
			r.slow++
		}
		switch {
		case a.err != nil:
			r.failed++
		case a.status == http.StatusCreated || a.status == http.StatusAccepted:
			r.accepted++
			ok = append(ok, a.latency)
		case a.status == http.StatusServiceUnavailable:
			r.busy++
			refused = append(refused, a.key)
		case a.status == http.StatusTooManyRequests:
			r.limited++
			refused = append(refused, a.key)
		default:
			r.failed++
		}
	}
	r.p50, r.p99 = benchenv.Pct(ok, 50), benchenv.Pct(ok, 99)

	if target == "webhook" && len(refused) > 0 {
		accepted := 0
		for _, key := range refused {
			for attempt := 0; ; attempt++ {
				status, _, err := send(ctx, key)
				if err == nil && (status == http.StatusAccepted || status == http.StatusOK) {
					accepted++
					break
				}
				if attempt > 50 {
					return r, fmt.Errorf("delivery %s refused 50 times (last %d %v)", key, status, err)
				}
				time.Sleep(time.Second)
			}
		}
		r.resent = fmt.Sprintf("; %d of %d resent and accepted", accepted, len(refused))
	}
	want := before + int64(r.accepted)
	if target == "webhook" {
		want += int64(len(refused))
	}
	finishedAt, got, err := waitFinished(ctx, pool, want)
	if err != nil {
		return r, err
	}
	if got != want {
		return r, fmt.Errorf("%d threads after %s at %d/s, want %d: a start was lost or doubled", got, target, rate, want)
	}
	r.finishedPerSec = float64(want-before) / finishedAt.Sub(start).Seconds()
	return r, nil
}

func countThreads(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `SELECT count(*) FROM threads`).Scan(&n)
	return n, err
}

// waitFinished waits until want threads exist and none is running, and
// returns when that was seen.
func waitFinished(ctx context.Context, pool *pgxpool.Pool, want int64) (time.Time, int64, error) {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		var total, open int64
		err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status IN ('running', 'waiting')) FROM threads`).Scan(&total, &open)
		if err != nil {
			return time.Time{}, 0, err
		}
		if total >= want && open == 0 {
			return time.Now(), total, nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, total, errors.New("runs did not finish within 10 minutes")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
