// Command bench runs the whole performance set and prints one table with
// the goals of issue 13 beside the figures measured in this run:
//
//   - one agent step vs a bare River job (BenchmarkStep / BenchmarkRiverNoop,
//     each -count times in one go test run, medians), and their ratio;
//   - steps per second at saturation at 1, 10 and 100 workers beside River's
//     no-op jobs per second (BenchmarkThroughput);
//   - the inbox page of a user with 100,000 threads: the whole HTTP request
//     to a real server process, rendered, p50/p95;
//   - live fan-out at 1,000 and 10,000 streams (cmd/sse-load);
//   - run starts under load (cmd/start-load);
//   - the dead time between a run's steps, after a start, an approval and
//     a webhook, with 1 and with many runs in flight (latency.go, issue 29).
//
// Figures are measured, never asserted: the command fails only when a
// measurement cannot be made. On a shared machine compare ratios taken in
// one run. Run it from the repository: go run ./cmd/bench
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"pizzabot/cmd/internal/benchenv"
	"pizzabot/db"
)

func main() {
	var (
		count   = flag.Int("count", 3, "runs of BenchmarkStep and BenchmarkRiverNoop (medians)")
		steps   = flag.Int("steps", 2000, "runs per BenchmarkStep / jobs per BenchmarkRiverNoop")
		tput    = flag.Int("throughput", 1000, "runs per BenchmarkThroughput case")
		streams = flag.String("streams", "1000,10000", "stream counts for sse-load (empty: skip)")
		rates   = flag.String("rates", "50,100,200", "start-load rates (empty: skip)")
		lat     = flag.Int("latency", 100, "runs per latency case")
		flights = flag.String("latency-flights", "1,100", "runs in flight in each latency round")
		bin     = flag.String("server", "", "pizza-bot binary to measure (default: go build it)")
		only    = flag.String("only", "", "comma-separated parts to run: step,throughput,inbox,live,start,latency (default all)")
	)
	flag.Parse()
	parts := map[string]bool{}
	for _, p := range strings.Split(*only, ",") {
		if p = strings.TrimSpace(p); p != "" {
			parts[p] = true
		}
	}
	want := func(p string) bool { return len(parts) == 0 || parts[p] }
	var t table
	if err := run(&t, want, *count, *steps, *tput, *lat, *flights, *streams, *rates, *bin); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		t.print()
		os.Exit(1)
	}
	t.print()
}

// table is the summary printed at the end.
type table struct{ rows [][3]string }

func (t *table) add(what, figure, goal string) {
	t.rows = append(t.rows, [3]string{what, figure, goal})
}

func (t *table) print() {
	fmt.Println()
	fmt.Println("| what | measured | goal |")
	fmt.Println("|---|---|---|")
	for _, r := range t.rows {
		fmt.Printf("| %s | %s | %s |\n", r[0], r[1], r[2])
	}
}

func run(t *table, want func(string) bool, count, steps, tput, lat int, flights, streams, rates, server string) error {
	if want("step") {
		if err := stepVsNoop(t, count, steps); err != nil {
			return err
		}
	}
	if want("throughput") {
		if err := throughput(t, tput); err != nil {
			return err
		}
	}
	if server == "" && (want("inbox") || want("live") || want("start") || want("latency")) {
		dir, err := os.MkdirTemp("", "pizza-bench-bin-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		server = filepath.Join(dir, "pizza-bot")
		fmt.Println("building the server…")
		if out, err := exec.Command("go", "build", "-o", server, "pizzabot").CombinedOutput(); err != nil {
			return fmt.Errorf("build: %v\n%s", err, out)
		}
	}
	if want("inbox") {
		if err := inbox(t, server); err != nil {
			return err
		}
	}
	if want("live") && streams != "" {
		for _, f := range strings.Split(streams, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return fmt.Errorf("-streams: %w", err)
			}
			if err := fanout(t, server, n); err != nil {
				return err
			}
		}
	}
	if want("start") && rates != "" {
		if err := startLoad(t, server, rates); err != nil {
			return err
		}
	}
	if want("latency") && lat > 0 {
		var fs []int
		for _, f := range strings.Split(flights, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return fmt.Errorf("-latency-flights: %q", f)
			}
			fs = append(fs, n)
		}
		if err := latency(t, server, lat, fs); err != nil {
			return err
		}
	}
	return nil
}

// goTest runs go test with the output shown as it comes, and returns it.
func goTest(args ...string) (string, error) {
	return command("go", append([]string{"test"}, args...)...)
}

func command(name string, args ...string) (string, error) {
	fmt.Printf("$ %s %s\n", name, strings.Join(args, " "))
	cmd := exec.Command(name, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	var b strings.Builder
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		fmt.Println("  " + sc.Text())
		b.WriteString(sc.Text() + "\n")
	}
	if err := cmd.Wait(); err != nil {
		return b.String(), fmt.Errorf("%s: %w", name, err)
	}
	return b.String(), nil
}

// metric returns the values of a benchmark's metric (unit "ns/op", "steps/s"…)
// in go test output, for the benchmarks whose name matches name.
func metric(out, name, unit string) []float64 {
	var vs []float64
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !regexp.MustCompile(`^`+name+`(-\d+)?$`).MatchString(f[0]) {
			continue
		}
		for i := 2; i+1 < len(f); i += 2 {
			if f[i+1] == unit {
				if v, err := strconv.ParseFloat(f[i], 64); err == nil {
					vs = append(vs, v)
				}
			}
		}
	}
	return vs
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	return s[len(s)/2]
}

func stepVsNoop(t *table, count, n int) error {
	// One go test run for both, so that both see the same machine: on a
	// shared one only their ratio means something.
	out, err := goTest("./jobs/", "-run", "^$", "-bench", "^(BenchmarkStep|BenchmarkRiverNoop)$",
		"-benchtime", fmt.Sprintf("%dx", n), "-count", strconv.Itoa(count))
	if err != nil {
		return err
	}
	step, noop := median(metric(out, "BenchmarkStep", "ns/op")), median(metric(out, "BenchmarkRiverNoop", "ns/op"))
	start := median(metric(out, "BenchmarkStep", "start-ms/op"))
	if step == 0 || noop == 0 {
		return fmt.Errorf("no BenchmarkStep / BenchmarkRiverNoop figures in the output")
	}
	t.add("one agent step vs a bare River job (100 workers, medians of "+strconv.Itoa(count)+")",
		fmt.Sprintf("%.2f ms vs %.2f ms = **%.1fx** (serial run starts: %.2f ms of it)", step/1e6, noop/1e6, step/noop, start),
		"<= 3x")
	return nil
}

func throughput(t *table, n int) error {
	out, err := goTest("./jobs/", "-run", "^$", "-bench", "^BenchmarkThroughput$", "-benchtime", fmt.Sprintf("%dx", n))
	if err != nil {
		return err
	}
	for _, w := range []int{1, 10, 100} {
		s := median(metric(out, fmt.Sprintf("BenchmarkThroughput/step/workers=%d", w), "steps/s"))
		o := median(metric(out, fmt.Sprintf("BenchmarkThroughput/noop/workers=%d", w), "noop/s"))
		ratio := "-"
		if s > 0 {
			ratio = fmt.Sprintf("%.1fx", o/s)
		}
		t.add(fmt.Sprintf("throughput at saturation, %d workers: steps/s vs River no-op jobs/s", w),
			fmt.Sprintf("%.0f vs %.0f (noop/step %s)", s, o, ratio), "figure")
	}
	return nil
}

// inbox times GET /inbox/all, the whole request rendered by a real server,
// for a user with 100,000 threads.
func inbox(t *table, server string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	env, err := benchenv.Start(ctx, benchenv.Options{Server: server})
	if err != nil {
		return err
	}
	defer env.Stop()
	pool, err := db.Open(ctx, env.DBURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	user, err := db.EnsureLocalUser(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Println("seeding 100,000 threads…")
	// As db's BenchmarkQueues: bulk-load without the per-row count
	// trigger, then count once.
	_, err = pool.Exec(ctx, `ALTER TABLE threads DISABLE TRIGGER threads_count_insert_delete;
		INSERT INTO threads (user_id, title, status, unread, updated_at)
		SELECT `+strconv.FormatInt(user.ID, 10)+`, 'Thread ' || i,
		       CASE WHEN i % 100 = 0 THEN 'waiting' WHEN i % 37 = 0 THEN 'running' ELSE 'done' END,
		       i % 10 = 0, now() - make_interval(secs => i)
		FROM generate_series(1, 100000) AS i;
		ALTER TABLE threads ENABLE TRIGGER threads_count_insert_delete;
		DELETE FROM thread_counts;
		INSERT INTO thread_counts (user_id, all_count, unread_count, action_count)
		SELECT user_id, count(*), count(*) FILTER (WHERE unread AND NOT archived), count(*) FILTER (WHERE status = 'waiting')
		FROM threads WHERE parent_thread_id IS NULL GROUP BY user_id`)
	if err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE threads`); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	time.Sleep(2 * time.Second) // let the server's listener pass the seed's events
	res := map[string][]time.Duration{}
	paths := []string{"/inbox/all", "/inbox/unread", "/inbox/action"}
	for i := 0; i < 400; i++ {
		p := paths[i%len(paths)]
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+env.Addr+p, nil)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		t0 := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		d := time.Since(t0)
		if resp.StatusCode != http.StatusOK || n < 1000 {
			return fmt.Errorf("GET %s: %s, %d bytes", p, resp.Status, n)
		}
		if i >= 30 { // warm-up
			res[p] = append(res[p], d)
			res["all"] = append(res["all"], d)
		}
	}
	var parts []string
	for _, p := range paths {
		parts = append(parts, fmt.Sprintf("%s p50 %s p95 %s", strings.TrimPrefix(p, "/inbox/"), benchenv.Pct(res[p], 50), benchenv.Pct(res[p], 95)))
	}
	t.add("inbox page, 100,000 threads, whole HTTP request rendered (p95 of all)",
		fmt.Sprintf("**%s** (%s)", benchenv.Pct(res["all"], 95), strings.Join(parts, "; ")), "<= 5 ms")
	return nil
}

var (
	reMem   = regexp.MustCompile(`: ([\d.]+) KiB per stream`)
	reOne   = regexp.MustCompile(`event on a stream, .*: p50 (\S+), p99 (\S+), max`)
	reEvery = regexp.MustCompile(`event on every stream \(slowest stream per round\): p50 (\S+), p99 (\S+)`)
	reDown  = regexp.MustCompile(`shut down with \d+ open streams in (\S+)`)
)

func fanout(t *table, server string, n int) error {
	idle := "20s"
	if n <= 1000 {
		idle = "2s"
	}
	out, err := command("go", "run", "./cmd/sse-load", "-streams", strconv.Itoa(n), "-idle", idle, "-server", server)
	if err != nil {
		return err
	}
	find := func(re *regexp.Regexp) []string {
		m := re.FindStringSubmatch(out)
		if m == nil {
			return []string{"", "?", "?"}
		}
		return append(m, "", "")
	}
	label := fmt.Sprintf("%d streams", n)
	t.add("live, "+label+": server memory per idle stream", find(reMem)[1]+" KiB", "<= 20 KiB")
	every := find(reEvery)
	t.add("live, "+label+": committed step -> event on every stream, p50 / p99", every[1]+" / **"+every[2]+"**", "p99 <= 100 ms (10,000)")
	one := find(reOne)
	t.add("live, "+label+": committed step -> event on one stream, p50 / p99", one[1]+" / "+one[2], "p99 <= 60 ms (10,000)")
	t.add("live, "+label+": shutdown with every stream open", find(reDown)[1], "figure")
	return nil
}

var reSat = regexp.MustCompile(`(?m)^(\S+): no start refused up to (\d+)/s`)

func startLoad(t *table, server, rates string) error {
	out, err := command("go", "run", "./cmd/start-load", "-rates", rates, "-duration", "5s", "-server", server)
	if err != nil {
		return err
	}
	ms := reSat.FindAllStringSubmatch(out, -1)
	if len(ms) == 0 {
		t.add("run starts (start-load): highest rate with nothing refused", "every rate tried saw refusals (see output)", "figure")
		return nil
	}
	for _, m := range ms {
		t.add("run starts (start-load, "+m[1]+"): highest rate with nothing refused", m[2]+"/s (of "+rates+")", "figure")
	}
	return nil
}
