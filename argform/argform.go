// Package argform edits a tool call's arguments as a form: the fields a
// flat JSON schema describes (strings, numbers, integers, booleans and enums
// of those), filled from the call's arguments, and the arguments read back
// from the submitted form with an error on each field it refuses. A schema
// of any other shape is edited as JSON instead (Parse reports false).
package argform

import (
	"bytes"
	"encoding/json"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Kind is the input an argument is edited with.
type Kind string

// The kinds of argument inputs.
const (
	Text     Kind = "text"     // one line of text
	Textarea Kind = "textarea" // text of several lines
	Number   Kind = "number"   // any number
	Integer  Kind = "integer"  // a whole number
	Choice   Kind = "choice"   // one of Options (an enum, or true/false)
)

// Field is one argument of an edit form generated from a schema.
type Field struct {
	// Name is the property name; the form field is "arg." + Name.
	Name string
	// Description is the schema's description of the property.
	Description string
	Kind        Kind
	// Options are the choices of an Choice field.
	Options []Option
	// Required fields cannot be left empty.
	Required bool
	// Value is the field's text: the call's argument, or what the user
	// last submitted.
	Value string
	// Error is why Value was refused.
	Error string
}

// Option is one choice of an Choice field. Value is the JSON text of
// the choice ("\"draft\"", "3", "true"), Label what the user reads.
type Option struct {
	Value string
	Label string
}

// FieldName is the form field of an argument.
func (f Field) FieldName() string { return "arg." + f.Name }

// Schema is a flat object schema: its properties in the schema's order.
type Schema []prop

// prop is one property of a flat object schema.
type prop struct {
	name        string
	description string
	typ         string // string, number, integer, boolean; "" for an enum without a type
	enum        []any  // the allowed values; nil for any
	required    bool
}

// Keywords a flat schema may use: those that describe or constrain simple
// values. A schema with any other (anyOf, $ref, items, nested properties)
// is edited as JSON.
var (
	flatObjectKeys = keySet("type", "properties", "required", "additionalProperties",
		"description", "title", "$schema", "$id", "$comment")
	flatPropertyKeys = keySet("type", "description", "title", "enum", "const", "default", "examples",
		"minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
		"exclusiveMaximum", "multipleOf", "deprecated", "readOnly", "writeOnly", "$comment")
)

func keySet(keys ...string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}

// Parse reads a tool's parameter schema when it is an object whose
// properties are strings, numbers, integers, booleans or enums of those,
// in the schema's order. It reports false for any other schema.
func Parse(params json.RawMessage) (Schema, bool) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(params, &top); err != nil || top == nil {
		return nil, false
	}
	for k := range top {
		if !flatObjectKeys[k] {
			return nil, false
		}
	}
	if t, ok := top["type"]; ok && string(bytes.TrimSpace(t)) != `"object"` {
		return nil, false
	}
	if ap, ok := top["additionalProperties"]; ok {
		if s := string(bytes.TrimSpace(ap)); s != "false" && s != "true" {
			return nil, false
		}
	}
	var required []string
	if raw, ok := top["required"]; ok {
		if err := json.Unmarshal(raw, &required); err != nil {
			return nil, false
		}
	}
	names, raws, ok := orderedObject(top["properties"])
	if !ok || len(names) == 0 {
		return nil, false
	}
	props := make([]prop, 0, len(names))
	for i, name := range names {
		var p map[string]json.RawMessage
		if err := json.Unmarshal(raws[i], &p); err != nil || p == nil {
			return nil, false
		}
		for k := range p {
			if !flatPropertyKeys[k] {
				return nil, false
			}
		}
		ap := prop{name: name}
		for _, r := range required {
			ap.required = ap.required || r == name
		}
		if raw, ok := p["description"]; ok {
			_ = json.Unmarshal(raw, &ap.description)
		}
		if raw, ok := p["type"]; ok {
			if err := json.Unmarshal(raw, &ap.typ); err != nil {
				return nil, false // a list of types
			}
			switch ap.typ {
			case "string", "number", "integer", "boolean":
			default:
				return nil, false
			}
		}
		if raw, ok := p["enum"]; ok {
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.UseNumber()
			if err := dec.Decode(&ap.enum); err != nil || len(ap.enum) == 0 {
				return nil, false
			}
			for _, e := range ap.enum {
				switch e.(type) {
				case string, json.Number, bool:
				default:
					return nil, false
				}
			}
		} else if ap.typ == "" {
			return nil, false // any type at all
		}
		props = append(props, ap)
	}
	return Schema(props), true
}

// orderedObject splits a JSON object into its keys, in order, and values.
func orderedObject(raw json.RawMessage) ([]string, []json.RawMessage, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, nil, false
	}
	var names []string
	var values []json.RawMessage
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, nil, false
		}
		name, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, false
		}
		names = append(names, name)
		values = append(values, v)
	}
	return names, values, true
}

// decodeArgs parses a call's arguments as an object, numbers kept as written.
func decodeArgs(raw string) (map[string]any, bool) {
	if strings.TrimSpace(raw) == "" {
		return map[string]any{}, true
	}
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	var args map[string]any
	if err := dec.Decode(&args); err != nil || args == nil || dec.More() {
		return nil, false
	}
	return args, true
}

// Fields makes the edit form of a call's arguments. It reports false
// when the arguments do not fit the form (not an object, a key the schema
// does not name, a value of another type): they are then edited as JSON,
// so that nothing the model wrote is lost.
func (props Schema) Fields(raw string) ([]Field, bool) {
	args, ok := decodeArgs(raw)
	if !ok {
		return nil, false
	}
	known := map[string]bool{}
	for _, p := range props {
		known[p.name] = true
	}
	for k := range args {
		if !known[k] {
			return nil, false
		}
	}
	fields := make([]Field, 0, len(props))
	for _, p := range props {
		f := Field{Name: p.name, Description: p.description, Required: p.required, Kind: Text}
		val, has := args[p.name]
		switch {
		case p.enum != nil:
			f.Kind = Choice
			for _, e := range p.enum {
				f.Options = append(f.Options, choice(e))
			}
			if has {
				f.Value = jsonText(val)
				if !hasOption(f.Options, f.Value) {
					return nil, false
				}
			}
		case p.typ == "boolean":
			f.Kind = Choice
			f.Options = []Option{{Value: "true", Label: "true"}, {Value: "false", Label: "false"}}
			if has {
				b, ok := val.(bool)
				if !ok {
					return nil, false
				}
				f.Value = strconv.FormatBool(b)
			}
		case p.typ == "number" || p.typ == "integer":
			f.Kind = Number
			if p.typ == "integer" {
				f.Kind = Integer
			}
			if has {
				n, ok := val.(json.Number)
				if !ok {
					return nil, false
				}
				f.Value = n.String()
			}
		default:
			if has {
				s, ok := val.(string)
				if !ok {
					return nil, false
				}
				f.Value = s
			}
			if strings.Contains(f.Value, "\n") || utf8.RuneCountInString(f.Value) > 80 {
				f.Kind = Textarea
			}
		}
		fields = append(fields, f)
	}
	return fields, true
}

func choice(v any) Option {
	label := jsonText(v)
	if s, ok := v.(string); ok {
		label = s
	}
	return Option{Value: jsonText(v), Label: label}
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

func hasOption(opts []Option, v string) bool {
	for _, o := range opts {
		if o.Value == v {
			return true
		}
	}
	return false
}

var (
	numberRE  = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)
	integerRE = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)
)

// FromForm reads the schema form's fields back into arguments. An
// optional field left empty is left out, unless the call had it. It
// returns the fields as submitted, with an error on each it refuses, and
// false when it refused any.
func (props Schema) FromForm(original string, form url.Values) (map[string]any, []Field, bool) {
	orig, _ := decodeArgs(original)
	fields, fit := props.Fields(original)
	if !fit {
		// The call's arguments do not fit the form; start from an empty one.
		fields, _ = props.Fields("{}")
	}
	args := map[string]any{}
	ok := true
	for i, p := range props {
		f := &fields[i]
		raw := form.Get(f.FieldName())
		if f.Kind == Textarea {
			raw = strings.ReplaceAll(raw, "\r\n", "\n")
		}
		f.Value = raw
		_, had := orig[p.name]
		if raw == "" && (f.Kind != Text && f.Kind != Textarea || !p.required && !had) {
			if p.required {
				f.Error = "Fill this in."
				ok = false
			}
			continue
		}
		switch f.Kind {
		case Choice:
			if !hasOption(f.Options, raw) {
				f.Error = "Choose one of the listed values."
				ok = false
				continue
			}
			dec := json.NewDecoder(strings.NewReader(raw))
			dec.UseNumber()
			var v any
			_ = dec.Decode(&v)
			args[p.name] = v
		case Number:
			s := strings.TrimSpace(raw)
			if !numberRE.MatchString(s) {
				f.Error = "Enter a number, like 3 or 2.5."
				ok = false
				continue
			}
			args[p.name] = json.Number(s)
		case Integer:
			s := strings.TrimSpace(raw)
			if !integerRE.MatchString(s) {
				f.Error = "Enter a whole number."
				ok = false
				continue
			}
			args[p.name] = json.Number(s)
		default:
			args[p.name] = raw
		}
	}
	return args, fields, ok
}
