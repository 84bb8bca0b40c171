package agent_test

import (
	"context"
	"errors"
	"testing"

	"pizzabot/agent"
	"pizzabot/agent/scriptmodel"
)

// Images reach the provider as data: URLs on their message; a text-only
// model's refusal is recognised by ImagesRefused and is not retried.
func TestCompleteWithImages(t *testing.T) {
	t.Parallel()
	img := agent.Image{MediaType: "image/gif", Data: []byte("GIF89a")}
	req := agent.Request{Messages: []agent.Message{{Role: agent.RoleUser, Content: "Look", Images: []agent.Image{img}}}}

	b := setup(t, scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{HasImage: true}, Replies: []scriptmodel.Reply{{Content: "I see it."}}},
	}}, nil)
	resp, err := b.model.Complete(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "I see it." {
		t.Errorf("answer = %q", resp.Message.Content)
	}
	rec, _ := b.server.LastRequest()
	if m := rec.Messages[0]; m.Content != "Look" || len(m.Images) != 1 || m.Images[0] != "data:image/gif;base64,R0lGODlh" {
		t.Errorf("recorded message = %+v", m)
	}

	text := setup(t, scriptmodel.Script{RejectImages: true}, nil)
	_, err = text.model.Complete(context.Background(), req, nil)
	var pe *agent.ProviderError
	if !errors.As(err, &pe) || pe.Status != 400 || !agent.ImagesRefused(err) || pe.Attempts != 1 {
		t.Fatalf("err = %v, want a 400 refusing images, not retried", err)
	}
	if n := len(text.server.Requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
	// Without images the same model answers.
	if _, err := text.model.Complete(context.Background(), agent.Request{Messages: []agent.Message{agent.UserMessage("Look")}}, nil); err != nil {
		t.Errorf("text-only request: %v", err)
	}
}
