package extensions

import (
	"context"
	"errors"

	"pizzabot/agent/mcpclient"
	"pizzabot/tools"
)

// MCPTools returns the tools of the connected MCP servers as run tools, to
// pass to Toolbox.AddSource: they come and go with their servers.
//
// MCP calls act outside our database, so they are Call tools: the runtime
// records the intent before calling, and after a crash during a call asks a
// person instead of calling again (a server's read-only hint is not trusted
// for that). A server that is down, or does not answer within the per-call
// timeout, gives the model a tool error and the run goes on.
//
// A call of a tool of a server each user signs in to goes with the run's
// user's own token from signer (nil: such calls fail); without one, or
// when the server refuses it, the call's error is an
// *agent.NeedsConnection and the run waits for the person to connect.
func MCPTools(m *mcpclient.Manager, signer mcpclient.Signer) func() []tools.Tool {
	return mcpTools(m, signer, func(string, string) (bool, bool) { return false, false })
}

// Tools is MCPTools for the servers x runs. A running built-in server's
// tools are Named (offered to the skills that name them only), and those it
// lists as reads (BuiltinServer.Reads) are Idempotent: they run without
// asking by default, and are called again after a crash. No other server's
// word is taken for it.
func (x *Extensions) Tools(signer mcpclient.Signer) func() []tools.Tool {
	return mcpTools(x.Manager, signer, x.builtinTool)
}

// builtinTool reports whether server is a running built-in one, and
// whether tool is one of its reads.
func (x *Extensions) builtinTool(server, tool string) (builtin, read bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	reads, builtin := x.builtin[server]
	return builtin, reads[tool]
}

func mcpTools(m *mcpclient.Manager, signer mcpclient.Signer, builtin func(server, tool string) (builtin, read bool)) func() []tools.Tool {
	return func() []tools.Tool {
		mts := m.Tools()
		out := make([]tools.Tool, 0, len(mts))
		for _, mt := range mts {
			name := mt.Spec.Name
			named, read := builtin(mt.Server, mt.Name)
			out = append(out, tools.Tool{
				Spec:       mt.Spec,
				Server:     mt.Server,
				Remote:     mt.Name,
				Named:      named,
				Idempotent: read,
				Call: func(ctx context.Context, run tools.Run, args map[string]any) (string, error) {
					res, err := m.CallAs(ctx, signer, run.UserID, name, args)
					if err != nil {
						var ce *mcpclient.CallError
						if errors.As(err, &ce) || ctx.Err() == nil {
							return "", err
						}
						return "", ctx.Err()
					}
					text, isErr := mcpclient.FormatResult(res)
					if isErr {
						if text == "" {
							text = "the tool failed without saying why"
						}
						return "", toolError(text)
					}
					return text, nil
				},
			})
		}
		return out
	}
}

// toolError is a tool's own error text, given to the model as is.
type toolError string

func (e toolError) Error() string { return string(e) }
