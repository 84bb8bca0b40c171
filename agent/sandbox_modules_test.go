package agent_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"pizzabot/agent"
)

// A skill's JavaScript runs with its own files loadable, given as data, and
// nothing else loadable.
func TestRunProgramModules(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		"/skills/pdf/scripts/helper.js": "#!/usr/bin/env node\nconst { scale } = require('./lib/scale');\nconst cfg = require('../data/cfg.json');\n" +
			"console.log('args', process.argv.slice(2).join(','));\nmodule.exports = { total: scale(cfg.base) + Number(process.argv[2] || 0) };\n",
		"/skills/pdf/scripts/lib/scale.js": "exports.scale = (x) => x * 10;\n",
		"/skills/pdf/data/cfg.json":        `{"base": 4}`,
		"/skills/pdf/scripts/esm.mjs":      "import { twice } from './twice.mjs';\nexport default twice(21);\n",
		"/skills/pdf/scripts/twice.mjs":    "export const twice = (x) => x * 2;\n",
		"/skills/pdf/scripts/fs.js":        "require('fs');\n",
	}
	tests := []struct {
		name    string
		prog    agent.ScriptProgram
		want    string
		wantErr string
	}{
		{name: "commonjs main with argv", prog: agent.ScriptProgram{Main: "/skills/pdf/scripts/helper.js", Argv: []string{"2"}}, want: `"total": 42`},
		{name: "es module main", prog: agent.ScriptProgram{Main: "/skills/pdf/scripts/esm.mjs"}, want: "42"},
		{name: "code requires relative to the root", prog: agent.ScriptProgram{Code: "require('./scripts/lib/scale.js').scale(5)", Root: "/skills/pdf/"}, want: "50"},
		{name: "code imports", prog: agent.ScriptProgram{Code: "import('/skills/pdf/scripts/esm.mjs').then((m) => m.default + 1)", Root: "/skills/pdf/"}, want: "43"},
		{name: "no node modules", prog: agent.ScriptProgram{Main: "/skills/pdf/scripts/fs.js"}, wantErr: "no Node.js built-in modules"},
		{name: "nothing outside the files", prog: agent.ScriptProgram{Code: "require('/etc/passwd')", Root: "/skills/pdf/"}, wantErr: "Cannot find module '/etc/passwd'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := tt.prog
			p.Modules = files
			res, err := agent.RunProgram(context.Background(), p, agent.SandboxLimits{}, nil)
			if tt.wantErr != "" {
				var se *agent.ScriptError
				if !errors.As(err, &se) || !strings.Contains(se.Msg, tt.wantErr) {
					t.Fatalf("err = %v, want a script error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(res.Value, tt.want) {
				t.Errorf("value = %q, want %q in it (console %q)", res.Value, tt.want, res.Console)
			}
		})
	}
}
