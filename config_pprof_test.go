package main

import (
	"strings"
	"testing"
)

// PIZZA_PPROF_ADDR is off by default and served on loopback only.
func TestConfigPprofAddr(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		addr, want, wantErr string
	}{
		{addr: "", want: ""},
		{addr: "127.0.0.1:6060", want: "127.0.0.1:6060"},
		{addr: "localhost:6060", want: "localhost:6060"},
		{addr: "0.0.0.0:6060", wantErr: "loopback only"},
		{addr: ":6060", wantErr: "loopback only"},
		{addr: "6060", wantErr: "want host:port"},
	} {
		m := map[string]string{"PIZZA_DATA_ROOT": "/tmp/pizza-config-test", "PIZZA_PPROF_ADDR": tt.addr}
		c, err := loadConfig(env(m))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%q: error = %v, want %q", tt.addr, err, tt.wantErr)
			}
			continue
		}
		if err != nil || c.PprofAddr != tt.want {
			t.Errorf("%q: got %q, %v", tt.addr, c.PprofAddr, err)
		}
	}
}
