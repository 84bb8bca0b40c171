package db_test

import (
	"bytes"
	"errors"
	"testing"

	"pizzabot/db"
)

func TestSecretBox(t *testing.T) {
	t.Parallel()
	key := bytes.Repeat([]byte{7}, db.SecretKeySize)
	box, err := db.NewSecretBox(key)
	if err != nil {
		t.Fatal(err)
	}
	const secret = "sk-live-0123456789"
	a, err := box.Seal([]byte(secret), "p:openai")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := box.Seal([]byte(secret), "p:openai")
	if bytes.Contains(a, []byte(secret)) || bytes.Equal(a, b) {
		t.Error("sealed values hold the secret, or repeat (no fresh nonce)")
	}
	if got, err := box.Open(a, "p:openai"); err != nil || string(got) != secret {
		t.Errorf("open = %q, %v", got, err)
	}
	other, _ := db.NewSecretBox(bytes.Repeat([]byte{8}, db.SecretKeySize))
	tampered := append([]byte(nil), a...)
	tampered[len(tampered)-1] ^= 1
	for name, open := range map[string]func() ([]byte, error){
		"another purpose": func() ([]byte, error) { return box.Open(a, "p:anthropic") },
		"another key":     func() ([]byte, error) { return other.Open(a, "p:openai") },
		"altered":         func() ([]byte, error) { return box.Open(tampered, "p:openai") },
		"truncated":       func() ([]byte, error) { return box.Open(a[:5], "p:openai") },
	} {
		if _, err := open(); !errors.Is(err, db.ErrSecretUnreadable) {
			t.Errorf("%s: err = %v, want ErrSecretUnreadable", name, err)
		}
	}
	if _, err := db.NewSecretBox(key[:16]); err == nil {
		t.Error("a 16-byte key was accepted for AES-256")
	}
}
