package main

import (
	"strings"
	"testing"
)

func TestConfigReportsEveryProblem(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"DATABASE_URL":    "postgres://u:secret@host:notaport/db",
		"PIZZA_LOG_LEVEL": "loud",
		"PIZZA_MODEL":     "nope",
		"PIZZA_ADDR":      "no-port",
	}
	_, err := loadConfig(func(k string) string { return env[k] })
	if err == nil {
		t.Fatal("bad configuration accepted")
	}
	msg := err.Error()
	for _, want := range []string{"DATABASE_URL", "PIZZA_LOG_LEVEL", "PIZZA_MODEL", "PIZZA_ADDR"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not mention %s:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "secret") {
		t.Errorf("error leaks the database password:\n%s", msg)
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := loadConfig(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "127.0.0.1:8080" || c.DataRoot == "" || c.DatabaseURL != "" || c.LogFormat != "text" {
		t.Errorf("defaults = %+v", c)
	}
}
