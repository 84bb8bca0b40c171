package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"strings"

	"modernc.org/quickjs"
)

// Module loading in the sandbox, for a skill's JavaScript. The files come
// with the program (ScriptProgram.Modules), as data: require() and import
// resolve only among them, by absolute path (/skills/<name>/...) or
// relative to the file that loads them (relative paths in the program's
// own code resolve in ScriptProgram.Root). There is no Node.js built-in
// module and no npm package: asking for one throws an error that says so.
//
// CommonJS files are wrapped in a function (exports, require, module,
// __filename, __dirname) as Node.js does; ES modules (.mjs, or a file with
// top-level import/export) go through the engine's module loader, and may
// be loaded with import() from any code.

// esmPattern spots a top-level import or export statement.
var esmPattern = regexp.MustCompile(`(?m)^(import\s*[\w{*"']|export\s+(default|const|let|var|function|async|class|\{|\*))`)

func isESM(p, text string) bool {
	return strings.HasSuffix(p, ".mjs") || (!strings.HasSuffix(p, ".cjs") && esmPattern.MatchString(text))
}

// resolveModule finds spec, asked for from the folder base, among files.
func resolveModule(files map[string]string, spec, base string) (string, error) {
	var p string
	switch {
	case strings.HasPrefix(spec, "/"):
		p = path.Clean(spec)
	case strings.HasPrefix(spec, "./") || strings.HasPrefix(spec, "../"):
		p = path.Join(base, spec)
	default:
		return "", fmt.Errorf("Cannot find module '%s': the sandbox has no Node.js built-in modules and no npm packages; only the skill's own files load (./relative or %s/<skill>/... paths)", spec, SkillMount)
	}
	for _, c := range []string{p, p + ".js", p + ".mjs", p + ".cjs", p + ".json", p + "/index.js"} {
		if _, ok := files[c]; ok {
			return c, nil
		}
	}
	return "", fmt.Errorf("Cannot find module '%s' (no %s among the skill's JavaScript files)", spec, p)
}

// modules prepares the engine for s.prog's files and returns the code to
// run: s.prog.Code, or the code that runs s.prog.Main.
func (s *sandbox) modules(ctx context.Context) (string, error) {
	files := s.prog.Modules
	if files == nil {
		files = map[string]string{}
	}
	root := s.prog.Root
	if root == "" {
		root = "/"
	}
	s.vm.SetModuleLoader(
		func(_ *quickjs.VM, name string) (string, error) {
			text, ok := files[name]
			if !ok {
				return "", fmt.Errorf("Cannot find module '%s'", name)
			}
			if strings.HasSuffix(name, ".json") {
				return "export default " + text + ";", nil
			}
			return stripShebang(text), nil
		},
		func(_ *quickjs.VM, baseName, name string) (string, error) {
			base := root
			if strings.HasPrefix(baseName, SkillMount+"/") {
				base = path.Dir(baseName)
			}
			return resolveModule(files, name, base)
		},
	)
	esm := map[string]bool{}
	for p, text := range files {
		esm[p] = isESM(p, text)
	}
	data, _ := json.Marshal(map[string]any{"files": files, "esm": esm, "root": root, "argv": s.prog.Argv, "main": s.prog.Main})
	if err := s.arm(ctx); err != nil {
		return "", err
	}
	// The engine's import() needs the name of the script that calls it,
	// which code run through eval has not: import() in the program and in
	// CommonJS files is rewritten to a function defined here, in a script
	// with a name, that resolves the path first.
	if _, err := s.vm.Eval(modulePrelude+"\n__pizza_modules("+string(data)+", (p) => import(p))", quickjs.EvalGlobal); err != nil {
		return "", fmt.Errorf("prepare the modules: %w", err)
	}
	if s.prog.Main == "" {
		return rewriteImport(s.prog.Code), nil
	}
	main, _ := json.Marshal(s.prog.Main)
	if esm[s.prog.Main] {
		return "__pizza_import(" + string(main) + ").then((ns) => ns.default)", nil
	}
	return "(() => { const e = require(" + string(main) + "); " +
		"return (e !== null && typeof e === 'object' && Object.getPrototypeOf(e) === Object.prototype && Object.keys(e).length === 0) ? undefined : e; })()", nil
}

// dynamicImport is a call of import() (not a static import statement).
var dynamicImport = regexp.MustCompile(`\bimport\s*\(`)

func rewriteImport(code string) string {
	return dynamicImport.ReplaceAllString(code, "__pizza_import(")
}

func stripShebang(text string) string {
	if strings.HasPrefix(text, "#!") {
		if i := strings.IndexByte(text, '\n'); i >= 0 {
			return "//" + text[i:] // keeps line numbers
		}
		return ""
	}
	return text
}

// modulePrelude defines __pizza_modules, which installs require (and
// process for a program run from a file) from the files given as data.
const modulePrelude = `(() => {
  "use strict";
  const fixed = (value) => ({ value, writable: false, enumerable: false, configurable: false });
  Object.defineProperty(globalThis, "__pizza_modules", { value: (cfg, engineImport) => {
    delete globalThis.__pizza_modules;
    const files = cfg.files, esm = cfg.esm, cache = new Map();
    const norm = (p) => {
      const out = [];
      for (const part of p.split("/")) {
        if (part === "" || part === ".") continue;
        if (part === "..") { out.pop(); continue; }
        out.push(part);
      }
      return "/" + out.join("/");
    };
    const dirOf = (p) => p.slice(0, p.lastIndexOf("/") + 1);
    const resolve = (spec, base) => {
      if (typeof spec !== "string") throw new TypeError("require(path): path must be a string");
      let p;
      if (spec.startsWith("/")) p = norm(spec);
      else if (spec.startsWith("./") || spec.startsWith("../")) p = norm(base + spec);
      else throw new Error("Cannot find module '" + spec + "': the sandbox has no Node.js built-in modules and no npm packages; only the skill's own files load (./relative or /skills/<skill>/... paths)");
      for (const c of [p, p + ".js", p + ".cjs", p + ".mjs", p + ".json", p + "/index.js"]) {
        if (Object.prototype.hasOwnProperty.call(files, c)) return c;
      }
      throw new Error("Cannot find module '" + spec + "' (no " + p + " among the skill's JavaScript files)");
    };
    const load = (file) => {
      const hit = cache.get(file);
      if (hit) return hit.exports;
      if (esm[file]) throw new Error(file + " is an ES module: load it with import(\"" + file + "\"), which returns a promise");
      let text = files[file];
      const module = { exports: {}, id: file, filename: file, loaded: false };
      cache.set(file, module);
      if (file.endsWith(".json")) { module.exports = JSON.parse(text); module.loaded = true; return module.exports; }
      if (text.startsWith("#!")) text = "//" + text.slice(2);
      text = text.replace(/\bimport\s*\(/g, "__pizza_import(");
      const fn = (0, eval)("(function (exports, require, module, __filename, __dirname, __pizza_import) {" + text + "\n})");
      fn.call(module.exports, module.exports, makeRequire(dirOf(file)), module, file, dirOf(file).slice(0, -1), makeImport(dirOf(file)));
      module.loaded = true;
      return module.exports;
    };
    const makeRequire = (base) => {
      const r = (spec) => load(resolve(spec, base));
      r.resolve = (spec) => resolve(spec, base);
      return Object.freeze(r);
    };
    const makeImport = (base) => (spec) => {
      try { return engineImport(resolve(spec, base)); } catch (e) { return Promise.reject(e); }
    };
    const root = cfg.root.endsWith("/") ? cfg.root : cfg.root + "/";
    Object.defineProperty(globalThis, "require", fixed(makeRequire(root)));
    Object.defineProperty(globalThis, "__pizza_import", fixed(makeImport(root)));
    if (cfg.main) {
      const argv = Object.freeze(["node", cfg.main, ...(cfg.argv || [])]);
      Object.defineProperty(globalThis, "process", fixed(Object.freeze({ argv, env: Object.freeze({}), platform: "sandbox" })));
    }
  }, writable: false, enumerable: false, configurable: true });
})();`
