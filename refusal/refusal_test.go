package refusal_test

import (
	"errors"
	"fmt"
	"testing"

	"pizzabot/refusal"
)

func TestAs(t *testing.T) {
	t.Parallel()
	r := refusal.New(refusal.Invalid, "skill", "there is no skill named %q", "x")
	wrapped := fmt.Errorf("start: %w", r)
	tests := []struct {
		name      string
		err       error
		want      *refusal.Error
		isInvalid bool
	}{
		{"refusal", r, r, true},
		{"wrapped", wrapped, r, true},
		{"other error", errors.New("boom"), nil, false},
		{"nil", nil, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := refusal.As(tt.err)
			if got != tt.want || ok != (tt.want != nil) {
				t.Errorf("As = %v, %v; want %v", got, ok, tt.want)
			}
			if refusal.Is(tt.err, refusal.Invalid) != tt.isInvalid || refusal.Is(tt.err, refusal.Conflict) {
				t.Errorf("Is(Invalid) = %v, want %v", refusal.Is(tt.err, refusal.Invalid), tt.isInvalid)
			}
		})
	}
	if r.Error() != `there is no skill named "x"` || r.Field != "skill" || r.Kind.String() != "invalid" {
		t.Errorf("refusal = %+v (%s)", *r, r.Kind)
	}
}
