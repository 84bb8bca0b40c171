package agent_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
)

// TestConverseParallelStreams: runs share a Model (the runtime keeps one
// per model), so streams of one Bedrock client are read at once. Under
// -race this failed with the SDK's event stream codec written by every
// stream of the client; each answer must be its own.
func TestConverseParallelStreams(t *testing.T) {
	t.Parallel()
	b := converseSetup(t, signedScript(scriptmodel.Rule{Replies: []scriptmodel.Reply{{Content: "Ovens are hot, mind the door.", Chunks: 4}}}), "amazon.nova-pro-v1:0", keys())
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 5 {
				resp, err := b.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage(fmt.Sprintf("Question %d.%d about ovens.", i, j))}}, nil)
				if err != nil {
					t.Errorf("call %d.%d: %v", i, j, err)
					return
				}
				if resp.Message.Content != "Ovens are hot, mind the door." {
					t.Errorf("call %d.%d: content = %q", i, j, resp.Message.Content)
				}
			}
		})
	}
	wg.Wait()
	if n := len(b.server.Requests()); n != 20 {
		t.Errorf("%d requests, want 20", n)
	}
}
