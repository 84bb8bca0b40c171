package jobs

import "context"

// ConnectionReady resumes every run of userID that waits for a connection
// to server (docs/mcp.md): called once the person connected it or entered
// the secret it waited for.
func (rt *Runtime) ConnectionReady(ctx context.Context, userID int64, server string) error {
	return nil
}
