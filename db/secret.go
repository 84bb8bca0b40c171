package db

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
)

// SecretBox seals secrets stored in the database (model provider keys) with
// AES-256-GCM under a key that lives only in the environment
// (PIZZA_SECRET_KEY), so a dump or backup of the database holds no usable
// secret.
type SecretBox struct {
	aead cipher.AEAD
}

// SecretKeySize is the length of a SecretBox key: AES-256.
const SecretKeySize = 32

// ErrSecretUnreadable is returned when a sealed secret cannot be opened: it
// was sealed under another key, for another purpose, or was altered.
var ErrSecretUnreadable = errors.New("the stored secret cannot be decrypted with PIZZA_SECRET_KEY (was the key changed?)")

// NewSecretBox returns a box sealing with key, which must be 32 bytes.
func NewSecretBox(key []byte) (*SecretBox, error) {
	if len(key) != SecretKeySize {
		return nil, fmt.Errorf("secret key is %d bytes, want %d", len(key), SecretKeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &SecretBox{aead: aead}, nil
}

// Seal encrypts plaintext with a fresh random nonce. purpose is
// authenticated but not stored (e.g. "model_providers:openai"): a sealed
// value copied to another row does not open there.
func (b *SecretBox) Seal(plaintext []byte, purpose string) ([]byte, error) {
	nonce := make([]byte, b.aead.NonceSize(), b.aead.NonceSize()+len(plaintext)+b.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	return b.aead.Seal(nonce, nonce, plaintext, []byte(purpose)), nil
}

// Open decrypts what Seal returned for the same purpose.
func (b *SecretBox) Open(sealed []byte, purpose string) ([]byte, error) {
	n := b.aead.NonceSize()
	if len(sealed) < n+b.aead.Overhead() {
		return nil, ErrSecretUnreadable
	}
	out, err := b.aead.Open(nil, sealed[:n], sealed[n:], []byte(purpose))
	if err != nil {
		return nil, ErrSecretUnreadable
	}
	return out, nil
}
