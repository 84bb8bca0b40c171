package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pizzabot/agent/scriptmodel"
	"pizzabot/db/dbtest"
	"pizzabot/internal/eventually"
	"pizzabot/tools/pdftest"
)

// TestFirstPDFAfterAFreshInstall starts a server whose cache holds no
// compiled PDFium (an empty XDG_CACHE_HOME, as on a fresh install) and, the
// moment it is ready, starts a run with a PDF through the API, with
// admission control as configured by default: the start is accepted, not
// refused as busy while PDFium compiles. The run's step then reads the PDF
// (waiting for PDFium if it must), and the compiled module lands in the
// cache, compiled at start rather than by the first request.
func TestFirstPDFAfterAFreshInstall(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	cache := t.TempDir()
	model := scriptmodel.New(scriptmodel.Script{Rules: []scriptmodel.Rule{
		{Match: scriptmodel.Match{LastRole: "user"}, Replies: []scriptmodel.Reply{{
			ToolCalls: []scriptmodel.ScriptToolCall{{ID: "r1", Name: "read_attachment", Arguments: `{"id": 1}`}}}}},
		{Match: scriptmodel.Match{LastRole: "tool"}, Replies: []scriptmodel.Reply{{Content: "Read it."}}},
	}})
	modelURL := scripted(t, model)
	addr := freeAddr(t)
	p := startServe(t, bin, "DATABASE_URL="+dbtest.NewURL(t), "PIZZA_ADDR="+addr, "PIZZA_DATA_ROOT="+dataRoot(t),
		"PIZZA_MODEL=compatible:scripted", "COMPATIBLE_BASE_URL="+modelURL+"/v1", "XDG_CACHE_HOME="+cache, "PIZZA_LOG_LEVEL=debug")
	waitReady(t, addr, p)

	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	if err := mw.WriteField("prompt", "Read the contract."); err != nil {
		t.Fatal(err)
	}
	fw, err := mw.CreateFormFile("files", "contract.pdf")
	if err != nil {
		t.Fatal(err)
	}
	fw.Write(pdftest.Handmade([]string{"First page of the fresh install"}, false))
	mw.Close()
	status, _, out := call(t, addr, http.MethodPost, "/api/v1/threads", mw.FormDataContentType(), body.String())
	if status != http.StatusCreated {
		t.Fatalf("the first PDF: %d %s\nserver:\n%s", status, out, p.out)
	}
	var created struct {
		ID          int64
		Attachments []struct{ ID int64 }
	}
	if err := json.Unmarshal(out, &created); err != nil {
		t.Fatal(err)
	}
	if len(created.Attachments) != 1 || created.Attachments[0].ID != 1 {
		t.Fatalf("attachments = %+v: the script reads attachment 1", created.Attachments)
	}

	var th apiThread
	eventually.Ok(t, 3*time.Minute, p.holds(fmt.Sprintf("thread %d never finished", created.ID), func() bool {
		_, _, b := call(t, addr, http.MethodGet, fmt.Sprintf("/api/v1/threads/%d", created.ID), "", "")
		th = apiThread{}
		return json.Unmarshal(b, &th) == nil && th.Status != "running"
	}))
	if th.Status != "done" || !threadHasTool(th, "First page of the fresh install") {
		t.Errorf("thread = %+v, want done with the PDF's text read", th)
	}
	compiled := 0
	filepath.WalkDir(filepath.Join(cache, "pizza-bot", "wazero"), func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			compiled++
		}
		return nil
	})
	if compiled == 0 || !strings.Contains(p.out.String(), "PDFium ready") {
		t.Errorf("%d files in the empty cache after the run, PDFium ready not logged:\n%s", compiled, p.out)
	}
}
