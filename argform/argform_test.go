package argform

import (
	"net/url"
	"testing"
)

func TestFlatSchema(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		schema string
		want   bool
	}{
		{"flat", `{"type":"object","properties":{"a":{"type":"string","minLength":1},"b":{"type":"integer"},"c":{"type":"boolean"},"d":{"enum":["x",1,true]}},"required":["a"],"additionalProperties":false}`, true},
		{"no properties", `{"type":"object","properties":{}}`, false},
		{"no schema", ``, false},
		{"not an object", `{"type":"array","items":{"type":"string"}}`, false},
		{"nested object", `{"type":"object","properties":{"a":{"type":"object","properties":{}}}}`, false},
		{"array property", `{"type":"object","properties":{"a":{"type":"array","items":{"type":"string"}}}}`, false},
		{"type list", `{"type":"object","properties":{"a":{"type":["string","null"]}}}`, false},
		{"anyOf", `{"type":"object","properties":{"a":{"anyOf":[{"type":"string"},{"type":"number"}]}}}`, false},
		{"ref", `{"type":"object","properties":{"a":{"$ref":"#/$defs/x"}},"$defs":{"x":{"type":"string"}}}`, false},
		{"schema-valued additionalProperties", `{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":{"type":"string"}}`, false},
		{"untyped property", `{"type":"object","properties":{"a":{"description":"anything"}}}`, false},
		{"enum of objects", `{"type":"object","properties":{"a":{"enum":[{"x":1}]}}}`, false},
	}
	for _, tt := range tests {
		if _, got := Parse([]byte(tt.schema)); got != tt.want {
			t.Errorf("%s: flat = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestArgFields(t *testing.T) {
	t.Parallel()
	props, ok := Parse([]byte(`{"type":"object","properties":{
		"title":{"type":"string"},"n":{"type":"number"},"on":{"type":"boolean"},"mode":{"enum":["a","b",3]}},
		"required":["title"]}`))
	if !ok {
		t.Fatal("not flat")
	}
	tests := []struct {
		args string
		fit  bool
	}{
		{`{"title":"x","n":1.5,"on":true,"mode":3}`, true},
		{`{}`, true},
		{``, true},
		{`{"title":"x","extra":1}`, false}, // a key the form would lose
		{`{"title":1}`, false},             // a value of another type
		{`{"mode":"c"}`, false},            // not one of the choices
		{`[1]`, false},
		{`{"title":"x"`, false},
	}
	for _, tt := range tests {
		if _, got := props.Fields(tt.args); got != tt.fit {
			t.Errorf("argFields(%s) fits = %v, want %v", tt.args, got, tt.fit)
		}
	}
	fields, _ := props.Fields(`{"title":"x","n":1.50,"on":true,"mode":3}`)
	want := []struct {
		kind  Kind
		value string
	}{{Text, "x"}, {Number, "1.50"}, {Choice, "true"}, {Choice, "3"}}
	for i, w := range want {
		if fields[i].Kind != w.kind || fields[i].Value != w.value {
			t.Errorf("field %s = %s %q, want %s %q", fields[i].Name, fields[i].Kind, fields[i].Value, w.kind, w.value)
		}
	}
}

func TestArgsFromForm(t *testing.T) {
	t.Parallel()
	props, _ := Parse([]byte(`{"type":"object","properties":{
		"title":{"type":"string"},"note":{"type":"string"},"kept":{"type":"string"},
		"n":{"type":"integer"},"x":{"type":"number"},"on":{"type":"boolean"},"mode":{"enum":["a",3]}},
		"required":["title"]}`))
	form := url.Values{
		"arg.title": {"Hello"}, "arg.note": {""}, "arg.kept": {""}, "arg.n": {"12345678901234567890"},
		"arg.x": {"-2.5e3"}, "arg.on": {"false"}, "arg.mode": {"3"},
	}
	args, _, ok := props.FromForm(`{"title":"Hi","kept":"was set"}`, form)
	if !ok {
		t.Fatal("refused")
	}
	got := jsonText(args)
	// note was never set and stays unset; kept was, and is emptied.
	if want := `{"kept":"","mode":3,"n":12345678901234567890,"on":false,"title":"Hello","x":-2.5e3}`; got != want {
		t.Errorf("arguments = %s, want %s", got, want)
	}

	bad := url.Values{"arg.title": {""}, "arg.n": {"1.5"}, "arg.x": {"two"}, "arg.mode": {`"c"`}}
	_, fields, ok := props.FromForm(`{}`, bad)
	if ok {
		t.Fatal("accepted bad input")
	}
	errs := map[string]string{}
	for _, f := range fields {
		errs[f.Name] = f.Error
	}
	wantErrs := map[string]string{"n": "Enter a whole number.", "x": "Enter a number, like 3 or 2.5.", "mode": "Choose one of the listed values."}
	for k, w := range wantErrs {
		if errs[k] != w {
			t.Errorf("%s error = %q, want %q", k, errs[k], w)
		}
	}
	// A required string left empty is sent empty: the schema decides.
	if errs["title"] != "" {
		t.Errorf("title error = %q", errs["title"])
	}
}
