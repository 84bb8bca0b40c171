// Package static holds the browser's assets: the stylesheet, the small
// script that adds keyboard shortcuts, the icon and the vendored htmx. They
// are embedded in the binary and served under a path that carries a hash of
// their content, so browsers may cache them for a year and still see a new
// version the moment it ships.
package static

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"path"
)

//go:embed app.css app.js favicon.svg vendor push.js sw.js offline.js icons
var files embed.FS

// hashes maps each file's path to the first hex digits of its SHA-256.
var hashes = hashFiles()

// FS returns the embedded files, by path relative to this folder
// ("app.css", "vendor/htmx-2.0.11.min.js").
func FS() fs.FS { return files }

// Hash returns the content hash of the named file, and false when no such
// file is embedded.
func Hash(name string) (string, bool) {
	h, ok := hashes[name]
	return h, ok
}

// URL returns the cache-busting URL path of the named file, e.g.
// "/static/3f9a0c21d4e5/app.css". An unknown name gives a path that answers
// 404, so a typo shows up as a broken asset rather than a crash.
func URL(name string) string {
	h, ok := hashes[name]
	if !ok {
		h = "missing"
	}
	return path.Join("/static", h, name)
}

func hashFiles() map[string]string {
	m := make(map[string]string)
	err := fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(files, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		m[p] = hex.EncodeToString(sum[:6])
		return nil
	})
	if err != nil {
		// The files are compiled in: failing to read them is a build defect.
		panic("static: " + err.Error())
	}
	return m
}
