package push_test

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"pizzabot/db"
	"pizzabot/db/dbtest"
	"pizzabot/netguard"
	"pizzabot/notify"
	"pizzabot/push"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

var b64 = base64.RawURLEncoding

// decrypt is a browser's side of RFC 8291 (aes128gcm, RFC 8188 with one
// record): the double reads what the server sent with the subscription's
// private key and auth secret.
func decrypt(body []byte, uaPrivate *ecdh.PrivateKey, auth []byte) ([]byte, error) {
	if len(body) < 21 {
		return nil, errors.New("body shorter than the aes128gcm header")
	}
	salt := body[:16]
	rs := binary.BigEndian.Uint32(body[16:20])
	idlen := int(body[20])
	if len(body) < 21+idlen {
		return nil, errors.New("body shorter than its key id")
	}
	asPublicBytes := body[21 : 21+idlen]
	ciphertext := body[21+idlen:]
	if uint32(len(ciphertext)) > rs {
		return nil, fmt.Errorf("one record of %d bytes is longer than rs %d", len(ciphertext), rs)
	}
	asPublic, err := ecdh.P256().NewPublicKey(asPublicBytes)
	if err != nil {
		return nil, fmt.Errorf("keyid is not the sender's P-256 key: %w", err)
	}
	shared, err := uaPrivate.ECDH(asPublic)
	if err != nil {
		return nil, err
	}
	info := append([]byte("WebPush: info\x00"), uaPrivate.PublicKey().Bytes()...)
	info = append(info, asPublicBytes...)
	ikm, err := hkdf.Key(sha256.New, shared, auth, string(info), 32)
	if err != nil {
		return nil, err
	}
	cek, err := hkdf.Key(sha256.New, ikm, salt, "Content-Encoding: aes128gcm\x00", 16)
	if err != nil {
		return nil, err
	}
	nonce, err := hkdf.Key(sha256.New, ikm, salt, "Content-Encoding: nonce\x00", 12)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(cek)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	plain, err := gcm.Open(nil, nonce, ciphertext, nil)
	if err != nil {
		return nil, fmt.Errorf("decrypt: %w", err)
	}
	// The last record ends with 0x02 and any zero padding.
	i := len(plain) - 1
	for i >= 0 && plain[i] == 0 {
		i--
	}
	if i < 0 || plain[i] != 2 {
		return nil, errors.New("the record does not end with the last-record delimiter 0x02")
	}
	return plain[:i], nil
}

// TestDecryptRFC8291Vector proves the double: it reads RFC 8291's worked
// example (Appendix A) and refuses the example with one byte changed.
func TestDecryptRFC8291Vector(t *testing.T) {
	t.Parallel()
	must := func(s string) []byte {
		b, err := b64.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ua, err := ecdh.P256().NewPrivateKey(must("q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94"))
	if err != nil {
		t.Fatal(err)
	}
	if got := b64.EncodeToString(ua.PublicKey().Bytes()); got != "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4" {
		t.Fatalf("ua_public = %s", got)
	}
	auth := must("BTBZMqHH6r4Tts7J_aSIgg")
	body := must("DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN")
	plain, err := decrypt(body, ua, auth)
	if err != nil {
		t.Fatal(err)
	}
	if string(plain) != "When I grow up, I want to be a watermelon" {
		t.Fatalf("plaintext = %q", plain)
	}
	body[len(body)-1] ^= 1
	if _, err := decrypt(body, ua, auth); err == nil {
		t.Fatal("a changed ciphertext decrypted")
	}
}

// verifyVAPID checks an RFC 8292 Authorization header: "vapid t=JWT, k=key",
// the JWT signed ES256 by k, aud the endpoint's origin, exp in the future
// and at most 24 hours away, sub a mailto: or https: URL. It returns k.
func verifyVAPID(header, origin string) (string, map[string]any, error) {
	rest, ok := strings.CutPrefix(header, "vapid ")
	if !ok {
		return "", nil, fmt.Errorf("authorization %q is not vapid", header)
	}
	var tok, key string
	for _, p := range strings.Split(rest, ",") {
		p = strings.TrimSpace(p)
		if v, ok := strings.CutPrefix(p, "t="); ok {
			tok = v
		} else if v, ok := strings.CutPrefix(p, "k="); ok {
			key = v
		}
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 || key == "" {
		return "", nil, fmt.Errorf("no token or key in %q", header)
	}
	var head struct{ Alg, Typ string }
	hb, _ := b64.DecodeString(parts[0])
	if err := json.Unmarshal(hb, &head); err != nil || head.Alg != "ES256" {
		return "", nil, fmt.Errorf("JWT header %s is not ES256", hb)
	}
	kb, err := b64.DecodeString(key)
	if err != nil {
		return "", nil, err
	}
	x, y := elliptic.Unmarshal(elliptic.P256(), kb) //nolint:staticcheck // the point's coordinates for ecdsa
	if x == nil {
		return "", nil, errors.New("k is not a P-256 point")
	}
	sig, err := b64.DecodeString(parts[2])
	if err != nil || len(sig) != 64 {
		return "", nil, errors.New("the signature is not 64 bytes (r||s)")
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	pub := &ecdsa.PublicKey{Curve: elliptic.P256(), X: x, Y: y}
	if !ecdsa.Verify(pub, digest[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
		return "", nil, errors.New("the JWT signature does not verify with k")
	}
	var claims map[string]any
	cb, _ := b64.DecodeString(parts[1])
	if err := json.Unmarshal(cb, &claims); err != nil {
		return "", nil, err
	}
	if claims["aud"] != origin {
		return "", nil, fmt.Errorf("aud %v is not the endpoint's origin %s", claims["aud"], origin)
	}
	exp, _ := claims["exp"].(float64)
	if now := float64(time.Now().Unix()); exp <= now || exp > now+24*3600 {
		return "", nil, fmt.Errorf("exp %v is not within the next 24 hours", claims["exp"])
	}
	sub, _ := claims["sub"].(string)
	if !strings.HasPrefix(sub, "mailto:") && !strings.HasPrefix(sub, "https:") || strings.HasPrefix(sub, "mailto:mailto:") {
		return "", nil, fmt.Errorf("sub %q is not a mailto: or https: URL", sub)
	}
	return key, claims, nil
}

// pushService is a local push service: it decrypts each push for the one
// browser it serves, after verifying its VAPID token.
type pushService struct {
	srv    *httptest.Server
	ua     *ecdh.PrivateKey
	auth   []byte
	status int // what it answers; 201 when 0
	mu     sync.Mutex
	got    []push.Payload
	claims []map[string]any
	keys   []string
	errs   []error
}

func newPushService(t *testing.T) *pushService {
	ps := &pushService{auth: make([]byte, 16)}
	var err error
	if ps.ua, err = ecdh.P256().GenerateKey(rand.Reader); err != nil {
		t.Fatal(err)
	}
	rand.Read(ps.auth)
	ps.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ps.mu.Lock()
		defer ps.mu.Unlock()
		fail := func(err error) {
			ps.errs = append(ps.errs, err)
			http.Error(w, err.Error(), http.StatusBadRequest)
		}
		if r.Method != http.MethodPost || r.Header.Get("Content-Encoding") != "aes128gcm" || r.Header.Get("TTL") == "" {
			fail(fmt.Errorf("%s with Content-Encoding %q, TTL %q", r.Method, r.Header.Get("Content-Encoding"), r.Header.Get("TTL")))
			return
		}
		key, claims, err := verifyVAPID(r.Header.Get("Authorization"), ps.srv.URL)
		if err != nil {
			fail(err)
			return
		}
		body, _ := io.ReadAll(r.Body)
		plain, err := decrypt(body, ps.ua, ps.auth)
		if err != nil {
			fail(err)
			return
		}
		var p push.Payload
		if err := json.Unmarshal(plain, &p); err != nil {
			fail(err)
			return
		}
		ps.got, ps.claims, ps.keys = append(ps.got, p), append(ps.claims, claims), append(ps.keys, key)
		if ps.status != 0 {
			w.WriteHeader(ps.status)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(ps.srv.Close)
	return ps
}

func (ps *pushService) input(path string) push.Input {
	var in push.Input
	in.Endpoint = ps.srv.URL + path
	in.Keys.P256dh = b64.EncodeToString(ps.ua.PublicKey().Bytes())
	in.Keys.Auth = b64.EncodeToString(ps.auth)
	in.Label = "Chromium on Linux"
	return in
}

func newUser(t *testing.T, q db.Querier, name string) int64 {
	u, err := db.UpsertUser(context.Background(), q, "test", name, name+"@example.com", name, false)
	if err != nil {
		t.Fatal(err)
	}
	return u.ID
}

func TestPushDeliveredEncryptedAndSigned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	guard := &netguard.Guard{Loopback: true}
	keys, err := push.LoadKeys(ctx, pool, "")
	if err != nil {
		t.Fatal(err)
	}
	ch := push.New(pool, keys, "mailto:ops@example.com", guard)
	alice, bob := newUser(t, pool, "alice"), newUser(t, pool, "bob")
	ps := newPushService(t)
	sub, err := push.Subscribe(ctx, pool, guard, alice, ps.input("/push/abc"))
	if err != nil {
		t.Fatal(err)
	}
	targets, err := ch.Targets(ctx, pool, alice)
	if err != nil || len(targets) != 1 || targets[0].ID != sub.ID || targets[0].Channel != "push" || targets[0].Label != "Chromium on Linux" {
		t.Fatalf("alice's targets = %+v, %v", targets, err)
	}
	if bt, _ := ch.Targets(ctx, pool, bob); len(bt) != 0 {
		t.Fatalf("bob sees alice's subscription: %+v", bt)
	}
	ev := notify.Event{
		Key: "decision:call:42", Kind: notify.Decision, UserID: alice, ThreadID: 12, CallID: 42,
		Title: "Tidy the release notes", Summary: "shell wants to run a command", Path: "/threads/12#decide",
		Calls: []notify.Call{{Tool: "shell", Args: []notify.Arg{{Name: "command", Value: "rm -rf secret-dir"}}}},
	}
	if err := ch.Send(ctx, targets[0], ev); err != nil {
		t.Fatal(err)
	}
	// The subscription is alice's: bob's event cannot reach it.
	if err := ch.Send(ctx, targets[0], notify.Event{UserID: bob, Kind: notify.Finished}); !errors.Is(err, notify.ErrGone) {
		t.Fatalf("sending bob's event to alice's subscription: %v", err)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if len(ps.errs) != 0 {
		t.Fatalf("the push service refused: %v", ps.errs)
	}
	if len(ps.got) != 1 {
		t.Fatalf("%d pushes received, want 1", len(ps.got))
	}
	want := push.Payload{Title: "A decision waits", Thread: "Tidy the release notes", Body: "shell wants to run a command", URL: "/threads/12#decide", Tag: "call:42"}
	if ps.got[0] != want {
		t.Fatalf("payload = %+v, want %+v", ps.got[0], want)
	}
	if ps.keys[0] != keys.Public {
		t.Fatalf("VAPID k = %s, want the server's public key %s", ps.keys[0], keys.Public)
	}
	if ps.claims[0]["sub"] != "mailto:ops@example.com" {
		t.Fatalf("sub = %v", ps.claims[0]["sub"])
	}
}

func TestPushGoneRemovesSubscription(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	guard := &netguard.Guard{Loopback: true}
	keys, err := push.LoadKeys(ctx, pool, "")
	if err != nil {
		t.Fatal(err)
	}
	ch := push.New(pool, keys, "", guard)
	alice := newUser(t, pool, "alice")
	for _, status := range []int{http.StatusGone, http.StatusNotFound, http.StatusInternalServerError} {
		ps := newPushService(t)
		ps.status = status
		sub, err := push.Subscribe(ctx, pool, guard, alice, ps.input("/s"))
		if err != nil {
			t.Fatal(err)
		}
		err = ch.Send(ctx, notify.Target{Channel: "push", ID: sub.ID}, notify.Event{UserID: alice, Kind: notify.Failed, Title: "t", Path: "/threads/1"})
		subs, _ := push.List(ctx, pool, alice)
		if status == http.StatusInternalServerError {
			if err == nil || errors.Is(err, notify.ErrGone) || len(subs) != 1 {
				t.Fatalf("500: err %v, %d subscriptions; want a retryable error and the subscription kept", err, len(subs))
			}
			if ok, err := push.Delete(ctx, pool, alice, 0, sub.Endpoint); err != nil || !ok {
				t.Fatalf("delete by endpoint: %v %v", ok, err)
			}
			continue
		}
		if !errors.Is(err, notify.ErrGone) {
			t.Fatalf("%d: err = %v, want ErrGone", status, err)
		}
		if len(subs) != 0 {
			t.Fatalf("%d: the subscription is still stored: %+v", status, subs)
		}
		ps.mu.Lock()
		if len(ps.got) != 1 || len(ps.errs) != 0 {
			t.Fatalf("%d: the push service got %d pushes, errors %v", status, len(ps.got), ps.errs)
		}
		ps.mu.Unlock()
	}
}

func TestSubscribeRefusesPrivateEndpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	alice := newUser(t, pool, "alice")
	ps := newPushService(t)
	strict := &netguard.Guard{}
	insecure := &netguard.Guard{Loopback: true}
	u, _ := url.Parse(ps.srv.URL)
	cases := []struct {
		guard    *netguard.Guard
		endpoint string
		want     string
	}{
		{strict, "https://10.0.0.1/push/x", "refused"},
		{strict, "https://169.254.169.254/latest/meta-data", "refused"},
		{insecure, "https://169.254.169.254/latest/meta-data", "refused"},
		{insecure, "http://93.184.216.34/push", "http is allowed only to loopback"},
		{strict, ps.srv.URL + "/push", "refused"}, // loopback without PIZZA_NOTIFY_ALLOW_INSECURE
		{strict, "ftp://push.example.com/x", "not an https URL"},
		{strict, "https://user:pw@" + u.Host + "/x", "user name or password"},
	}
	for _, c := range cases {
		in := ps.input("")
		in.Endpoint = c.endpoint
		_, err := push.Subscribe(ctx, pool, c.guard, alice, in)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "push endpoint") {
			t.Errorf("subscribe %s (loopback %v): err %v, want one naming the push endpoint and %q", c.endpoint, c.guard.Loopback, err, c.want)
		}
	}
	bad := ps.input("/x")
	bad.Keys.Auth = "short"
	if _, err := push.Subscribe(ctx, pool, insecure, alice, bad); err == nil || !strings.Contains(err.Error(), "keys.auth") {
		t.Errorf("a bad auth secret: %v", err)
	}
	bad = ps.input("/x")
	bad.Keys.P256dh = b64.EncodeToString(make([]byte, 65))
	if _, err := push.Subscribe(ctx, pool, insecure, alice, bad); err == nil || !strings.Contains(err.Error(), "p256dh") {
		t.Errorf("a p256dh off the curve: %v", err)
	}
	if subs, _ := push.List(ctx, pool, alice); len(subs) != 0 {
		t.Fatalf("refused subscriptions were stored: %+v", subs)
	}
}

func TestVAPIDKeysCreatedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	const n = 8
	var wg sync.WaitGroup
	got := make([]push.Keys, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got[i], errs[i] = push.LoadKeys(ctx, pool, "")
		}()
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if got[i] != got[0] {
			t.Fatalf("replica %d has keys %+v, replica 0 %+v", i, got[i], got[0])
		}
	}
	var count int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM vapid_keys`).Scan(&count); err != nil || count != 1 {
		t.Fatalf("%d key pairs stored (%v)", count, err)
	}
	derived, err := push.KeysFromPrivate(got[0].Private)
	if err != nil || derived != got[0] {
		t.Fatalf("the stored public key is not the private key's: %+v %v", derived, err)
	}
	// An explicit key wins over the stored one and derives its public key
	// (RFC 8291's example key, padded as some tools print it).
	k, err := push.LoadKeys(ctx, pool, "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw=")
	if err != nil || k.Public != "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8" {
		t.Fatalf("keys from PIZZA_VAPID_PRIVATE_KEY: %+v %v", k, err)
	}
	if _, err := push.KeysFromPrivate("not a key"); err == nil {
		t.Fatal("a bad private key was taken")
	}
}

// A push that cannot reach its service fails without the subscription's
// endpoint in the error: the endpoint is the capability to push to the
// person, and the error goes to the log and the delivery list.
func TestPushErrorHidesTheEndpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	guard := &netguard.Guard{Loopback: true}
	keys, err := push.LoadKeys(ctx, pool, "")
	if err != nil {
		t.Fatal(err)
	}
	ch := push.New(pool, keys, "", guard)
	alice := newUser(t, pool, "alice")
	ps := newPushService(t)
	const secret = "/wpush/v2/gAAAAABcapability-token"
	sub, err := push.Subscribe(ctx, pool, guard, alice, ps.input(secret))
	if err != nil {
		t.Fatal(err)
	}
	ps.srv.Close() // the service is gone: the connection is refused
	err = ch.Send(ctx, notify.Target{Channel: "push", ID: sub.ID}, notify.Event{UserID: alice, Kind: notify.Failed, Title: "t", Path: "/threads/1"})
	if err == nil {
		t.Fatal("a push to a closed service succeeded")
	}
	if strings.Contains(err.Error(), "capability-token") || strings.Contains(err.Error(), sub.Endpoint) {
		t.Fatalf("the error names the endpoint: %v", err)
	}
}
