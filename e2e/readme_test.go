package e2e

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"pizzabot/internal/eventually"
)

// command is one line of a README shell block: VAR=value ... go run PKG ARGS.
type command struct {
	env  []string
	pkg  string
	args []string
}

// readmeCommands returns the shell blocks of the README's section titled
// heading, one command each.
func readmeCommands(t *testing.T, heading string) []command {
	t.Helper()
	raw, err := os.ReadFile(repoFile("README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "\n## "+heading+"\n")
	if !ok {
		t.Fatalf("README has no section %q", heading)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var out []command
	for _, block := range strings.Split(section, "```sh\n")[1:] {
		text, _, _ := strings.Cut(block, "```")
		words := shellWords(t, strings.TrimSpace(text))
		var c command
		for len(words) > 0 && strings.Contains(words[0], "=") {
			c.env, words = append(c.env, words[0]), words[1:]
		}
		if len(words) < 3 || words[0] != "go" || words[1] != "run" {
			t.Fatalf("README block %q is not a go run command", text)
		}
		c.pkg, c.args = words[2], words[3:]
		out = append(out, c)
	}
	return out
}

// shellWords splits a one-line command as sh does for the quoting the
// README uses: spaces, and "double quotes".
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	if strings.ContainsAny(line, "\n\\$'`") {
		t.Fatalf("README command %q: more shell than this test reads", line)
	}
	var words []string
	var w strings.Builder
	quoted, in := false, false
	for _, r := range line {
		switch {
		case r == '"':
			quoted, in = !quoted, true
		case r == ' ' && !quoted:
			if in {
				words, in = append(words, w.String()), false
				w.Reset()
			}
		default:
			w.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, w.String())
	}
	return words
}

// TestReadmeFirstRun does what the README's first run says, command by
// command (each go run as its built binary, on free ports and a fresh data
// root instead of the defaults): the scripted model, the server on its
// private PostgreSQL pointed at it, and the terminal client starting a run
// and waiting for its answer, which is the one the README promises.
func TestReadmeFirstRun(t *testing.T) {
	t.Parallel()
	cmds := readmeCommands(t, "A first run without a model account")
	if len(cmds) != 3 {
		t.Fatalf("README's first run has %d commands, want the model, the server and the client: %+v", len(cmds), cmds)
	}
	model, server, client := cmds[0], cmds[1], cmds[2]
	const readmeModel = "127.0.0.1:9090"
	modelAddr, addr := freeAddr(t), freeAddr(t)
	swap := func(ss []string) []string {
		var out []string
		for _, s := range ss {
			out = append(out, strings.ReplaceAll(s, readmeModel, modelAddr))
		}
		return out
	}
	if !strings.Contains(strings.Join(model.args, " "), readmeModel) || !strings.Contains(strings.Join(server.env, " "), readmeModel) {
		t.Fatalf("the README's model (%v) and server (%v) do not meet at %s", model.args, server.env, readmeModel)
	}

	m := exec.Command(buildPkg(t, model.pkg), swap(model.args)...)
	var mout bytes.Buffer
	m.Stdout, m.Stderr = &mout, &mout
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Process.Kill(); _ = m.Wait() })
	eventually.Ok(t, 30*time.Second, func() error {
		c, err := net.Dial("tcp", modelAddr)
		if err != nil {
			return err
		}
		return c.Close()
	})

	if server.pkg != "." || strings.Join(server.args, " ") != "serve" {
		t.Fatalf("README's server command runs %s %v, want . serve", server.pkg, server.args)
	}
	bin := buildPkg(t, server.pkg)
	p := startServe(t, bin, append(swap(server.env), "PIZZA_DATA_ROOT="+dataRoot(t), "PIZZA_ADDR="+addr, "DATABASE_URL=")...)
	waitReady(t, addr, p)

	if client.pkg != "." {
		t.Fatalf("README's client runs %s, want the server's binary", client.pkg)
	}
	c := exec.Command(bin, client.args...)
	c.Env = append(os.Environ(), "PIZZA_URL=http://"+addr, "PIZZA_TOKEN=", "XDG_CONFIG_HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	go func() { done <- c.Run() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%v: %v\nstdout:\n%s\nstderr:\n%s\nserver:\n%s", client.args, err, &stdout, &stderr, p.out)
		}
	case <-time.After(90 * time.Second):
		_ = c.Process.Kill()
		t.Fatalf("%v did not end\nstderr:\n%s\nserver:\n%s", client.args, &stderr, p.out)
	}
	raw, _ := os.ReadFile(repoFile("README.md"))
	answer := strings.TrimSpace(stdout.String())
	if answer != "You said: Hello" || !strings.Contains(string(raw), "`"+answer+"`") {
		t.Errorf("the client printed %q; the README promises `You said: Hello`", answer)
	}
	if !strings.HasPrefix(stderr.String(), "Started #") {
		t.Errorf("stderr = %q, want the thread's id and URL", &stderr)
	}
}
