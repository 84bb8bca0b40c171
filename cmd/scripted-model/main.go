// Command scripted-model runs a scripted OpenAI-compatible model server, to
// try Pizza Bot without a model provider:
//
//	scripted-model -addr 127.0.0.1:9090 -script script.json
//	PIZZA_MODEL=compatible:scripted COMPATIBLE_BASE_URL=http://127.0.0.1:9090/v1 pizza-bot
//
// Without -script it echoes the last user message. The script format is
// documented in package pizzabot/agent/scriptmodel (LoadScript).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"pizzabot/agent/scriptmodel"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "scripted-model:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", "127.0.0.1:9090", "address to listen on")
	scriptPath := flag.String("script", "", "JSON script file (default: echo the last user message)")
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))

	var script scriptmodel.Script
	if *scriptPath != "" {
		f, err := os.Open(*scriptPath)
		if err != nil {
			return err
		}
		script, err = scriptmodel.LoadScript(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", *scriptPath, err)
		}
	}
	s := scriptmodel.New(script)

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           logRequests(logger, s.Handler()),
		ReadHeaderTimeout: 10 * time.Second,
	}
	mode := "echo"
	if *scriptPath != "" {
		mode = *scriptPath
	}
	logger.Info("scripted model listening", "addr", ln.Addr().String(), "script", mode,
		"base_url", "http://"+ln.Addr().String()+"/v1")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// statusRecorder remembers the status written, and still flushes streams.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func logRequests(logger *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		defer func() {
			logger.Info("request", "method", r.Method, "path", r.URL.Path, "status", rec.status, "duration", time.Since(start))
		}()
		next.ServeHTTP(rec, r)
	})
}
