// Command pizza-bot is a self-hosted inbox for background AI agents: one
// server binary holding the web inbox, the agent runtime and its job queue.
//
//	pizza-bot serve     run the server (the default)
//	pizza-bot migrate   apply database migrations and exit
//	pizza-bot healthcheck  probe a running server's /readyz (for containers)
//	pizza-bot backup [FILE]          write a backup of the database
//	pizza-bot restore [--force] FILE restore one into an empty database
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
	var force bool
	commands := map[string]struct {
		summary string
		run     func(ctx context.Context, cfg config) error
		// Commands taking arguments: their synopsis, how many, their
		// flags, and runArgs in place of run.
		synopsis         string
		minArgs, maxArgs int
		flags            func(fs *flag.FlagSet)
		runArgs          func(ctx context.Context, cfg config, args []string) error
	}{
		"serve":       {summary: "run the web inbox and the agent runtime", run: serve},
		"migrate":     {summary: "apply database migrations (River's, then Pizza Bot's) and exit", run: migrate},
		"healthcheck": {summary: "ask the server at PIZZA_ADDR whether it is ready (exit 0) or not (exit 1), for container health checks", run: healthcheck},
		"backup": {
			summary:  "write a consistent backup of the database (the private one under PIZZA_DATA_ROOT, or DATABASE_URL) to FILE (default pizza-bot-<date>.dump; - for standard output), also while the server runs",
			synopsis: "[FILE]", maxArgs: 1,
			runArgs: func(ctx context.Context, cfg config, args []string) error {
				return backup(ctx, cfg, append(args, "")[0])
			},
		},
		"restore": {
			summary:  "restore a backup into an empty database (the private one under PIZZA_DATA_ROOT, or DATABASE_URL); the server must be stopped",
			synopsis: "[--force] FILE", minArgs: 1, maxArgs: 1,
			flags: func(fs *flag.FlagSet) {
				fs.BoolVar(&force, "force", false, "replace a database that already holds data")
			},
			runArgs: func(ctx context.Context, cfg config, args []string) error {
				return restore(ctx, cfg, args[0], force)
			},
		},
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
	if c.flags != nil {
		c.flags(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: pizza-bot %s %s\n\n%s.\n\n", cmd, c.synopsis, c.summary)
		if c.flags != nil {
			fs.PrintDefaults()
			fmt.Fprintln(fs.Output())
		}
		fmt.Fprintf(fs.Output(), "Configured by environment variables:\n\n")
		printEnv(fs.Output())
	}
	// Flags may come after the arguments too (restore FILE --force).
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(stdout)
				fs.Usage()
				return 0
			}
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(positional) > c.maxArgs {
		fmt.Fprintf(stderr, "pizza-bot %s: unexpected argument %q\n", cmd, positional[c.maxArgs])
		return 2
	}
	if len(positional) < c.minArgs {
		fmt.Fprintf(stderr, "pizza-bot %s: missing argument; usage: pizza-bot %s %s\n", cmd, cmd, c.synopsis)
		return 2
	}
	if c.runArgs != nil {
		c.run = func(ctx context.Context, cfg config) error { return c.runArgs(ctx, cfg, positional) }
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
  backup [FILE]
            write a consistent backup of the database (also while the server runs)
  restore [--force] FILE
            restore a backup into an empty database (stop the server first)

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
