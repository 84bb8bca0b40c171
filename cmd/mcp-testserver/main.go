// Command mcp-testserver is the MCP server of Pizza Bot's tests over stdio
// (see agent/mcpclient/mcptest). Useful by hand too: add it to .mcp.json as
// {"command": "/path/to/mcp-testserver"} to try MCP tools without a real
// server.
package main

import (
	"fmt"
	"os"

	"github.com/mark3labs/mcp-go/server"

	"pizzabot/agent/mcpclient/mcptest"
)

func main() {
	fmt.Fprintf(os.Stderr, "mcp-testserver starting, pid %d\n", os.Getpid())
	if err := server.ServeStdio(mcptest.NewServer(true)); err != nil {
		fmt.Fprintln(os.Stderr, "mcp-testserver:", err)
		os.Exit(1)
	}
}
