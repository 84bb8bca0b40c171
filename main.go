// Command pizza-bot is a self-hosted inbox for background AI agents: one
// server binary holding the web inbox, the agent runtime and its job queue.
//
//	pizza-bot serve     run the server (the default)
//	pizza-bot migrate   apply database migrations and exit
//	pizza-bot healthcheck  probe a running server's /readyz (for containers)
//
// and the terminal client's commands (package cli: login, inbox, new, show,
// approve, watch, ...), which talk to a server through its JSON API.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"

	"pizzabot/cli"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run is main without the process: it returns the exit code.
func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && !isFlag(args[0]) {
		cmd, args = args[0], args[1:]
	}
	commands := map[string]struct {
		summary string
		run     func(ctx context.Context, cfg config) error
	}{
		"serve":       {"run the web inbox and the agent runtime", serve},
		"migrate":     {"apply database migrations (River's, then Pizza Bot's) and exit", migrate},
		"healthcheck": {"ask the server at PIZZA_ADDR whether it is ready (exit 0) or not (exit 1), for container health checks", healthcheck},
	}
	if cmd == "help" || cmd == "-h" || cmd == "--help" {
		usage(stdout)
		return 0
	}
	if c, ok := cli.Lookup(cmd); ok {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return c.Run(ctx, args, cli.Env{Getenv: getenv, Stdin: os.Stdin, Stdout: stdout, Stderr: stderr})
	}
	c, ok := commands[cmd]
	if !ok {
		fmt.Fprintf(stderr, "pizza-bot: unknown command %q\n\n", cmd)
		usage(stderr)
		return 2
	}
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: pizza-bot %s\n\n%s.\n\nConfigured by environment variables:\n\n", cmd, c.summary)
		printEnv(fs.Output())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "pizza-bot %s: unexpected argument %q\n", cmd, fs.Arg(0))
		return 2
	}

	cfg, err := loadConfig(getenv)
	if err != nil {
		fmt.Fprintf(stderr, "pizza-bot: configuration is invalid:\n")
		for _, e := range unjoin(err) {
			fmt.Fprintf(stderr, "  - %v\n", e)
		}
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := c.run(ctx, cfg); err != nil {
		fmt.Fprintf(stderr, "pizza-bot %s: %v\n", cmd, err)
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprint(w, `Pizza Bot: a self-hosted inbox for background AI agents.

Usage: pizza-bot <command> [--help]

Commands:
  serve     run the web inbox and the agent runtime (default)
  migrate   apply database migrations and exit
  healthcheck
            exit 0 when the server at PIZZA_ADDR is ready, 1 otherwise

Client commands (a server's JSON API from the terminal; --help on each):

`)
	cli.Usage(w)
	fmt.Fprint(w, `
The server is configured by environment variables:

`)
	printEnv(w)
}

func printEnv(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, v := range envVars {
		fmt.Fprintf(tw, "  %s\t%s\n  \t  default: %s\n", v.name, v.help, v.def)
	}
	tw.Flush()
}

func isFlag(s string) bool { return len(s) > 0 && s[0] == '-' }

// unjoin splits an errors.Join error into its parts.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
