package handlers_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"pizzabot/db"
)

// The context windows set in settings are checked as PIZZA_CONTEXT_WINDOWS
// is: a refused value is shown back with what is wrong, and the stored one
// is left as it was.
func TestSettingsContextWindows(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{adminEmails: []string{"ada@example.com"}})
	admin := b.signIn(adminIdP)
	if resp, body := b.post(admin, "/settings/context-windows", url.Values{"windows": {"my-model=65536,*=131072"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("save = %d: %s", resp.StatusCode, body)
	}
	resp, body := b.post(admin, "/settings/context-windows", url.Values{"windows": {"my-model=64k"}})
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "is not a number of tokens of at least 1024") || strings.Contains(body, "PIZZA_CONTEXT_WINDOWS: ") {
		t.Errorf("a bad value = %d, want 422 saying what is wrong", resp.StatusCode)
	}
	if stored, err := db.GetServerSetting(b.ctx, b.pool, db.SettingContextWindows); err != nil || stored != "my-model=65536,*=131072" {
		t.Errorf("stored = %q, %v; want the last good value", stored, err)
	}
	if _, body := b.do(admin, "GET", "/settings", nil, nil); !strings.Contains(body, `value="my-model=65536,*=131072"`) {
		t.Error("the settings page does not show the stored windows")
	}
	if resp, _ := b.post(admin, "/settings/context-windows", url.Values{"windows": {""}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatal("clear the windows")
	}
	if stored, _ := db.GetServerSetting(b.ctx, b.pool, db.SettingContextWindows); stored != "" {
		t.Errorf("after clearing: %q", stored)
	}
}
