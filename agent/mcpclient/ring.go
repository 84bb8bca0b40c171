package mcpclient

import (
	"strings"
	"sync"
	"unicode/utf8"
)

// Ring keeps the last bytes written to it: a stdio server's standard error,
// for the settings page, across its restarts. Writes never block or fail, so
// a chatty server can never stall on its stderr pipe.
type Ring struct {
	mu   sync.Mutex
	buf  []byte
	size int
	cut  bool
}

// NewRing returns a Ring that keeps the last size bytes.
func NewRing(size int) *Ring { return &Ring{size: size} }

// Write appends p, dropping the oldest bytes beyond the ring's size.
func (r *Ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(p)
	if len(p) >= r.size {
		p = p[len(p)-r.size:]
		r.buf = r.buf[:0]
		r.cut = true
	}
	if over := len(r.buf) + len(p) - r.size; over > 0 {
		r.buf = append(r.buf[:0], r.buf[over:]...)
		r.cut = true
	}
	r.buf = append(r.buf, p...)
	return n, nil
}

// Note writes a line of our own (a restart, an exit) between the server's.
func (r *Ring) Note(line string) {
	r.mu.Lock()
	needNL := len(r.buf) > 0 && r.buf[len(r.buf)-1] != '\n'
	r.mu.Unlock()
	if needNL {
		line = "\n" + line
	}
	_, _ = r.Write([]byte(line + "\n"))
}

// String returns what the ring holds, starting at a line boundary when older
// output was dropped, as valid UTF-8.
func (r *Ring) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := string(r.buf)
	if r.cut {
		if i := strings.IndexByte(s, '\n'); i >= 0 && i < len(s)-1 {
			s = s[i+1:]
		}
		s = "…\n" + s
	}
	return strings.ToValidUTF8(s, string(utf8.RuneError))
}
