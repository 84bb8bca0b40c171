package main

import (
	"bufio"
	"os"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// composeFile is the part of docker-compose.yml the server depends on.
type composeFile struct {
	Services map[string]struct {
		Build struct {
			Args map[string]string `yaml:"args"`
		} `yaml:"build"`
		EnvFile     string            `yaml:"env_file"`
		Environment map[string]string `yaml:"environment"`
		Ports       []string          `yaml:"ports"`
	} `yaml:"services"`
}

// interpolate expands compose's ${VAR} and ${VAR:-default} (defaults may
// nest) from env, as docker compose does with the shell and .env.
func interpolate(s string, env map[string]string) string {
	re := regexp.MustCompile(`\$\{([A-Z0-9_]+)(:-([^${}]*))?\}`)
	for re.MatchString(s) {
		s = re.ReplaceAllStringFunc(s, func(m string) string {
			p := re.FindStringSubmatch(m)
			if v := env[p[1]]; v != "" {
				return v
			}
			return p[3]
		})
	}
	return s
}

// readEnvFile reads KEY=VALUE lines, skipping comments and blanks.
func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not KEY=VALUE", path, line)
		}
		out[k] = v
	}
	return out
}

// The compose file hands the server everything in .env (env_file), fixes
// only the database and the data root, and lets the address and the port
// be changed; the server accepts the configuration it gets from
// .env.example once its secrets are filled in. The image's commands exist.
func TestComposeConfiguration(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.Unmarshal(raw, &cf); err != nil {
		t.Fatal(err)
	}
	svc, ok := cf.Services["pizza-bot"]
	if !ok {
		t.Fatal("no pizza-bot service")
	}
	if svc.EnvFile != ".env" {
		t.Errorf("env_file = %q, want .env: variables not listed would never reach the server", svc.EnvFile)
	}
	if _, ok := svc.Build.Args["WITH_NODE"]; !ok {
		t.Error("no WITH_NODE build arg: npx MCP servers cannot start in the image")
	}
	dotenv := readEnvFile(t, ".env.example")
	dotenv["PIZZA_SESSION_KEYS"], dotenv["PIZZA_SECRET_KEY"] = key(32), key(32)

	tests := []struct {
		name     string
		set      map[string]string
		wantAddr string
		wantPort string
	}{
		{"defaults", nil, "0.0.0.0:8080", "8080:8080"},
		{"another port", map[string]string{"PIZZA_PORT": "9000", "PIZZA_PUBLISH": "127.0.0.1:80"}, "0.0.0.0:9000", "127.0.0.1:80:9000"},
		{"an explicit address", map[string]string{"PIZZA_ADDR": "0.0.0.0:8443"}, "0.0.0.0:8443", "8080:8080"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Compose reads .env for interpolation too.
			shell := map[string]string{}
			for k, v := range dotenv {
				shell[k] = v
			}
			for k, v := range tt.set {
				shell[k] = v
			}
			// The container's environment: .env, then environment: over it.
			got := map[string]string{}
			for k, v := range shell {
				got[k] = v
			}
			for k, v := range svc.Environment {
				got[k] = interpolate(v, shell)
			}
			if got["PIZZA_ADDR"] != tt.wantAddr {
				t.Errorf("PIZZA_ADDR = %q, want %q", got["PIZZA_ADDR"], tt.wantAddr)
			}
			if len(svc.Ports) != 1 || interpolate(svc.Ports[0], shell) != tt.wantPort {
				t.Errorf("ports = %q, want %q", svc.Ports, tt.wantPort)
			}
			if got["OPENAI_API_KEY"] == "" && dotenv["OPENAI_API_KEY"] != "" {
				t.Error("a provider key from .env does not reach the server")
			}
			got["PIZZA_DATA_ROOT"] = t.TempDir() // /data in the image
			c, err := loadConfig(env(got))
			if err != nil {
				t.Fatalf("the server refuses the compose configuration: %v", err)
			}
			if c.DatabaseURL == "" || c.LogFormat != "json" {
				t.Errorf("config = %+v", c)
			}
		})
	}

	docker, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`CMD ["pizza-bot", "healthcheck"]`, `CMD ["serve"]`, `ARG WITH_NODE=false`, `nodejs npm`} {
		if !strings.Contains(string(docker), want) {
			t.Errorf("Dockerfile lacks %s", want)
		}
	}
	for _, cmd := range []string{"serve", "healthcheck"} {
		if code := run([]string{cmd, "--help"}, func(string) string { return "" }, &strings.Builder{}, &strings.Builder{}); code != 0 {
			t.Errorf("pizza-bot %s --help exits %d", cmd, code)
		}
	}
}
