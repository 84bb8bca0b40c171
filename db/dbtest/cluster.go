package dbtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"pizzabot/db/pglocal"
)

var (
	clusterMu sync.Mutex
	cluster   *pglocal.Server
)

// startCluster joins (or starts) the private cluster shared by this run's
// test processes. It lives under the temp dir, which every user can reach.
func startCluster() (string, error) {
	base := filepath.Join(os.TempDir(), fmt.Sprintf("pizzabot-test-%d", os.Getuid()))
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", err
	}
	// The cluster runs as an unprivileged user when we are root: it must
	// traverse this directory.
	if err := os.Chmod(base, 0o755); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := pglocal.Start(ctx, pglocal.Options{
		Dir:    filepath.Join(base, "postgres"),
		Shared: true,
		// Durability is worthless for throwaway test databases.
		Settings: map[string]string{
			"fsync":              "off",
			"synchronous_commit": "off",
			"full_page_writes":   "off",
			"max_connections":    "400",
		},
	})
	if err != nil {
		return "", fmt.Errorf("start private test cluster (or set TEST_DATABASE_URL): %w", err)
	}
	clusterMu.Lock()
	cluster = srv
	clusterMu.Unlock()
	return srv.URL("postgres"), nil
}

// releaseCluster leaves the shared cluster; the last process stops it.
func releaseCluster() {
	clusterMu.Lock()
	defer clusterMu.Unlock()
	if cluster == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cluster.Stop(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "dbtest: stop private cluster: %v\n", err)
	}
	cluster = nil
}
