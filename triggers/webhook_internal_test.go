package triggers

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// The verifiers against the examples their specifications publish, with
// the clock set to the example's time.

func TestVerifyStandardWebhookSpecExample(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	body := []byte(`{"test": 2432232314}`)
	hdr := http.Header{}
	hdr.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	hdr.Set("webhook-timestamp", "1614265330")
	hdr.Set("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	at := time.Unix(1614265330, 0)
	if err := verifyStandardWebhook(secret, hdr, body, at.Add(4*time.Minute)); err != nil {
		t.Errorf("the spec's example is refused: %v", err)
	}
	// The prefix may be left out of the secret.
	if err := verifyStandardWebhook(strings.TrimPrefix(secret, "whsec_"), hdr, body, at); err != nil {
		t.Errorf("the secret without its prefix is refused: %v", err)
	}
	for _, tt := range []struct {
		name string
		now  time.Time
		body string
		want string
	}{
		{"five minutes and a second late", at.Add(5*time.Minute + time.Second), string(body), "timestamp"},
		{"early", at.Add(-5*time.Minute - time.Second), string(body), "timestamp"},
		{"tampered", at, `{"test": 2432232315}`, "matches"},
	} {
		err := verifyStandardWebhook(secret, hdr, []byte(tt.body), tt.now)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error about %s", tt.name, err, tt.want)
		}
	}
}

func TestVerifyGitHubWebhookDocsExample(t *testing.T) {
	t.Parallel()
	hdr := http.Header{}
	hdr.Set("X-Hub-Signature-256", "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
	if err := verifyGitHubWebhook("It's a Secret to Everybody", hdr, []byte("Hello, World!")); err != nil {
		t.Errorf("GitHub's example is refused: %v", err)
	}
	if err := verifyGitHubWebhook("It's a Secret to Everybody", hdr, []byte("Hello, World?")); err == nil {
		t.Error("a tampered body is accepted")
	}
}

func TestCodeFenceOutlastsTheBody(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		"plain":              "```",
		"a ``` fence":        "````",
		"`````` six of them": "```````",
	} {
		if got := codeFence(body); got != want {
			t.Errorf("codeFence(%q) = %q, want %q", body, got, want)
		}
	}
}
