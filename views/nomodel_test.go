package views

import (
	"context"
	"strings"
	"testing"

	"pizzabot/db"
)

// The no-model notice sends an admin to the settings' model section and
// tells anyone else whom to ask.
func TestNoModelNotice(t *testing.T) {
	t.Parallel()
	render := func(n Nav) string {
		var sb strings.Builder
		if err := NoModelNotice(n).Render(context.Background(), &sb); err != nil {
			t.Fatal(err)
		}
		return sb.String()
	}
	if got := render(Nav{NoModel: true, User: db.User{IsAdmin: true}}); !strings.Contains(got, `href="/settings#model"`) || !strings.Contains(got, "PIZZA_MODEL") {
		t.Errorf("admin notice = %s", got)
	}
	if got := render(Nav{NoModel: true}); strings.Contains(got, "/settings") || !strings.Contains(got, "Ask an admin") {
		t.Errorf("user notice = %s", got)
	}
	if got := render(Nav{}); got != "" {
		t.Errorf("notice with a model = %s", got)
	}
}
