package handlers_test

import (
	"archive/zip"
	"bytes"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"pizzabot/agent"
)

// zipOf zips files (path -> content).
func zipOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for p, text := range files {
		w, err := zw.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write([]byte(text))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A zip of a skill folder shaped like the public ones installs through
// settings with its files; the page shows its warnings and files; editing
// SKILL.md warns before saving and keeps the files.
func TestSettingsInstallSkillFolder(t *testing.T) {
	t.Parallel()
	b := authSetup(t, authOptions{adminEmails: []string{"ada@example.com"}})
	admin := b.signIn(adminIdP)
	skillMD := "---\nname: internal-comms\ndescription: " + strings.Repeat("Writes internal communications. ", 40) +
		"\nlicense: Complete terms in LICENSE.txt\n---\n# Comms\n\nRead examples/3p-updates.md first.\n"
	archive := zipOf(t, map[string]string{
		"internal-comms/SKILL.md":               skillMD,
		"internal-comms/examples/3p-updates.md": "Progress, Plans, Problems.",
		"internal-comms/scripts/count.js":       "module.exports = 1;",
		"internal-comms/scripts/fill.py":        "print(1)",
		"__MACOSX/._SKILL.md":                   "junk",
	})
	install := func(data []byte) (*http.Response, string) {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		fw, _ := mw.CreateFormFile("archive", "internal-comms.zip")
		_, _ = fw.Write(data)
		_ = mw.Close()
		req, _ := http.NewRequest("POST", b.srv.URL+"/settings/skills/install", &buf)
		req.Header.Set("Content-Type", mw.FormDataContentType())
		req.Header.Set("Origin", b.srv.URL)
		resp, err := admin.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body bytes.Buffer
		_, _ = body.ReadFrom(resp.Body)
		return resp, body.String()
	}
	if resp, body := install(archive); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("install = %d: %s", resp.StatusCode, body)
	}
	s, ok := b.runs.Skills().Get("internal-comms")
	if !ok {
		t.Fatal("the installed skill is not loaded")
	}
	if text, err := agent.ReadSkillFile(s, "examples/3p-updates.md"); err != nil || text != "Progress, Plans, Problems." {
		t.Errorf("examples/3p-updates.md as runs see it = %q, %v", text, err)
	}
	_, page := b.do(admin, "GET", "/settings", nil, nil)
	if !strings.Contains(page, `data-testid="skill-warning"`) || !strings.Contains(page, "more than the format&#39;s 1024") {
		t.Error("the settings page does not show the long description's warning")
	}
	if !strings.Contains(page, "skills installed") {
		t.Error("the install is not in the audit log")
	}

	// The same name again needs replace; a broken archive installs nothing.
	if resp, body := install(archive); resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "exists already") {
		t.Errorf("a second install = %d", resp.StatusCode)
	}
	bad := zipOf(t, map[string]string{"a/SKILL.md": "---\nname: b\ndescription: d\n---\n", "c/SKILL.md": "---\nname: c\ndescription: d\n---\n"})
	if resp, body := install(bad); resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, `must match the folder name`) {
		t.Errorf("a mismatched name = %d", resp.StatusCode)
	}
	if _, ok := b.runs.Skills().Get("c"); ok {
		t.Error("half of a refused archive was installed")
	}
	evil := zipOf(t, map[string]string{"../evil/SKILL.md": "---\nname: evil\ndescription: d\n---\n"})
	if resp, body := install(evil); resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "unsafe path") {
		t.Errorf("an escaping archive = %d", resp.StatusCode)
	}

	// The skill's page lists its files and says the Python one does not run.
	_, edit := b.do(admin, "GET", "/settings/skills/internal-comms/edit", nil, nil)
	for _, want := range []string{`data-path="examples/3p-updates.md"`, `data-path="scripts/count.js"`, "does not run", "Python script", "/skills/internal-comms/"} {
		if !strings.Contains(edit, want) {
			t.Errorf("the skill page lacks %q", want)
		}
	}

	// Editing SKILL.md: the soft rules are shown first, saving anyway
	// writes it, and the other files stay.
	edited := strings.Replace(skillMD, "Read examples", "Always read examples", 1)
	form := url.Values{"name": {"internal-comms"}, "content": {edited}}
	resp, body := b.post(admin, "/settings/skills", form)
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "skill-save-anyway") {
		t.Fatalf("a save with warnings = %d, want the warnings first", resp.StatusCode)
	}
	form.Set("accept_warnings", "1")
	if resp, body := b.post(admin, "/settings/skills", form); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("save anyway = %d: %s", resp.StatusCode, body)
	}
	s, _ = b.runs.Skills().Get("internal-comms")
	if data, _ := fs.ReadFile(s.Files, "SKILL.md"); string(data) != edited {
		t.Error("SKILL.md was not saved")
	}
	if text, err := agent.ReadSkillFile(s, "examples/3p-updates.md"); err != nil || text != "Progress, Plans, Problems." {
		t.Errorf("saving SKILL.md lost the other files: %q, %v", text, err)
	}
}
