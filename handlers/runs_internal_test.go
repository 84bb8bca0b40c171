package handlers

import (
	"testing"

	"pizzabot/db"
)

func TestRefusalWording(t *testing.T) {
	t.Parallel()
	if got := sentence(`decision "edit" is not allowed`); got != `Decision "edit" is not allowed.` {
		t.Errorf("sentence = %q", got)
	}
	tests := []struct {
		allowed []string
		want    string
	}{
		{[]string{"approve", "reject"}, "You cannot edit this call to publish: you can approve or reject it."},
		{[]string{"respond"}, "You cannot edit this call to publish: you can only answer it."},
		{[]string{"approve", "edit", "reject"}, "You cannot edit this call to publish: you can approve, edit or reject it."},
	}
	for _, tt := range tests {
		c := db.ToolCallRow{Name: "publish", AllowedDecisions: tt.allowed}
		if got := notAllowed(c, db.DecisionEdit); got != tt.want {
			t.Errorf("notAllowed(%v) = %q, want %q", tt.allowed, got, tt.want)
		}
	}
}
