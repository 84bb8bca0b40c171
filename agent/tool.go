package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// ToolSpec is what the model is told about a tool.
type ToolSpec struct {
	// Name is the tool's name, e.g. "write_file" or "mcp__github__create_issue".
	Name string `json:"name"`
	// Description tells the model what the tool does and when to use it.
	Description string `json:"description"`
	// Parameters is a JSON Schema object describing the arguments. Empty
	// means the tool takes no arguments (any JSON object is accepted).
	Parameters json.RawMessage `json:"parameters,omitempty"`
}

// ValidateArguments parses the raw arguments of a tool call and validates
// them against s.Parameters. The error text is written for the model, which
// gets it back as the tool result so that it can correct the call, e.g.
//
//	arguments are not valid JSON: unexpected end of JSON input
//	arguments do not match the schema: at /title: got number, want string
//
// Empty arguments count as {}. Numbers in the returned map are json.Number,
// so large integers survive a round trip.
func (s ToolSpec) ValidateArguments(raw string) (map[string]any, error) {
	args, err := parseArguments(raw)
	if err != nil {
		return nil, err
	}
	schema, err := s.compiled()
	if err != nil {
		return nil, fmt.Errorf("cannot check the arguments: the parameter schema of tool %q is invalid (this is not your mistake): %w", s.Name, err)
	}
	if schema == nil {
		return args, nil
	}
	if err := schema.Validate(map[string]any(args)); err != nil {
		return nil, schemaError(err)
	}
	return args, nil
}

// CheckSchema reports whether s.Parameters is a usable JSON Schema. Call it
// when a tool is registered: a tool with a broken schema cannot be called.
func (s ToolSpec) CheckSchema() error {
	_, err := s.compiled()
	if err != nil {
		return fmt.Errorf("tool %q: parameters: %w", s.Name, err)
	}
	return nil
}

// parseArguments decodes raw as one JSON object, numbers kept as json.Number.
func parseArguments(raw string) (map[string]any, error) {
	if strings.TrimSpace(raw) == "" {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, errors.New("arguments are not valid JSON: unexpected end of JSON input (the text stops before the object is closed)")
		}
		return nil, fmt.Errorf("arguments are not valid JSON: %s", jsonErrorText(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("arguments are not valid JSON: unexpected text after the JSON object")
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("arguments must be a JSON object, got %s", jsonKind(v))
	}
	return obj, nil
}

func jsonErrorText(err error) string {
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return fmt.Sprintf("%s (at byte %d)", syn.Error(), syn.Offset)
	}
	return err.Error()
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// schemaError turns a validation error into one line per failed keyword.
func schemaError(err error) error {
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return fmt.Errorf("arguments do not match the schema: %v", err)
	}
	var parts []string
	for _, unit := range verr.BasicOutput().Errors {
		if unit.Error == nil {
			continue
		}
		loc := unit.InstanceLocation
		if loc == "" {
			loc = "(root)"
		}
		parts = append(parts, fmt.Sprintf("at %s: %s", loc, unit.Error.String()))
	}
	if len(parts) == 0 {
		return errors.New("arguments do not match the schema")
	}
	return errors.New("arguments do not match the schema: " + strings.Join(parts, "; "))
}

// schemaCache holds compiled parameter schemas keyed by their JSON text, so a
// tool offered on every step is compiled once per process.
var schemaCache = struct {
	sync.Mutex
	m map[string]compiledSchema
}{m: map[string]compiledSchema{}}

// maxCachedSchemas bounds the cache; when full it starts over.
const maxCachedSchemas = 4096

type compiledSchema struct {
	schema *jsonschema.Schema
	err    error
}

// schemaURL names the in-memory schema resource; it is never fetched.
const schemaURL = "mem:///tool-parameters.json"

func (s ToolSpec) compiled() (*jsonschema.Schema, error) {
	raw := bytes.TrimSpace(s.Parameters)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	key := string(raw)
	schemaCache.Lock()
	c, ok := schemaCache.m[key]
	schemaCache.Unlock()
	if ok {
		return c.schema, c.err
	}
	c.schema, c.err = compileSchema(raw)
	schemaCache.Lock()
	if len(schemaCache.m) >= maxCachedSchemas {
		clear(schemaCache.m)
	}
	schemaCache.m[key] = c
	schemaCache.Unlock()
	return c.schema, c.err
}

func compileSchema(raw []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	if _, ok := doc.(map[string]any); !ok {
		return nil, errors.New("not a JSON Schema object")
	}
	c := jsonschema.NewCompiler()
	// No loaders: a tool's schema (from an MCP server, say) must not make us
	// read local files or fetch URLs through "$ref".
	c.UseLoader(jsonschema.SchemeURLLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, err
	}
	sch, err := c.Compile(schemaURL)
	if err != nil {
		return nil, err
	}
	return sch, nil
}
