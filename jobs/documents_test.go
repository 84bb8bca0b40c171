package jobs_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"testing"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/tools/pdftest"
)

// A PDF attached to a thread on Claude reaches the model as a document
// block of the first user message, whole (base64, titled with its name);
// the same thread on a Chat Completions model gets no document part and
// reads the PDF through read_attachment instead.
func TestPDFAsDocumentForClaude(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pdf := pdftest.Handmade([]string{"Renewal contract for the flour supplier"}, false)
	for _, tt := range []struct {
		spec string
		want bool
	}{
		{"anthropic:claude-x", true},
		{"compatible:scripted", false},
	} {
		b := providerSetup(t, tt.spec, scriptmodel.Script{Default: &scriptmodel.Reply{Content: "It renews in March."}})
		th, err := db.CreateThread(ctx, b.Pool, db.NewThread{UserID: b.user.ID, Title: "contract", Model: tt.spec})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Attach(ctx, b.Pool, b.user.ID, th.ID, "contract.pdf", "application/pdf", bytes.NewReader(pdf)); err != nil {
			t.Fatal(err)
		}
		if err := db.SetThreadStatus(ctx, b.Pool, th.ID, db.StatusDone, ""); err != nil {
			t.Fatal(err)
		}
		if err := b.Reply(ctx, b.user, th.ID, "when does the contract renew?"); err != nil {
			t.Fatal(err)
		}
		b.wait(t, th.ID, db.StatusDone)
		req, ok := b.model.LastRequest()
		if !ok {
			t.Fatal("no model request")
		}
		var body struct {
			Messages []struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(req.Body, &body); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, m := range body.Messages {
			var blocks []struct {
				Type   string `json:"type"`
				Title  string `json:"title"`
				Source struct {
					Type, MediaType, Data string
				} `json:"source"`
			}
			if json.Unmarshal(m.Content, &blocks) != nil {
				continue
			}
			for _, bl := range blocks {
				if bl.Type != "document" {
					continue
				}
				found = true
				if m.Role != "user" || bl.Title != "contract.pdf" || bl.Source.Data != base64.StdEncoding.EncodeToString(pdf) {
					t.Errorf("%s: document block = role %s, title %q, %d bytes of data", tt.spec, m.Role, bl.Title, len(bl.Source.Data))
				}
			}
		}
		if found != tt.want {
			t.Errorf("%s: a document block was sent: %v, want %v\n%s", tt.spec, found, tt.want, req.Body)
		}
	}
}
