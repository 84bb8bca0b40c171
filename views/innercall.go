package views

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// InnerArg is one argument of the inner call a run_js approval applies to,
// as the approval view shows it: whole, folded when long, never cut.
type InnerArg struct {
	Name string
	// Value is the argument's whole value: a string as it is, anything
	// else as indented JSON.
	Value string
	// Long values fold into a <details> whose Summary says what is inside.
	Long    bool
	Summary string
}

// innerLong is where a value starts to fold: past it, or past a few lines,
// a value would push the others out of sight.
const innerLong = 200

// innerArgs splits an inner call's arguments (a JSON object) into its
// arguments, the short ones first in the script's order, then the long
// ones, so that a long value never pushes a short one (a path) out of view.
// Arguments that are not an object are shown as one value.
func innerArgs(raw string) []InnerArg {
	var short, long []InnerArg
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return []InnerArg{innerArg("(arguments)", raw)}
	}
	for dec.More() {
		tok, err := dec.Token()
		name, ok := tok.(string)
		var value json.RawMessage
		if err == nil && ok {
			err = dec.Decode(&value)
		}
		if err != nil || !ok {
			return []InnerArg{innerArg("(arguments)", raw)}
		}
		var s string
		text := prettyJSON(string(value))
		if json.Unmarshal(value, &s) == nil {
			text = s
		}
		a := innerArg(name, text)
		if a.Long {
			long = append(long, a)
		} else {
			short = append(short, a)
		}
	}
	return append(short, long...)
}

func innerArg(name, value string) InnerArg {
	a := InnerArg{Name: name, Value: value}
	lines := strings.Count(value, "\n") + 1
	if len(value) > innerLong || lines > 6 {
		a.Long = true
		a.Summary = fmt.Sprintf("%s characters, %s: show all", thousands(int64(utf8.RuneCountInString(value))), plural(int64(lines), "line"))
	}
	return a
}
