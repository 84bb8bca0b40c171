package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/term"

	"pizzabot/client"
)

// fileConfig is the client's config file: the server and its token.
type fileConfig struct {
	URL   string `json:"url"`
	Token string `json:"token,omitempty"`
}

// configPath is $XDG_CONFIG_HOME/pizza-bot/config.json, by default under
// ~/.config.
func configPath(getenv func(string) string) (string, error) {
	dir := getenv("XDG_CONFIG_HOME")
	if dir == "" || !filepath.IsAbs(dir) {
		home := getenv("HOME")
		if home == "" {
			return "", errors.New("neither XDG_CONFIG_HOME nor HOME is set: cannot find the config file")
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "pizza-bot", "config.json"), nil
}

// loadConfig reads the config file; a missing one is an empty config.
func loadConfig(getenv func(string) string) (fileConfig, string, error) {
	path, err := configPath(getenv)
	if err != nil {
		return fileConfig{}, "", nil // no file to read: the environment decides
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fileConfig{}, path, nil
	}
	if err != nil {
		return fileConfig{}, path, fmt.Errorf("read the config file: %w", err)
	}
	var c fileConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return fileConfig{}, path, fmt.Errorf("the config file %s is not valid JSON (run pizza-bot login again): %v", path, err)
	}
	return c, path, nil
}

// saveConfig writes the config file, readable by its owner only: it holds
// a credential. It is written to a new file and renamed, so a reader never
// sees half of it and an older file's looser mode never carries over.
func saveConfig(path string, c fileConfig) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create the config directory: %w", err)
	}
	b, _ := json.MarshalIndent(c, "", "  ")
	f, err := os.CreateTemp(filepath.Dir(path), ".config-*.json")
	if err != nil {
		return fmt.Errorf("write the config file: %w", err)
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("write the config file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write the config file: %w", err)
	}
	return os.Rename(f.Name(), path)
}

func runLogin(ctx context.Context, x *cmdEnv, args []string) error {
	fset := x.flags()
	var token string
	fset.StringVar(&token, "token", "", "a personal access token (made on the server's Tokens page); prompted when needed")
	pos, err := x.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usagef("want at most the server's URL")
	}
	url := ""
	if len(pos) == 1 {
		url = pos[0]
	} else if url = strings.TrimSpace(x.Getenv("PIZZA_URL")); url == "" {
		url = defaultURL
	}
	if token == "" {
		token = strings.TrimSpace(x.Getenv("PIZZA_TOKEN"))
	}
	path, err := configPath(x.Getenv)
	if err != nil {
		return err
	}
	check := func(token string) (*client.Client, error) {
		c, err := client.New(client.Config{URL: url, Token: token})
		if err != nil {
			return nil, usageError{err.Error()}
		}
		_, err = c.ListThreads(ctx, client.ListOptions{Limit: 1})
		return c, err
	}

	c, err := check(token)
	if token == "" && client.IsStatus(err, http.StatusUnauthorized) {
		// The server has sign-in: a token is needed.
		if token, err = x.promptToken(url); err != nil {
			return err
		}
		c, err = check(token)
	}
	if err != nil {
		if client.IsStatus(err, http.StatusUnauthorized) && token != "" {
			var ae *client.Error
			errors.As(err, &ae)
			return fmt.Errorf("the server refused the token: %s", ae.Message)
		}
		return err
	}
	if err := saveConfig(path, fileConfig{URL: c.URL(), Token: token}); err != nil {
		return err
	}
	if x.json {
		b, _ := json.Marshal(map[string]any{"url": c.URL(), "config": path, "token_saved": token != ""})
		x.printJSON(b)
		return nil
	}
	if token == "" {
		fmt.Fprintf(x.Stdout, "Logged in to %s: it has no sign-in, no token needed. Saved in %s.\n", c.URL(), path)
	} else {
		fmt.Fprintf(x.Stdout, "Logged in to %s. The token is saved in %s (readable by you only).\n", c.URL(), path)
	}
	return nil
}

// promptToken asks for a token: without echo on a terminal, else the first
// line of stdin (`pizza-bot login URL < token-file`).
func (x *cmdEnv) promptToken(url string) (string, error) {
	f, ok := x.Stdin.(*os.File)
	if ok && isTerminal(f) {
		fmt.Fprintf(x.Stderr, "%s has sign-in. Make a token on %s/tokens and paste it here: ", url, strings.TrimRight(url, "/"))
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(x.Stderr)
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(b)), nil
	}
	if x.Stdin == nil {
		return "", errors.New("the server has sign-in: give a token with --token")
	}
	line, err := bufio.NewReader(x.Stdin).ReadString('\n')
	line = strings.TrimSpace(line)
	if line == "" {
		if err != nil && !errors.Is(err, io.EOF) {
			return "", err
		}
		return "", errors.New("the server has sign-in: give a token with --token, or on stdin")
	}
	return line, nil
}
