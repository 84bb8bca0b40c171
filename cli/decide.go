package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"pizzabot/apiv1"
	"pizzabot/client"
)

// Decision types, as the API names them.
const (
	decApprove = "approve"
	decEdit    = "edit"
	decReject  = "reject"
	decRespond = "respond"
)

func runApprove(ctx context.Context, x *cmdEnv, args []string) error {
	x.flags()
	pos, err := x.parse(args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		return usagef("want a thread id and, when several calls wait, the call")
	}
	return x.decide(ctx, pos, decApprove, func(apiv1.Pending) (apiv1.DecisionInput, error) {
		return apiv1.DecisionInput{Type: decApprove}, nil
	})
}

func runReject(ctx context.Context, x *cmdEnv, args []string) error {
	fs := x.flags()
	var msg string
	fs.StringVar(&msg, "m", "", "why: a message passed to the model")
	pos, err := x.parse(args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		return usagef("want a thread id and, when several calls wait, the call")
	}
	return x.decide(ctx, pos, decReject, func(apiv1.Pending) (apiv1.DecisionInput, error) {
		return apiv1.DecisionInput{Type: decReject, Message: msg}, nil
	})
}

func runAnswer(ctx context.Context, x *cmdEnv, args []string) error {
	x.flags()
	pos, err := x.parse(args)
	if err != nil {
		return err
	}
	// answer ID TEXT, or answer ID CALL TEXT...: with three or more
	// arguments the second names the call.
	var text string
	switch {
	case len(pos) < 2:
		return usagef("want a thread id and the answer")
	case len(pos) == 2:
		text, pos = pos[1], pos[:1]
	default:
		text, pos = strings.Join(pos[2:], " "), pos[:2]
	}
	if strings.TrimSpace(text) == "" {
		return usagef("the answer is empty")
	}
	return x.decide(ctx, pos, decRespond, func(apiv1.Pending) (apiv1.DecisionInput, error) {
		return apiv1.DecisionInput{Type: decRespond, Message: text}, nil
	})
}

func runEdit(ctx context.Context, x *cmdEnv, args []string) error {
	fs := x.flags()
	var argsJSON string
	fs.StringVar(&argsJSON, "args", "", "the call's new arguments as a JSON object (default: edit them in $EDITOR)")
	pos, err := x.parse(args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		return usagef("want a thread id and the call")
	}
	if argsJSON != "" {
		if err := checkObject([]byte(argsJSON)); err != nil {
			return usagef("--args: %v", err)
		}
	}
	return x.decide(ctx, pos, decEdit, func(p apiv1.Pending) (apiv1.DecisionInput, error) {
		edited := []byte(argsJSON)
		if argsJSON == "" {
			var err error
			if edited, err = x.editInEditor(p); err != nil {
				return apiv1.DecisionInput{}, err
			}
		}
		return apiv1.DecisionInput{Type: decEdit, Arguments: edited}, nil
	})
}

// checkObject says what is wrong with arguments that are not a JSON object.
func checkObject(b []byte) error {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("not a JSON object: %v", err)
	}
	return nil
}

// editInEditor opens the call's arguments in $VISUAL or $EDITOR (vi when
// neither is set) and returns them as saved. Unchanged arguments are a
// refusal: nothing is decided.
func (x *cmdEnv) editInEditor(p apiv1.Pending) ([]byte, error) {
	editor := strings.TrimSpace(x.Getenv("VISUAL"))
	if editor == "" {
		editor = strings.TrimSpace(x.Getenv("EDITOR"))
	}
	if editor == "" {
		editor = "vi"
	}
	dir, err := os.MkdirTemp("", "pizza-edit-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, p.Tool+"-arguments.json")
	before := prettyJSON(p.Arguments) + "\n"
	if err := os.WriteFile(path, []byte(before), 0o600); err != nil {
		return nil, err
	}
	for {
		// Through the shell, as git runs $EDITOR: it may carry arguments
		// ("code --wait").
		cmd := exec.Command("/bin/sh", "-c", editor+` "$1"`, "editor", path)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("the editor (%s) failed: %v; nothing was decided", editor, err)
		}
		after, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		if bytes.Equal(bytes.TrimSpace(after), bytes.TrimSpace([]byte(before))) {
			return nil, errors.New("the arguments are unchanged: nothing was decided (approve runs the call as it is)")
		}
		if err := checkObject(after); err == nil {
			var buf bytes.Buffer
			_ = json.Compact(&buf, after)
			return buf.Bytes(), nil
		} else if f, ok := x.Stdin.(*os.File); !ok || !isTerminal(f) {
			return nil, fmt.Errorf("the edited arguments are %v; nothing was decided", err)
		} else {
			fmt.Fprintf(x.Stderr, "The edited arguments are %v. Press Enter to edit again, Ctrl-C to give up.", err)
			var line string
			fmt.Fscanln(x.Stdin, &line)
		}
	}
}

// decide takes one decision on the call pos names (pos[0] the thread,
// pos[1] the call, if any), built by build from the call.
func (x *cmdEnv) decide(ctx context.Context, pos []string, decision string, build func(apiv1.Pending) (apiv1.DecisionInput, error)) error {
	id, err := threadID(pos[0])
	if err != nil {
		return err
	}
	callArg := ""
	if len(pos) > 1 {
		callArg = pos[1]
	}
	c, err := x.client()
	if err != nil {
		return err
	}
	d, err := c.GetThread(ctx, id)
	if err != nil {
		return err
	}
	p, err := pickCall(d, callArg, decision)
	if err != nil {
		return err
	}
	in, err := build(p)
	if err != nil {
		return err
	}
	in.ID = p.ID
	if p.InnerCall != nil {
		// A script's call: say which one was read, so that a decision
		// never lands on a call the script reached since.
		seq := p.InnerCall.Seq
		in.InnerSeq = &seq
	}
	t, resumed, err := c.Decide(ctx, id, in)
	if err != nil {
		return err
	}
	if x.json {
		x.printJSON(t.Raw)
		return nil
	}
	what := map[string]string{decApprove: "Approved", decReject: "Rejected", decEdit: "Edited", decRespond: "Answered"}[decision]
	after := "the run goes on"
	if !resumed {
		after = "other calls still wait (pizza-bot show " + strconv.FormatInt(id, 10) + ")"
	}
	fmt.Fprintf(x.Stdout, "%s %s (call %d) in #%d: %s.\n", what, p.Tool, p.ID, id, after)
	return nil
}

// pickCall finds the waiting call a decision is for: the one named (by its
// id, its call id or its tool's name), or else the only one that takes
// the decision. It refuses, listing the calls, when that is not one call.
func pickCall(d client.ThreadDetail, name, decision string) (apiv1.Pending, error) {
	if len(d.Pending) == 0 {
		if d.Status == client.StatusWaiting {
			return apiv1.Pending{}, fmt.Errorf("#%d waits, but not for a decision on a call (%s): see the thread's page", d.ID, d.Summary)
		}
		return apiv1.Pending{}, fmt.Errorf("nothing waits for a decision in #%d (it is %s)", d.ID, d.Status)
	}
	var found []apiv1.Pending
	for _, p := range d.Pending {
		switch {
		case name == "":
			if p.Allows(decision) {
				found = append(found, p)
			}
		case name == strconv.FormatInt(p.ID, 10), name == p.CallID, name == p.Tool:
			found = append(found, p)
		}
	}
	switch {
	case len(found) == 1 && !found[0].Allows(decision):
		return apiv1.Pending{}, fmt.Errorf("call %d (%s) does not take %s: it allows %s", found[0].ID, found[0].Tool, decision, strings.Join(found[0].AllowedDecisions, ", "))
	case len(found) == 1:
		return found[0], nil
	case len(found) == 0 && name != "":
		return apiv1.Pending{}, fmt.Errorf("no waiting call %q in #%d; waiting:\n%s", name, d.ID, listCalls(d.Pending))
	case len(found) == 0:
		return apiv1.Pending{}, fmt.Errorf("no waiting call in #%d takes %s; waiting:\n%s", d.ID, decision, listCalls(d.Pending))
	}
	return apiv1.Pending{}, fmt.Errorf("%d calls wait in #%d: name one (its number):\n%s", len(found), d.ID, listCalls(found))
}

func listCalls(ps []apiv1.Pending) string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "  %d  %s  %s  (%s)  %s", p.ID, p.Tool, p.Kind, strings.Join(p.AllowedDecisions, ", "), compactJSON(p.Arguments))
	}
	return b.String()
}
