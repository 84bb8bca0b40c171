package agent

import (
	"context"
	"fmt"
)

// Credentials are each person's own sign-ins and secrets for MCP servers
// (docs/mcp.md): the OAuth tokens a run uses to act as the user who started
// it, and the values of ${user:NAME} in a server's headers or env. The
// implementation keeps them encrypted in PostgreSQL, scoped to their user.
type Credentials interface {
	// Token returns a live access token of userID for server, refreshed
	// first when it is close to expiry (one refresh at a time across
	// replicas). A *NeedsConnection when the user has not connected the
	// server, or the connection was revoked or its refresh failed.
	Token(ctx context.Context, userID int64, server string) (string, error)
	// Rejected tells that server answered 401 to token: unless the
	// connection has been refreshed since, it now waits for Reconnect.
	Rejected(ctx context.Context, userID int64, server, token string) error
	// Secret returns userID's value of ${user:name} for server; a
	// *NeedsConnection naming the secret when the user has not entered it.
	Secret(ctx context.Context, userID int64, server, name string) (string, error)
}

// NeedsConnection is the error of a run that cannot use server until its
// user connects it (or enters Secret): the run waits in Action for that.
type NeedsConnection struct {
	Server string
	// Secret names the ${user:NAME} value that is missing; "" for an
	// OAuth sign-in.
	Secret string
	// Reason says why, for the person: "not connected", "the server
	// revoked the token", "the refresh failed: ...".
	Reason string
}

func (e *NeedsConnection) Error() string {
	if e.Secret != "" {
		return fmt.Sprintf("%s needs your %s to continue (%s)", e.Server, e.Secret, e.Reason)
	}
	return fmt.Sprintf("connect %s to continue (%s)", e.Server, e.Reason)
}
