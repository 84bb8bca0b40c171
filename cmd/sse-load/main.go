// Command sse-load measures the live inbox under load: it starts a private
// PostgreSQL and a real pizza-bot server process, opens many idle event
// streams (GET /events) as the server's local user, and reports
//
//   - the server's memory per open stream (growth of its resident set);
//   - the delay from a committed step (a transaction like the one a step
//     commits: the assistant's message and the run's end) to the event read
//     on every stream, p50/p99 over all streams and rounds, and the p50/p99
//     of the slowest stream of each round;
//   - how long the server takes to shut down with every stream open.
//
// With -profile DIR it also serves the server's profiles on loopback
// (PIZZA_PPROF_ADDR) and saves to DIR: heap and goroutine profiles before
// the streams open and after they idled (heap-base, heap-idle, goroutine-idle,
// with the runtime's memory statistics in the .txt files), a CPU profile of
// the server during the rounds (cpu-rounds.pb.gz, -cpu-seconds long), and
// prints the CPU the server, this tool and the whole machine used during the
// rounds.
//
// Run it from the repository: go run ./cmd/sse-load -streams 10000
// Everything runs on this machine, on loopback, and stops by itself.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/cmd/internal/benchenv"
	"pizzabot/db"
)

func main() {
	var (
		streams = flag.Int("streams", 10000, "event streams to open")
		rounds  = flag.Int("rounds", 20, "committed steps to time")
		idle    = flag.Duration("idle", 20*time.Second, "how long the streams stay idle before the rounds (heartbeats every 15s)")
		dialers = flag.Int("dialers", 200, "streams opened at once")
		server  = flag.String("server", "", "pizza-bot binary (default: go build it)")
		keep    = flag.Bool("keep", false, "keep the temporary directory")
	)
	flag.StringVar(&profileDir, "profile", "", "save the server's heap, goroutine and CPU profiles to this directory")
	flag.DurationVar(&cpuSeconds, "cpu-seconds", 15*time.Second, "with -profile: length of the CPU profile taken from the first round")
	flag.Parse()
	if err := run(*streams, *rounds, *idle, *dialers, *server, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "sse-load:", err)
		os.Exit(1)
	}
}

var (
	profileDir string
	cpuSeconds time.Duration
)

func run(streams, rounds int, idle time.Duration, dialers int, server string, keep bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if err := benchenv.RaiseFileLimit(streams + 1000); err != nil {
		return err
	}
	var opts = benchenv.Options{Server: server, Keep: keep}
	var pprofAddr string
	var err error
	if profileDir != "" {
		if err := os.MkdirAll(profileDir, 0o755); err != nil {
			return err
		}
		if pprofAddr, err = benchenv.FreeAddr(); err != nil {
			return err
		}
		opts.Env = append(opts.Env, "PIZZA_PPROF_ADDR="+pprofAddr)
	}
	env, err := benchenv.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer env.Stop()
	addr, dbURL := env.Addr, env.DBURL
	srv := env.Proc

	pool, err := db.Open(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	user, err := db.EnsureLocalUser(ctx, pool)
	if err != nil {
		return err
	}
	// The threads the rounds finish, running as a step leaves them.
	threads := make([]int64, rounds)
	for i := range threads {
		t, err := db.CreateThread(ctx, pool, db.NewThread{UserID: user.ID, Title: fmt.Sprintf("Round %d", i+1)})
		if err != nil {
			return err
		}
		threads[i] = t.ID
	}
	time.Sleep(time.Second) // let the server's listener pass those events

	base, err := benchenv.RSS(srv.Pid)
	if err != nil {
		return err
	}
	h, err := db.EventHorizon(ctx, pool)
	if err != nil {
		return err
	}
	if err := saveProfiles(pprofAddr, "base", "heap"); err != nil {
		return err
	}
	path := "/events?" + url.Values{"since": {h.String()}, "list": {"/inbox/all"}}.Encode()
	fmt.Printf("opening %d streams…\n", streams)
	start := time.Now()
	conns, err := openStreams(ctx, addr, path, streams, dialers)
	if err != nil {
		return err
	}
	opened := time.Since(start)
	time.Sleep(2 * time.Second)
	after, err := benchenv.RSS(srv.Pid)
	if err != nil {
		return err
	}
	fmt.Printf("opened %d streams in %s; server RSS %.1f MiB -> %.1f MiB: %.1f KiB per stream\n",
		len(conns), opened.Round(time.Millisecond), mib(base), mib(after), float64(after-base)/1024/float64(len(conns)))

	fmt.Printf("idle for %s…\n", idle)
	time.Sleep(idle)
	if n := alive(conns); n != len(conns) {
		return fmt.Errorf("%d of %d streams ended while idle", len(conns)-n, len(conns))
	}
	idleRSS, _ := benchenv.RSS(srv.Pid)
	fmt.Printf("all %d streams alive after %s idle; server RSS %.1f MiB\n", len(conns), idle, mib(idleRSS))
	if err := saveProfiles(pprofAddr, "idle", "heap", "goroutine"); err != nil {
		return err
	}
	if rss, err := benchenv.RSS(srv.Pid); err == nil && profileDir != "" {
		fmt.Printf("server RSS after the heap profile's GC: %.1f MiB (%.1f KiB per stream over the base)\n",
			mib(rss), float64(rss-base)/1024/float64(len(conns)))
	}
	var cpuDone chan error
	if profileDir != "" {
		cpuDone = make(chan error, 1)
		go func() {
			cpuDone <- fetchTo(pprofAddr, fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(cpuSeconds.Seconds())), "cpu-rounds.pb.gz")
		}()
		time.Sleep(100 * time.Millisecond) // let the profile start
	}
	cpu0 := sampleCPU(srv.Pid)

	var all, slowest []time.Duration
	for r := 0; r < rounds; r++ {
		t0, err := commitStep(ctx, pool, threads[r])
		if err != nil {
			return err
		}
		deadline := time.Now().Add(60 * time.Second)
		for !allGot(conns, r+1) {
			if time.Now().After(deadline) {
				return fmt.Errorf("round %d: %d of %d streams got the event within 60s", r+1, countGot(conns, r+1), len(conns))
			}
			time.Sleep(2 * time.Millisecond)
		}
		var worst time.Duration
		for _, c := range conns {
			d := time.Duration(c.at(r) - t0.UnixNano())
			all = append(all, d)
			worst = max(worst, d)
		}
		slowest = append(slowest, worst)
		time.Sleep(300 * time.Millisecond)
	}
	if profileDir != "" {
		cpu1 := sampleCPU(srv.Pid)
		wall := cpu1.at.Sub(cpu0.at).Seconds()
		fmt.Printf("CPU during the rounds (%.1f s): server %.2f cores, sse-load %.2f cores, whole machine %.2f of %d cores busy; load average %s\n",
			wall, (cpu1.server-cpu0.server)/wall, (cpu1.self-cpu0.self)/wall, (cpu1.machine-cpu0.machine)/wall, runtime.NumCPU(), loadavg())
		if err := <-cpuDone; err != nil {
			return err
		}
		fmt.Printf("profiles saved in %s\n", profileDir)
	}
	fmt.Printf("committed step -> event on a stream, %d streams x %d rounds: p50 %s, p99 %s, max %s\n",
		len(conns), rounds, benchenv.Pct(all, 50), benchenv.Pct(all, 99), benchenv.Pct(all, 100))
	fmt.Printf("committed step -> event on every stream (slowest stream per round): p50 %s, p99 %s\n",
		benchenv.Pct(slowest, 50), benchenv.Pct(slowest, 99))

	took, err := env.Shutdown(60 * time.Second)
	if err != nil {
		return err
	}
	fmt.Printf("server shut down with %d open streams in %s\n", len(conns), took.Round(time.Millisecond))
	for _, c := range conns {
		c.conn.Close()
	}
	return nil
}

// stream is one open event stream: it records when each "update" message
// (one per committed change to the listing) arrived.
type stream struct {
	conn  net.Conn
	got   atomic.Int64
	ended atomic.Bool
	mu    sync.Mutex
	times []int64
}

func (s *stream) at(i int) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.times[i]
}

func (s *stream) read(r *bufio.Reader) {
	defer s.ended.Store(true)
	event := ""
	for {
		line, err := r.ReadSlice('\n')
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
		switch {
		case len(line) == 1: // the blank line ending a message
			if event == "update" {
				s.mu.Lock()
				s.times = append(s.times, time.Now().UnixNano())
				s.mu.Unlock()
				s.got.Add(1)
			}
			event = ""
		case strings.HasPrefix(string(line), "event: "):
			event = strings.TrimSpace(string(line[len("event: "):]))
		}
	}
}

func openStreams(ctx context.Context, addr, path string, n, parallel int) ([]*stream, error) {
	conns := make([]*stream, n)
	sem := make(chan struct{}, parallel)
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			s, err := openStream(ctx, addr, path)
			if err != nil {
				select {
				case errc <- err:
				default:
				}
				return
			}
			conns[i] = s
		}(i)
		select {
		case err := <-errc:
			wg.Wait()
			return nil, err
		default:
		}
	}
	wg.Wait()
	select {
	case err := <-errc:
		return nil, err
	default:
	}
	return conns, nil
}

func openStream(ctx context.Context, addr, path string) (*stream, error) {
	d := net.Dialer{Timeout: 30 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\nSec-Fetch-Site: same-origin\r\n\r\n", path, addr)
	r := bufio.NewReaderSize(conn, 2048)
	status, err := r.ReadString('\n')
	if err != nil {
		conn.Close()
		return nil, err
	}
	if !strings.Contains(status, " 200 ") {
		conn.Close()
		return nil, fmt.Errorf("GET %s: %s", path, strings.TrimSpace(status))
	}
	for { // the headers
		line, err := r.ReadString('\n')
		if err != nil {
			conn.Close()
			return nil, err
		}
		if line == "\r\n" {
			break
		}
	}
	s := &stream{conn: conn}
	go s.read(r)
	return s, nil
}

func allGot(conns []*stream, n int) bool { return countGot(conns, n) == len(conns) }

func countGot(conns []*stream, n int) int {
	k := 0
	for _, c := range conns {
		if c.got.Load() >= int64(n) {
			k++
		}
	}
	return k
}

func alive(conns []*stream) int {
	k := 0
	for _, c := range conns {
		if !c.ended.Load() {
			k++
		}
	}
	return k
}

// commitStep commits what a model step that ends its run commits, and
// returns when COMMIT returned.
func commitStep(ctx context.Context, pool *pgxpool.Pool, threadID int64) (time.Time, error) {
	err := db.InTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := db.AddMessage(ctx, tx, db.Message{ThreadID: threadID, Role: db.RoleAssistant, Content: "Done: the answer."}); err != nil {
			return err
		}
		_, err := db.EndRun(ctx, tx, threadID, db.StatusDone, "")
		return err
	})
	return time.Now(), err
}

// saveProfiles saves the server's named profiles to profileDir as
// <name>-<tag>.pb.gz, and each in its text form (<name>-<tag>.txt: the
// heap's ends with the runtime's MemStats). The heap profile is taken after
// a GC (gc=1), so it shows what is live.
func saveProfiles(addr, tag string, names ...string) error {
	if profileDir == "" {
		return nil
	}
	for _, name := range names {
		q := ""
		if name == "heap" {
			q = "gc=1&"
		}
		if err := fetchTo(addr, "/debug/pprof/"+name+"?"+q, name+"-"+tag+".pb.gz"); err != nil {
			return err
		}
		if err := fetchTo(addr, "/debug/pprof/"+name+"?"+q+"debug=1", name+"-"+tag+".txt"); err != nil {
			return err
		}
	}
	return nil
}

func fetchTo(addr, path, file string) error {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	f, err := os.Create(filepath.Join(profileDir, file))
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// cpuSample is CPU seconds used so far by the server, this process and
// the whole machine (all cores, busy time).
type cpuSample struct {
	at                    time.Time
	server, self, machine float64
}

func sampleCPU(pid int) cpuSample {
	s := cpuSample{at: time.Now()}
	const hz = 100 // USER_HZ
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// Fields after the command's closing parenthesis: utime and stime
		// are the 12th and 13th.
		if i := strings.LastIndexByte(string(b), ')'); i > 0 {
			f := strings.Fields(string(b)[i+1:])
			if len(f) > 12 {
				u, _ := strconv.ParseFloat(f[11], 64)
				st, _ := strconv.ParseFloat(f[12], 64)
				s.server = (u + st) / hz
			}
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		for i := 1; i < len(f); i++ {
			if i == 4 || i == 5 || i >= 9 { // idle, iowait; guest time is in user already
				continue
			}
			v, _ := strconv.ParseFloat(f[i], 64)
			s.machine += v / hz
		}
	}
	return s
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
