package e2e

import (
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/bcrypt"

	"pizzabot/db/dbtest"
)

// There is no Docker engine where the tests run: TestComposeDeployment
// checks docker-compose.yml, deploy/Caddyfile and deploy/dex.yaml against
// each other by reading them, and runs what the compose file runs without
// Docker: the binary with a replica's variables (defaults as compose
// expands them with no .env). Dex itself is not run here.
func TestComposeDeployment(t *testing.T) {
	t.Parallel()
	var compose struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Profiles    []string          `yaml:"profiles"`
			NetworkMode string            `yaml:"network_mode"`
			Ports       []string          `yaml:"ports"`
			Environment map[string]string `yaml:"environment"`
			Volumes     []string          `yaml:"volumes"`
			EnvFile     []struct {
				Path     string `yaml:"path"`
				Required *bool  `yaml:"required"`
			} `yaml:"env_file"`
		} `yaml:"services"`
	}
	readYAML(t, repoFile("docker-compose.yml"), &compose)
	var dex struct {
		Issuer string `yaml:"issuer"`
		Web    struct {
			HTTP string `yaml:"http"`
		} `yaml:"web"`
		StaticClients []struct {
			ID           string   `yaml:"id"`
			Secret       string   `yaml:"secret"`
			RedirectURIs []string `yaml:"redirectURIs"`
		} `yaml:"staticClients"`
		EnablePasswordDB bool `yaml:"enablePasswordDB"`
		StaticPasswords  []struct {
			Email string `yaml:"email"`
			Hash  string `yaml:"hash"`
		} `yaml:"staticPasswords"`
	}
	readYAML(t, repoFile("deploy/dex.yaml"), &dex)
	caddy, err := os.ReadFile(repoFile("deploy/Caddyfile"))
	if err != nil {
		t.Fatal(err)
	}
	composeText, _ := os.ReadFile(repoFile("docker-compose.yml"))
	if c := compose.Services["caddy"]; len(c.Ports) != 1 || c.Ports[0] != "${PIZZA_PUBLISH:-8080}:8080" {
		t.Errorf("caddy ports = %v", c.Ports)
	}

	// The demo users sign in with the passwords the compose file announces.
	if !dex.EnablePasswordDB || len(dex.StaticPasswords) != 2 {
		t.Fatalf("dex users: %+v", dex.StaticPasswords)
	}
	for _, u := range dex.StaticPasswords {
		m := regexp.MustCompile(regexp.QuoteMeta(u.Email) + ` / (\S+)`).FindSubmatch(composeText)
		if m == nil {
			t.Errorf("docker-compose.yml does not give %s's demo password", u.Email)
			continue
		}
		if err := bcrypt.CompareHashAndPassword([]byte(u.Hash), m[1]); err != nil {
			t.Errorf("%s's hash in deploy/dex.yaml is not of %q: %v", u.Email, m[1], err)
		}
	}
	if dex.Web.HTTP != "0.0.0.0:5556" || !strings.Contains(string(caddy), "reverse_proxy dex:5556") || !strings.Contains(string(caddy), "handle /dex/*") {
		t.Errorf("Caddy does not reach Dex at %s under /dex", dex.Web.HTTP)
	}
	if d, ok := compose.Services["dex"]; !ok || len(d.Profiles) != 1 || d.Profiles[0] != "demo" {
		t.Error("dex is not in the demo profile")
	}

	var replicas []string
	for name, s := range compose.Services {
		if strings.HasPrefix(name, "pizza-bot") {
			replicas = append(replicas, name)
			if s.NetworkMode != "service:caddy" || len(s.Volumes) != 0 {
				t.Errorf("%s: network %q, volumes %v: want Caddy's namespace and no volume", name, s.NetworkMode, s.Volumes)
			}
		}
	}
	if len(replicas) != 2 {
		t.Fatalf("replicas = %v, want two", replicas)
	}
	bin := buildBinary(t)
	dbURL := dbtest.NewURL(t)
	for _, name := range replicas {
		// deploy/demo.env first, then an optional .env (absent here), then
		// environment, as compose applies them.
		files := compose.Services[name].EnvFile
		if len(files) != 2 || files[0].Path != "deploy/demo.env" || files[1].Path != ".env" || files[1].Required == nil || *files[1].Required {
			t.Fatalf("%s env_file = %+v, want deploy/demo.env then an optional .env", name, files)
		}
		env := readEnvFile(t, repoFile("deploy/demo.env"))
		for k, v := range expandCompose(t, compose.Services[name].Environment) {
			env[k] = v
		}
		_, port, _ := strings.Cut(env["PIZZA_ADDR"], ":")
		if !strings.Contains(string(caddy), "localhost:"+port) {
			t.Errorf("Caddy does not proxy to %s on port %s", name, port)
		}
		if env["PIZZA_OIDC_ISSUER"] != dex.Issuer {
			t.Errorf("%s: issuer %q, Dex's is %q", name, env["PIZZA_OIDC_ISSUER"], dex.Issuer)
		}
		c := dex.StaticClients[0]
		if env["PIZZA_OIDC_CLIENT_ID"] != c.ID || env["PIZZA_OIDC_CLIENT_SECRET"] != c.Secret ||
			len(c.RedirectURIs) != 1 || c.RedirectURIs[0] != env["PIZZA_PUBLIC_URL"]+"/auth/callback" {
			t.Errorf("%s: client %s/%s at %s does not match Dex's %+v", name, env["PIZZA_OIDC_CLIENT_ID"], env["PIZZA_OIDC_CLIENT_SECRET"], env["PIZZA_PUBLIC_URL"], c)
		}
		if env["PIZZA_ADMIN_EMAILS"] != dex.StaticPasswords[0].Email {
			t.Errorf("%s: admins %q", name, env["PIZZA_ADMIN_EMAILS"])
		}

		// The binary takes the replica's variables as they are (its own
		// database and a free port here; the address stays non-loopback,
		// so the team configuration is checked in full) and gets ready,
		// with Dex unreachable: sign-in retries discovery.
		env["DATABASE_URL"] = dbURL
		env["PIZZA_ADDR"] = "0.0.0.0:" + strings.Split(freeAddr(t), ":")[1]
		env["PIZZA_METRICS_ADDR"] = freeAddr(t)
		env["PIZZA_DATA_ROOT"] = dataRoot(t)
		var list []string
		for k, v := range env {
			list = append(list, k+"="+v)
		}
		p := startServe(t, bin, list...)
		waitReady(t, "127.0.0.1:"+strings.Split(env["PIZZA_ADDR"], ":")[1], p)
		resp, err := http.Get("http://" + env["PIZZA_METRICS_ADDR"] + "/metrics")
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("%s: metrics: %v", name, err)
		} else {
			resp.Body.Close()
		}
	}
}

func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// expandCompose expands ${VAR:-default} as compose does without a .env
// (and with none of the variables set).
func expandCompose(t *testing.T, env map[string]string) map[string]string {
	t.Helper()
	re := regexp.MustCompile(`\$\{([A-Z_]+)(:-([^}]*))?\}`)
	out := map[string]string{}
	for k, v := range env {
		out[k] = re.ReplaceAllString(v, "$3")
		if strings.Contains(out[k], "${") {
			t.Errorf("%s: cannot expand %q", k, v)
		}
	}
	return out
}
