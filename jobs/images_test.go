package jobs_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"strings"
	"testing"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/jobs"
	"pizzabot/tools"
)

// tinyPNG is enough of a PNG for the content sniffer (and for the test).
var tinyPNG = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00")

// A run started with an image shows it to the model with the first user
// message, on every step; an image of a kind not shown (BMP) is not sent,
// and read_attachment says which is which.
func TestImagesShownToModel(t *testing.T) {
	t.Parallel()
	b := wsSetup(t, tools.Workspace{}, func(*wsBundle) scriptmodel.Script {
		return scriptmodel.Script{Rules: []scriptmodel.Rule{
			// A fresh database: the attachments are #1 and #2.
			{Match: scriptmodel.Match{LastRole: "user", HasImage: true}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
				{ID: "r1", Name: "read_attachment", Arguments: `{"id":1}`},
				{ID: "r2", Name: "read_attachment", Arguments: `{"id":2}`},
			}}}},
			{Match: scriptmodel.Match{LastRole: "tool", HasImage: true}, Replies: []scriptmodel.Reply{{Content: "A tomato pie."}}},
		}}
	})
	th, err := b.rt.Start(context.Background(), b.user, jobs.StartRequest{Prompt: "What pizza is this?", Files: []jobs.Upload{
		{Name: "pie.png", ContentType: "application/octet-stream", Body: bytes.NewReader(tinyPNG)},
		{Name: "scan.bmp", Body: strings.NewReader("BM" + strings.Repeat("\x00", 60))},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.wait(t, th.ID, db.StatusDone); got.Error != "" {
		t.Fatalf("run error %q", got.Error)
	}
	reqs := b.model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	want := "data:image/png;base64," + base64.StdEncoding.EncodeToString(tinyPNG)
	for i, req := range reqs {
		var firstUser *scriptmodel.RecordedMessage
		images := 0
		for j := range req.Messages {
			images += len(req.Messages[j].Images)
			if req.Messages[j].Role == "user" && firstUser == nil {
				firstUser = &req.Messages[j]
			}
		}
		if firstUser == nil || len(firstUser.Images) != 1 || firstUser.Images[0] != want || images != 1 {
			t.Fatalf("request %d: first user message %+v, %d images; want one image %q", i, firstUser, images, want)
		}
		if !strings.Contains(firstUser.Content, "What pizza is this?") || !strings.Contains(firstUser.Content, "Attached: pie.png (#1)") {
			t.Errorf("request %d: text part = %q", i, firstUser.Content)
		}
	}
	res := b.toolResults(t, th.ID)
	if len(res) != 2 {
		t.Fatalf("tool results = %+v", res)
	}
	if res[0].IsError || !strings.Contains(res[0].Content, "the image was shown to the model with the first message") {
		t.Errorf("png = %+v", res[0])
	}
	if !res[1].IsError || !strings.Contains(res[1].Content, "not shown to the model") {
		t.Errorf("bmp = %+v", res[1])
	}
}

// A model that refuses images still completes the run: the step is taken
// again without the image, and the model is told it cannot see it.
func TestImagesRefusedByModel(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{RejectImages: true, Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{SystemContains: "could not be shown to you"}, Replies: []scriptmodel.Reply{{Content: "I cannot see the picture."}}},
	}})
	th, err := b.rt.Start(context.Background(), b.user, jobs.StartRequest{Prompt: "What pizza is this?", Files: []jobs.Upload{
		{Name: "pie.png", Body: bytes.NewReader(tinyPNG)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.wait(t, th.ID, db.StatusDone); got.Error != "" {
		t.Fatalf("run error %q", got.Error)
	}
	if got := last(b.messages(t, th.ID)).Content; got != "I cannot see the picture." {
		t.Errorf("answer = %q", got)
	}
	reqs := b.model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2 (refused, then without images)", len(reqs))
	}
	if n := countImages(reqs[0]); n != 1 {
		t.Errorf("first request carries %d images, want 1", n)
	}
	if n := countImages(reqs[1]); n != 0 {
		t.Errorf("retry carries %d images, want 0", n)
	}
	if sys := reqs[1].Messages[0]; sys.Role != "system" || !strings.Contains(sys.Content, "1 image(s)") || !strings.Contains(sys.Content, "does not support image input") {
		t.Errorf("retry's system prompt = %q", sys.Content)
	}
}

// A text-only run sends its user message as plain text, as before images.
func TestTextOnlyRunSendsString(t *testing.T) {
	t.Parallel()
	b := setup(t, scriptmodel.Script{RejectImages: true})
	th := b.start(t, "Plain question", "")
	b.wait(t, th.ID, db.StatusDone)
	reqs := b.model.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d model requests, want 1", len(reqs))
	}
	if !bytes.Contains(reqs[0].Body, []byte(`"role":"user","content":"Plain question"`)) &&
		!bytes.Contains(reqs[0].Body, []byte(`"content":"Plain question","role":"user"`)) {
		t.Errorf("user message not sent as a string: %s", reqs[0].Body)
	}
}

func countImages(req scriptmodel.RecordedRequest) int {
	n := 0
	for _, m := range req.Messages {
		n += len(m.Images)
	}
	return n
}
