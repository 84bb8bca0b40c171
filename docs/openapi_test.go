package docs

import (
	"os/exec"
	"strings"
	"testing"
)

// openAPILinter is Redocly's linter, pinned (it runs on the Node.js of the
// CI machine).
const openAPILinter = "@redocly/cli@2.77.0"

// The OpenAPI document passes an OpenAPI 3.1 linter with neither errors
// nor warnings ("You have N warnings" otherwise). npx fetches the linter on first use, as the MCP tests
// fetch their servers; without npx the test says so and skips.
func TestOpenAPILint(t *testing.T) {
	t.Parallel()
	npx, err := exec.LookPath("npx")
	if err != nil {
		t.Skip("no npx on PATH (apt-get install npm): the OpenAPI document is not linted")
	}
	cmd := exec.Command(npx, "--yes", openAPILinter, "lint", "openapi.json")
	out, err := cmd.CombinedOutput()
	text := string(out)
	if err != nil || !strings.Contains(text, "Your API description is valid") || strings.Contains(text, "You have ") {
		t.Errorf("%s lint openapi.json: %v\n%s", openAPILinter, err, text)
	}
}
