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
		EnvFile []struct {
			Path     string `yaml:"path"`
			Required *bool  `yaml:"required"`
		} `yaml:"env_file"`
		Environment map[string]string `yaml:"environment"`
		Ports       []string          `yaml:"ports"`
		Profiles    []string          `yaml:"profiles"`
		NetworkMode string            `yaml:"network_mode"`
		Volumes     []string          `yaml:"volumes"`
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

// The compose file hands each replica everything in deploy/demo.env, then
// .env (env_file), fixes only the database, the data root and the
// addresses, and publishes Caddy on PIZZA_PUBLISH; a .env made from
// .env.example replaces every published demo value, and the server accepts
// the configuration it gets once its secrets are filled in. The image's
// commands exist.
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
	caddy := cf.Services["caddy"]
	demo := readEnvFile(t, "deploy/demo.env")
	dotenv := readEnvFile(t, ".env.example")
	for k := range demo {
		if _, ok := dotenv[k]; !ok {
			t.Errorf(".env.example lacks %s: a .env made from it would keep the published demo value", k)
		}
	}
	dotenv["PIZZA_SESSION_KEYS"], dotenv["PIZZA_SECRET_KEY"] = key(32), key(32)

	for _, name := range []string{"pizza-bot-1", "pizza-bot-2"} {
		svc, ok := cf.Services[name]
		if !ok {
			t.Fatalf("no %s service", name)
		}
		if len(svc.EnvFile) != 2 || svc.EnvFile[0].Path != "deploy/demo.env" || svc.EnvFile[1].Path != ".env" {
			t.Errorf("%s env_file = %+v, want deploy/demo.env then .env: variables not listed would never reach the server", name, svc.EnvFile)
		}
		if _, ok := svc.Build.Args["WITH_NODE"]; !ok {
			t.Errorf("%s: no WITH_NODE build arg: npx MCP servers cannot start in the image", name)
		}
		for _, tt := range []struct {
			name        string
			set         map[string]string
			wantPublish string
		}{
			{"defaults", nil, "8080:8080"},
			{"published on loopback", map[string]string{"PIZZA_PUBLISH": "127.0.0.1:8080", "PIZZA_ADDR": "0.0.0.0:9999"}, "127.0.0.1:8080:8080"},
		} {
			t.Run(name+"/"+tt.name, func(t *testing.T) {
				// Compose reads .env for interpolation too.
				shell := map[string]string{}
				for k, v := range dotenv {
					shell[k] = v
				}
				for k, v := range tt.set {
					shell[k] = v
				}
				// The container's environment: demo.env, .env, then
				// environment: over them.
				got := map[string]string{}
				for k, v := range demo {
					got[k] = v
				}
				for k, v := range shell {
					got[k] = v
				}
				for k, v := range svc.Environment {
					got[k] = interpolate(v, shell)
				}
				for k, v := range demo {
					if got[k] == v && k != "PIZZA_OIDC_CLIENT_ID" {
						t.Errorf("%s keeps the demo value %q under .env.example", k, v)
					}
				}
				if !strings.HasPrefix(got["PIZZA_ADDR"], "0.0.0.0:808") {
					t.Errorf("PIZZA_ADDR = %q: fixed per replica, behind Caddy", got["PIZZA_ADDR"])
				}
				if len(caddy.Ports) != 1 || interpolate(caddy.Ports[0], shell) != tt.wantPublish {
					t.Errorf("caddy ports = %q, want %q", caddy.Ports, tt.wantPublish)
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

// The demo's published keys serve localhost only: with any other public
// URL the server refuses them, so a .env that forgets to replace them fails
// loudly instead of signing cookies with a key everyone has.
func TestDemoKeysRefusedBeyondLocalhost(t *testing.T) {
	t.Parallel()
	demo := readEnvFile(t, "deploy/demo.env")
	demo["DATABASE_URL"] = "postgres://localhost/pizza"
	demo["PIZZA_DATA_ROOT"] = t.TempDir()
	demo["PIZZA_ADDR"] = "0.0.0.0:8081"
	if _, err := loadConfig(env(demo)); err != nil {
		t.Fatalf("the demo's configuration on localhost: %v", err)
	}
	demo["PIZZA_PUBLIC_URL"] = "https://pizza.example.com"
	demo["PIZZA_ALLOWED_ORIGINS"] = "https://pizza.example.com"
	if _, err := loadConfig(env(demo)); err == nil || !strings.Contains(err.Error(), "published demo key") {
		t.Errorf("demo keys with a real public URL: %v", err)
	}
}
