package pglocal

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// clusterUser is the account the cluster's programs run as.
type clusterUser struct {
	uid, gid int
	name     string
	// cred is set only when we are root and must switch to this account:
	// initdb and postgres refuse to run as root.
	cred *syscall.Credential
}

// postgresUser is the system account used when running as root. Every
// PostgreSQL package creates it.
const postgresUser = "postgres"

// lookupClusterUser decides who runs the cluster: ourselves, or the postgres
// system user when we are root.
func lookupClusterUser() (clusterUser, error) {
	if os.Geteuid() != 0 {
		return clusterUser{uid: os.Geteuid(), gid: os.Getegid()}, nil
	}
	u, err := user.Lookup(postgresUser)
	if err != nil {
		return clusterUser{}, fmt.Errorf("pglocal: PostgreSQL refuses to run as root and there is no %q system user to run it as (%v): "+
			"run as an ordinary user, or set DATABASE_URL to use an existing server", postgresUser, err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return clusterUser{}, fmt.Errorf("pglocal: user %q: %w", postgresUser, err)
	}
	return clusterUser{
		uid:  uid,
		gid:  gid,
		name: u.Username,
		// Groups left empty: the child drops root's supplementary groups.
		cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)},
	}, nil
}

// CheckReachable reports whether the user uid (primary group gid) can
// traverse every ancestor directory of dir, which the postgres user must do
// to reach a cluster that root created for it. It is meant for root; for
// anyone else Start does not need it. Ancestors that do not exist yet are not
// checked (they will be created 0755); symlinks are resolved first. The error
// names the directory in the way and says what to do, for example when the
// data root is under /root, which is mode 0700. CheckReachable never changes
// permissions: loosening a home directory is the user's decision, not ours.
func CheckReachable(dir string, uid, gid int) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("pglocal: %w", err)
	}
	// Resolve the deepest existing ancestor: permissions along the real path
	// are what count, not along a symlink's name.
	existing := filepath.Dir(abs)
	for {
		if _, err := os.Stat(existing); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("pglocal: checking %s: %w", dir, err)
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			break
		}
		existing = parent
	}
	real, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return fmt.Errorf("pglocal: checking %s: %w", dir, err)
	}

	groups := supplementaryGroups(uid, gid)
	for _, anc := range ancestorsAndSelf(real) {
		st, err := os.Stat(anc)
		if err != nil {
			return fmt.Errorf("pglocal: checking %s: %w", dir, err)
		}
		if !canSearch(st, uid, groups) {
			return fmt.Errorf("pglocal: the %s user cannot reach %s because %s is mode %04o; "+
				"set PIZZA_DATA_ROOT to a directory it can reach such as /var/lib/pizza-bot, or set DATABASE_URL",
				userName(uid), dir, anc, st.Mode().Perm())
		}
	}
	return nil
}

// ancestorsAndSelf returns "/", "/a", "/a/b" for "/a/b".
func ancestorsAndSelf(p string) []string {
	out := []string{"/"}
	cur := "/"
	for _, part := range strings.Split(strings.Trim(p, "/"), "/") {
		if part == "" {
			continue
		}
		cur = filepath.Join(cur, part)
		out = append(out, cur)
	}
	return out
}

// canSearch applies the classic Unix rule: the owner bits alone decide for
// the owner, the group bits alone for a group member, otherwise the other
// bits. ACLs are not considered.
func canSearch(st fs.FileInfo, uid int, groups map[int]bool) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	perm := st.Mode().Perm()
	switch {
	case uid == 0:
		return true
	case int(sys.Uid) == uid:
		return perm&0o100 != 0
	case groups[int(sys.Gid)]:
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

func supplementaryGroups(uid, gid int) map[int]bool {
	groups := map[int]bool{gid: true}
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		return groups
	}
	ids, err := u.GroupIds()
	if err != nil {
		return groups
	}
	for _, id := range ids {
		if n, err := strconv.Atoi(id); err == nil {
			groups[n] = true
		}
	}
	return groups
}

func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return "uid " + strconv.Itoa(uid)
}

// prepareDataDir creates the cluster directory (and its parents) and gives
// it to the cluster user with mode 0700, which postgres insists on.
func prepareDataDir(dir string, cu clusterUser) error {
	root := cu.cred != nil
	if root {
		// Before creating anything: do not litter an unreachable tree.
		if err := CheckReachable(dir, cu.uid, cu.gid); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("pglocal: creating %s: %w", filepath.Dir(dir), err)
	}
	if root {
		// Parents we just created may be 0700 under a strict umask.
		if err := CheckReachable(dir, cu.uid, cu.gid); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("pglocal: creating %s: %w", dir, err)
	}
	if root && !fileExists(filepath.Join(dir, "PG_VERSION")) {
		// A new cluster: hand the whole directory over. An existing cluster
		// is never chowned; if it belongs to someone else, that is reported
		// below rather than silently taken over.
		if err := chownTree(dir, cu.uid, cu.gid); err != nil {
			return fmt.Errorf("pglocal: giving %s to the %s user: %w", dir, cu.name, err)
		}
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("pglocal: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("pglocal: %s is not a directory", dir)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != cu.uid {
		return fmt.Errorf("pglocal: the cluster directory %s belongs to %s but the cluster runs as %s; "+
			"use another directory or fix its owner", dir, userName(int(sys.Uid)), userName(cu.uid))
	}
	if st.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("pglocal: %w", err)
		}
	}
	return nil
}

// prepareSocketDir makes the fallback socket directory (see the package
// documentation), private to the cluster user. Because it sits in the
// world-writable /tmp, an existing entry is trusted only if it is a real
// directory already owned by that user.
func prepareSocketDir(sockDir, dataDir string, cu clusterUser) error {
	if sockDir == dataDir {
		return nil
	}
	if err := os.Mkdir(sockDir, 0o700); err == nil {
		if cu.cred != nil {
			if err := os.Chown(sockDir, cu.uid, cu.gid); err != nil {
				return fmt.Errorf("pglocal: %w", err)
			}
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("pglocal: creating socket directory: %w", err)
	}
	st, err := os.Lstat(sockDir)
	if err != nil {
		return fmt.Errorf("pglocal: %w", err)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !st.IsDir() || !ok || int(sys.Uid) != cu.uid {
		return fmt.Errorf("pglocal: socket directory %s exists but is not a directory owned by %s; remove it", sockDir, userName(cu.uid))
	}
	if st.Mode().Perm() != 0o700 {
		if err := os.Chmod(sockDir, 0o700); err != nil {
			return fmt.Errorf("pglocal: %w", err)
		}
	}
	return nil
}

func chownTree(dir string, uid, gid int) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
