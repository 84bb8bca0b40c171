package jobs_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db"
	"pizzabot/handlers"
	"pizzabot/jobs"
	"pizzabot/tools"
	"pizzabot/tools/pdftest"
)

// A run reads an uploaded PDF through read_attachment, page by page; an
// encrypted PDF is a clear error; the thread page shows the page count.
func TestReadPDFAttachmentInARun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pdf := pdftest.Handmade([]string{"Renewal contract for the flour supplier", "Price: 42 per sack", "Signed on 1 March"}, false)
	var th db.Thread
	var contract, locked db.Attachment
	b := wsSetup(t, tools.Workspace{}, func(b *wsBundle) scriptmodel.Script {
		var err error
		if th, err = db.CreateThread(ctx, b.pool, db.NewThread{UserID: b.user.ID, Title: "contract", Model: "compatible:scripted"}); err != nil {
			t.Fatal(err)
		}
		if contract, err = db.Attach(ctx, b.pool, b.user.ID, th.ID, "contract.pdf", "application/pdf", bytes.NewReader(pdf)); err != nil {
			t.Fatal(err)
		}
		locked, err = db.Attach(ctx, b.pool, b.user.ID, th.ID, "locked.pdf", "", bytes.NewReader(pdftest.Handmade([]string{"secret"}, true)))
		if err != nil {
			t.Fatal(err)
		}
		if err := db.SetThreadStatus(ctx, b.pool, th.ID, db.StatusDone, ""); err != nil {
			t.Fatal(err)
		}
		return scriptmodel.Script{Rules: []scriptmodel.Rule{
			{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{ToolCalls: []scriptmodel.ScriptToolCall{
				{ID: "p1", Name: "read_attachment", Arguments: `{"id":` + itoa(contract.ID) + `}`},
				{ID: "p2", Name: "read_attachment", Arguments: `{"id":` + itoa(contract.ID) + `,"page":3}`},
				{ID: "p3", Name: "read_attachment", Arguments: `{"id":` + itoa(locked.ID) + `}`},
				{ID: "p4", Name: "read_attachment", Arguments: `{"id":` + itoa(contract.ID) + `,"page":4}`},
			}}}},
			{Match: scriptmodel.Match{LastToolResultContains: "Renewal contract"}, Replies: []scriptmodel.Reply{{Content: "The contract renews on 1 March."}}},
		}}
	})
	if err := b.rt.Reply(ctx, b.user, th.ID, "when does the contract renew?"); err != nil {
		t.Fatal(err)
	}
	b.wait(t, th.ID, db.StatusDone)
	res := b.toolResults(t, th.ID)
	if len(res) != 4 {
		t.Fatalf("results = %+v", res)
	}
	all := res[0].Content
	if res[0].IsError || !strings.Contains(all, "contract.pdf (PDF, ") || !strings.Contains(all, "3 pages") ||
		!strings.Contains(all, "--- page 1 ---\nRenewal contract for the flour supplier") ||
		!strings.Contains(all, "--- page 3 ---\nSigned on 1 March") {
		t.Errorf("whole PDF = %+v", res[0])
	}
	if last := res[1].Content; res[1].IsError || !strings.Contains(last, "pages 3 to 3") || strings.Contains(last, "Price") || !strings.Contains(last, "Signed on 1 March") {
		t.Errorf("page 3 = %+v", res[1])
	}
	if !res[2].IsError || !strings.Contains(res[2].Content, "locked.pdf is a PDF encrypted with a password") {
		t.Errorf("encrypted = %+v", res[2])
	}
	if !res[3].IsError || !strings.Contains(res[3].Content, "has 3 pages: there is no page 4") {
		t.Errorf("past the end = %+v", res[3])
	}

	// Reading counted the pages (it was attached without a count); the
	// thread page shows them.
	web := handlers.New(handlers.Deps{Pool: b.pool, Runs: b.rt, Authenticate: func(*http.Request) (db.User, error) { return b.user, nil }})
	rec := httptest.NewRecorder()
	web.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/threads/"+itoa(th.ID), nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `<span data-testid="attachment-pages">3 pages</span>`) {
		t.Errorf("thread page (%d) does not show the page count", rec.Code)
	}

	// A PDF uploaded with a prompt is counted as it is attached.
	started, err := b.rt.Start(ctx, b.user, jobs.StartRequest{Prompt: "read this", Files: []jobs.Upload{
		{Name: "upload.pdf", Body: bytes.NewReader(pdf)},
		{Name: "broken.pdf", Body: strings.NewReader("%PDF-1.7\nnot really")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	as, err := db.ListAttachments(ctx, b.pool, b.user.ID, started.ID)
	if err != nil || len(as) != 2 {
		t.Fatalf("attachments = %+v, %v", as, err)
	}
	if as[0].Pages == nil || *as[0].Pages != 3 || as[1].Pages != nil {
		t.Errorf("pages = %v, %v; want 3 and none", as[0].Pages, as[1].Pages)
	}
}
