package agent

import (
	"net/http"
	"testing"
	"time"
)

func TestParseErrorBody(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		body       string
		wantStatus int
		wantCode   string
		wantType   string
		wantMsg    string
	}{
		{name: "openai", body: `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, wantCode: "invalid_api_key", wantType: "invalid_request_error", wantMsg: "Incorrect API key provided"},
		{name: "gemini list", body: `[{"error":{"code":400,"message":"API key not valid.","status":"INVALID_ARGUMENT"}}]`, wantStatus: 400, wantCode: "400", wantType: "INVALID_ARGUMENT", wantMsg: "API key not valid."},
		{name: "error string", body: `{"error":"model 'x' not found"}`, wantMsg: "model 'x' not found"},
		{name: "message only", body: `{"message":"The security token included in the request is invalid."}`, wantMsg: "The security token included in the request is invalid."},
		{name: "fastapi detail", body: `{"detail":"Not Found"}`, wantMsg: "Not Found"},
		{name: "openrouter upstream", body: `{"error":{"code":502,"message":"Provider returned error","metadata":{"raw":"overloaded"}}}`, wantStatus: 502, wantCode: "502", wantMsg: "Provider returned error: overloaded"},
		{name: "plain text", body: "upstream connect error\n", wantMsg: "upstream connect error"},
		{name: "empty", body: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			status, code, typ, msg := parseErrorBody([]byte(tt.body))
			if status != tt.wantStatus || code != tt.wantCode || typ != tt.wantType || msg != tt.wantMsg {
				t.Errorf("got (%d, %q, %q, %q), want (%d, %q, %q, %q)", status, code, typ, msg, tt.wantStatus, tt.wantCode, tt.wantType, tt.wantMsg)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	future := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	tests := []struct {
		name     string
		header   http.Header
		min, max time.Duration
	}{
		{name: "none", header: http.Header{}},
		{name: "seconds", header: http.Header{"Retry-After": {"7"}}, min: 7 * time.Second, max: 7 * time.Second},
		{name: "fraction", header: http.Header{"Retry-After": {"0.5"}}, min: 500 * time.Millisecond, max: 500 * time.Millisecond},
		{name: "milliseconds win", header: http.Header{"Retry-After": {"7"}, "Retry-After-Ms": {"250"}}, min: 250 * time.Millisecond, max: 250 * time.Millisecond},
		// An HTTP date: 90 s ahead when the table was built, less by the
		// time the parallel subtest runs on a loaded machine.
		{name: "date", header: http.Header{"Retry-After": {future}}, min: 30 * time.Second, max: 90 * time.Second},
		{name: "garbage", header: http.Header{"Retry-After": {"soon"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := retryAfter(tt.header); got < tt.min || got > tt.max {
				t.Errorf("retryAfter = %v, want between %v and %v", got, tt.min, tt.max)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	p := RetryPolicy{Attempts: 5, Base: 100 * time.Millisecond, Max: time.Second}
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 9: time.Second} {
		for range 20 {
			if got := p.backoff(n); got < want/2 || got > want {
				t.Errorf("backoff(%d) = %v, want in [%v, %v]", n, got, want/2, want)
			}
		}
	}
}
