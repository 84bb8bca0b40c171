package agent

import (
	"encoding/json"
	"testing"
)

// params sends a user message with images as content parts (text, then one
// image_url part per image as a data: URL) and every other message as
// before.
func TestParamsImages(t *testing.T) {
	t.Parallel()
	c := &chatWire{provider: "compatible", model: "m"}
	p, err := c.params(Request{Messages: []Message{
		{Role: RoleUser, Content: "What is this?", Images: []Image{
			{MediaType: "image/png", Data: []byte("\x89PNG")},
			{MediaType: "image/jpeg", Data: []byte{0xff, 0xd8, 0xff}},
		}},
		{Role: RoleAssistant, Content: "A pizza."},
		{Role: RoleUser, Content: "Thanks"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Messages) != 3 {
		t.Fatalf("messages = %s", raw)
	}
	var parts []map[string]any
	if err := json.Unmarshal(got.Messages[0].Content, &parts); err != nil {
		t.Fatalf("first user message is not parts: %s", got.Messages[0].Content)
	}
	want := `[{"text":"What is this?","type":"text"},` +
		`{"image_url":{"url":"data:image/png;base64,iVBORw=="},"type":"image_url"},` +
		`{"image_url":{"url":"data:image/jpeg;base64,/9j/"},"type":"image_url"}]`
	if norm, _ := json.Marshal(parts); string(norm) != want {
		t.Errorf("parts = %s\nwant    %s", norm, want)
	}
	if s := string(got.Messages[2].Content); s != `"Thanks"` {
		t.Errorf("text-only user message = %s, want a plain string", s)
	}
	if s := string(got.Messages[1].Content); s != `"A pizza."` {
		t.Errorf("assistant message = %s", s)
	}

	// Images belong to user messages only.
	if err := checkRequest(Request{Messages: []Message{{Role: RoleAssistant, Content: "x", Images: []Image{{MediaType: "image/png", Data: []byte{1}}}}}}); err == nil {
		t.Error("an assistant message with images was accepted")
	}
}

func TestImagesRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want bool
	}{
		{&ProviderError{Status: 400, Message: "This model does not support image input."}, true},
		{&ProviderError{Status: 400, Message: "Model is not a VISION model"}, true},
		{&ProviderError{Status: 400, Message: "multimodal content is not supported"}, true},
		{&ProviderError{Status: 400, Message: "Invalid 'messages': empty array."}, false},
		{&ProviderError{Status: 500, Message: "image service down"}, false},
		{nil, false},
	}
	for _, tt := range tests {
		if got := ImagesRefused(tt.err); got != tt.want {
			t.Errorf("ImagesRefused(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
