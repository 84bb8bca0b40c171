package main

import (
	"strings"
	"testing"
)

// PIZZA_CONTEXT_WINDOWS and PIZZA_LARGE_RESULT_TOKENS are checked at start:
// a bad value refuses the configuration, naming the variable.
func TestConfigContextWindows(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		windows, large, wantErr string
	}{
		{},
		{windows: "my-model=65536,other=200000", large: "30000"},
		{windows: "my-model=64k", wantErr: `PIZZA_CONTEXT_WINDOWS: "my-model=64k": "64k" is not a number of tokens`},
		{windows: "my-model", wantErr: `PIZZA_CONTEXT_WINDOWS: "my-model" is not <model>=<tokens>`},
		{large: "lots", wantErr: `PIZZA_LARGE_RESULT_TOKENS: "lots" is not a number of tokens`},
		{large: "10", wantErr: `PIZZA_LARGE_RESULT_TOKENS: "10" is not a number of tokens of at least 1000`},
	} {
		_, err := loadConfig(env(map[string]string{"PIZZA_DATA_ROOT": t.TempDir(),
			"PIZZA_CONTEXT_WINDOWS": tt.windows, "PIZZA_LARGE_RESULT_TOKENS": tt.large}))
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("%q, %q: %v", tt.windows, tt.large, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%q, %q: error = %v, want %q", tt.windows, tt.large, err, tt.wantErr)
		}
	}
}
