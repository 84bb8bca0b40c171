package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// Without PIZZA_SECRET_KEY the connections' key is made once in the data
// root, mode 0600, and read back on the next start; with it, it is used.
func TestConnectionsKeyFile(t *testing.T) {
	root := t.TempDir()
	k1, err := connectionsKey(config{DataRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(root, connectionsKeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v", err, fi.Mode())
	}
	k2, err := connectionsKey(config{DataRoot: root})
	if err != nil || !bytes.Equal(k1, k2) || len(k1) != 32 {
		t.Fatalf("second start: %v, same key %v", err, bytes.Equal(k1, k2))
	}
	env := bytes.Repeat([]byte{7}, 32)
	if k, _ := connectionsKey(config{DataRoot: root, SecretKey: env}); !bytes.Equal(k, env) {
		t.Fatal("PIZZA_SECRET_KEY is not used")
	}
	if err := os.WriteFile(filepath.Join(root, connectionsKeyFile), []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := connectionsKey(config{DataRoot: root}); err == nil {
		t.Fatal("a damaged key file was accepted")
	}
}
