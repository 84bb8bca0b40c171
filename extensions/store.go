package extensions

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"pizzabot/db"
)

// The extension store's local side. Custom skills and uploaded plugins are
// kept in PostgreSQL (db/extstore.go); a replica materializes each version
// it uses into its cache (<PIZZA_DATA_ROOT>/cache by default), a folder
// named after the version's hash, written whole under a temporary name and
// renamed into place. A folder there is never changed: a version is
// content, so replicas sharing a cache write identical folders and a run
// holding one version's folder is never surprised. A folder is deleted only
// once no one needs its version (pruneCache). The cache is disposable:
// deleting it costs a re-read from the database.

// packFolder reads the regular files under dir into a folder of the store:
// the list of files with their hashes, the contents by hash, and the
// version, a hash of kind, name and the list.
func packFolder(kind, name, dir string) (db.StoredFolder, map[string][]byte, error) {
	f := db.StoredFolder{Name: name}
	data := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil // directories; extraction refuses links and devices
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		h := hex.EncodeToString(sum[:])
		data[h] = b
		f.Files = append(f.Files, db.StoredFile{Path: filepath.ToSlash(rel), Hash: h, Size: int64(len(b)), Exec: info.Mode()&0o111 != 0})
		return nil
	})
	if err != nil {
		return f, nil, fmt.Errorf("read %s %s: %w", kind, name, err)
	}
	f.Version = folderVersion(kind, f)
	return f, data, nil
}

// folderVersion is the hash of a folder's name and file list.
func folderVersion(kind string, f db.StoredFolder) string {
	files := slices.Clone(f.Files)
	slices.SortFunc(files, func(a, b db.StoredFile) int { return strings.Compare(a.Path, b.Path) })
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\n", kind, f.Name)
	for _, file := range files {
		fmt.Fprintf(h, "%s\x00%s\x00%t\n", file.Path, file.Hash, file.Exec)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// materialize returns the folder of f in cacheDir/kind/<version>/<name>,
// writing it from the database first when this replica has not yet.
func materialize(ctx context.Context, q db.Querier, cacheDir, kind string, f db.StoredFolder) (string, error) {
	if strings.ContainsAny(f.Version, `/\.`) || f.Version == "" {
		return "", fmt.Errorf("%s %s: malformed version %q", kind, f.Name, f.Version)
	}
	final := filepath.Join(cacheDir, kind, f.Version)
	dir := filepath.Join(final, f.Name)
	if info, err := os.Stat(dir); err == nil && info.IsDir() {
		return dir, nil
	}
	hashes := make([]string, 0, len(f.Files))
	for _, file := range f.Files {
		hashes = append(hashes, file.Hash)
	}
	contents, err := db.GetFiles(ctx, q, hashes)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", kind, f.Name, err)
	}
	if err := os.MkdirAll(filepath.Join(cacheDir, kind), 0o755); err != nil {
		return "", fmt.Errorf("extension cache: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Join(cacheDir, kind), ".tmp-")
	if err != nil {
		return "", fmt.Errorf("extension cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	for _, file := range f.Files {
		rel := path.Clean(file.Path)
		if !fs.ValidPath(rel) || rel == "." {
			return "", fmt.Errorf("%s %s: malformed path %q", kind, f.Name, file.Path)
		}
		p := filepath.Join(tmp, f.Name, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", fmt.Errorf("extension cache: %w", err)
		}
		mode := os.FileMode(0o644)
		if file.Exec {
			mode = 0o755
		}
		if err := os.WriteFile(p, contents[file.Hash], mode); err != nil {
			return "", fmt.Errorf("extension cache: %w", err)
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		// Another process of a shared cache got there first: its folder
		// has the same content.
		if info, serr := os.Stat(dir); serr == nil && info.IsDir() {
			return dir, nil
		}
		return "", fmt.Errorf("extension cache: %w", err)
	}
	return dir, nil
}

// listen reloads the extensions whenever ExtensionsChannel is notified, and
// after each (re)connection, since notifications sent while the connection
// was down are lost. It holds one connection of its own, outside the pool.
func (x *Extensions) listen(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for {
		err := x.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		x.logger().Warn("extensions: listener lost its connection, reconnecting", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff + rand.N(backoff)):
		}
		backoff = min(2*backoff, 10*time.Second)
		if err == nil {
			backoff = 100 * time.Millisecond
		}
	}
}

func (x *Extensions) listenOnce(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, x.Pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+db.ExtensionsChannel); err != nil {
		return err
	}
	// What changed while no one listened.
	if err := x.Reload(ctx); err != nil {
		return err
	}
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		// A burst (an install touches several tables) is one reload.
		for {
			wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			_, err := conn.WaitForNotification(wctx)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if !errors.Is(err, context.DeadlineExceeded) && wctx.Err() == nil {
					return err
				}
				break
			}
		}
		if err := x.Reload(ctx); err != nil {
			x.logger().Warn("extensions: reload after a change", "err", err)
		}
	}
}

// pruneCache deletes the cache folders of the versions no one needs any
// more (db.NeededVersions: neither current nor pinned by a thread running,
// waiting or ended less than db.PinRetention ago), and forgets the skills
// loaded from them; the hourly prune deletes the same versions from the
// database. Folders being written (".tmp-", ".upload-") are left alone.
func (x *Extensions) pruneCache(ctx context.Context) error {
	skills, plugins, err := db.NeededVersions(ctx, x.Pool, db.PinRetention)
	if err != nil {
		return err
	}
	needed := map[string]map[string]bool{"skills": skills, "plugins": plugins}
	removed := 0
	for kind, keep := range needed {
		entries, err := os.ReadDir(filepath.Join(x.cacheDir(), kind))
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				x.logger().Warn("extensions: read the cache", "err", err)
			}
			continue
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") || keep[e.Name()] {
				continue
			}
			if err := os.RemoveAll(filepath.Join(x.cacheDir(), kind, e.Name())); err != nil {
				x.logger().Warn("extensions: prune the cache", "err", err)
				continue
			}
			removed++
		}
	}
	x.mu.Lock()
	for k := range x.versions {
		if !needed[k.kind][k.version] {
			delete(x.versions, k)
		}
	}
	x.mu.Unlock()
	if removed > 0 {
		x.logger().Info("extensions: pruned cached versions", "folders", removed)
	}
	return nil
}
