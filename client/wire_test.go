package client

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"pizzabot/apiv1"
)

// fill sets every field of v, recursively, to a value that is not zero,
// so that encoding it leaves out nothing, omitempty or not.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			v.SetBytes([]byte(`{"title":"Q3"}`))
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(7)
	case reflect.Float64:
		v.SetFloat(0.5)
	}
}

// Every field the server can send, those it sends only sometimes (a run_js
// call's inner_call, a routed call's waiting_for, a search's snippet)
// included, is one the client's answers read: a strict client refuses
// nothing. The round trip through a real server is
// handlers.TestAPIWireClientDecodesEveryField; this covers what a real run
// there does not reach.
func TestAnswersReadEveryField(t *testing.T) {
	t.Parallel()
	strict := &Client{strict: true}
	into := func(out any) func([]byte) error {
		return func(data []byte) error { return strict.decode(data, out) }
	}
	event := func(typ string) func([]byte) error {
		return func(data []byte) error { return strict.decodeEvent(&Event{Type: typ, Data: data}) }
	}
	for _, tt := range []struct {
		sent any // a pointer to the server's type
		read func([]byte) error
	}{
		{new(apiv1.Thread), into(new(Thread))},
		{new(apiv1.CreatedThread), into(new(CreatedThread))},
		{new(apiv1.ThreadDetail), into(new(ThreadDetail))},
		{new(apiv1.ThreadList), into(new(ThreadList))},
		{new(apiv1.UsageReport), into(new(UsageReport))},
		{new(apiv1.BulkDecisionsResult), into(new(BulkDecisions))},
		{new(apiv1.ThreadEvent), event(apiv1.EventThread)},
		{new(apiv1.DeltaEvent), event(apiv1.EventDelta)},
		{new(apiv1.PositionEvent), event(apiv1.EventReady)},
	} {
		fill(reflect.ValueOf(tt.sent).Elem())
		data, err := json.Marshal(tt.sent)
		if err != nil {
			t.Fatal(err)
		}
		if err := tt.read(data); err != nil {
			t.Errorf("the client does not read all of %T: %v\n%s", tt.sent, err, data)
		}
	}
}
