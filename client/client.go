// Package client talks to a Pizza Bot server through its JSON API
// (/api/v1, docs/api.md): threads, decisions and the event stream. It is
// what the terminal client (package cli) is built on, and holds no
// terminal code itself.
//
// Every answer keeps the server's JSON as it came (Raw), so a caller can
// print exactly what the API said. A refusal is an *Error carrying the
// API's status and message.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"pizzabot/apiv1"
)

// Client is a connection to one server, as one user.
type Client struct {
	base   *url.URL
	token  string
	http   *http.Client
	strict bool
}

// Config builds a Client.
type Config struct {
	// URL is the server's address, e.g. http://127.0.0.1:8080.
	URL string
	// Token is a personal access token; empty sends no credentials (a
	// loopback server without sign-in needs none).
	Token string
	// HTTPClient defaults to one without an overall timeout (event
	// streams stay open), whose requests the context bounds.
	HTTPClient *http.Client
	// Strict refuses an answer that holds a field this client's types
	// lack, so that a test catches a server and client drifting apart.
	// Off, a newer server's additions are ignored, as a client must.
	Strict bool
}

// New returns a client for the server at cfg.URL.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(strings.TrimSpace(cfg.URL), "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server URL %q: want http://host:port or https://host", cfg.URL)
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{base: u, token: cfg.Token, http: hc, strict: cfg.Strict}, nil
}

// URL is the server's address.
func (c *Client) URL() string { return c.base.String() }

// PageURL makes a path of the web interface (a thread's "url") absolute.
func (c *Client) PageURL(path string) string {
	return c.base.String() + path
}

// Error is a refusal by the API: its status and its "error" message.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string { return e.Message }

// IsStatus reports whether err is an API refusal with this status.
func IsStatus(err error, status int) bool {
	var ae *Error
	return errors.As(err, &ae) && ae.Status == status
}

// The answers are decoded into the API's own types (package apiv1), which
// the server encodes: a field cannot be renamed on one side only. An
// answer a command may print as the server sent it embeds its apiv1 type
// beside Raw.

// Thread is a thread as listed, and the answer to a change.
type Thread struct {
	apiv1.Thread
	// Raw is the answer's JSON as the server sent it.
	Raw json.RawMessage `json:"-"`
}

// CreatedThread is a started thread, with the files attached to it.
type CreatedThread struct {
	apiv1.CreatedThread
	// Raw is the answer's JSON as the server sent it.
	Raw json.RawMessage `json:"-"`
}

// ThreadDetail is a thread with its conversation.
type ThreadDetail struct {
	apiv1.ThreadDetail
	// Raw is the answer's JSON as the server sent it.
	Raw json.RawMessage `json:"-"`
}

// ThreadList is a page of a listing.
type ThreadList struct {
	apiv1.ThreadList
	// Raw is the answer's JSON as the server sent it.
	Raw json.RawMessage `json:"-"`
}

// Run statuses, as the API names them.
const (
	StatusRunning   = "running"
	StatusWaiting   = "waiting"
	StatusDone      = "done"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
)

// Ended reports whether a status is the end of a run.
func Ended(status string) bool {
	return status == StatusDone || status == StatusFailed || status == StatusCancelled
}

// ListOptions narrow a listing; zero values are the API's defaults.
type ListOptions struct {
	Queue  string // all, unread, action
	Folder string // an id or a name
	Query  string // search
	Limit  int
	Cursor string
}

// ListThreads lists threads, newest activity first.
func (c *Client) ListThreads(ctx context.Context, o ListOptions) (ThreadList, error) {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("queue", o.Queue)
	set("folder", o.Folder)
	set("q", o.Query)
	set("cursor", o.Cursor)
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	var out ThreadList
	raw, err := c.do(ctx, http.MethodGet, "/api/v1/threads?"+q.Encode(), nil, "", &out)
	out.Raw = raw
	return out, err
}

// GetThread reads a thread with its conversation. It does not mark it read.
func (c *Client) GetThread(ctx context.Context, id int64) (ThreadDetail, error) {
	var out ThreadDetail
	raw, err := c.do(ctx, http.MethodGet, threadPath(id, ""), nil, "", &out)
	out.Raw = raw
	return out, err
}

// StartRequest starts a thread.
type StartRequest struct {
	Prompt string
	Skill  string
	Folder string
	// Files are paths of files to attach.
	Files []string
}

// StartThread starts a thread and returns it, its run queued.
func (c *Client) StartThread(ctx context.Context, r StartRequest) (CreatedThread, error) {
	var out CreatedThread
	req := apiv1.CreateThreadRequest{Prompt: r.Prompt, Skill: r.Skill, Folder: r.Folder}
	if len(r.Files) == 0 {
		body, _ := json.Marshal(req)
		raw, err := c.do(ctx, http.MethodPost, "/api/v1/threads", body, "application/json", &out)
		out.Raw = raw
		return out, err
	}
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, f := range []struct{ k, v string }{{"prompt", req.Prompt}, {"skill", req.Skill}, {"folder", req.Folder}} {
		if f.v != "" {
			_ = mw.WriteField(f.k, f.v)
		}
	}
	for _, path := range r.Files {
		f, err := os.Open(path)
		if err != nil {
			return CreatedThread{}, fmt.Errorf("attach: %w", err)
		}
		part, err := mw.CreateFormFile("files", filepath.Base(path))
		if err == nil {
			_, err = io.Copy(part, f)
		}
		f.Close()
		if err != nil {
			return CreatedThread{}, fmt.Errorf("attach %s: %w", path, err)
		}
	}
	if err := mw.Close(); err != nil {
		return CreatedThread{}, err
	}
	raw, err := c.do(ctx, http.MethodPost, "/api/v1/threads", buf.Bytes(), mw.FormDataContentType(), &out)
	out.Raw = raw
	return out, err
}

// Decide takes decisions on a thread's waiting calls. resumed reports
// whether the run went on (no call waits any more).
func (c *Client) Decide(ctx context.Context, id int64, ds ...apiv1.DecisionInput) (t Thread, resumed bool, err error) {
	body, _ := json.Marshal(apiv1.DecisionsRequest{Decisions: ds})
	status := 0
	raw, err := c.doStatus(ctx, http.MethodPost, threadPath(id, "/decisions"), body, "application/json", &t, &status)
	t.Raw = raw
	return t, status == http.StatusAccepted, err
}

// BulkDecisions is what a bulk decision did, call by call, in order.
type BulkDecisions struct {
	apiv1.BulkDecisionsResult
	// Raw is the answer's JSON as the server sent it.
	Raw json.RawMessage `json:"-"`
}

// DecideEach approves or rejects waiting calls of several threads together
// (POST /api/v1/decisions), each its own decision. A call it could not
// decide (decided meanwhile, not the user's to decide) is reported in its
// result, Error saying why, and the others are decided all the same; a
// request refused as a whole (no calls, too many, a decision other than
// approve or reject) is an *Error.
func (c *Client) DecideEach(ctx context.Context, ds ...apiv1.BulkDecisionInput) (BulkDecisions, error) {
	body, _ := json.Marshal(apiv1.BulkDecisionsRequest{Decisions: ds})
	var out BulkDecisions
	raw, err := c.do(ctx, http.MethodPost, "/api/v1/decisions", body, "application/json", &out)
	out.Raw = raw
	return out, err
}

// Reply continues a thread whose run has ended.
func (c *Client) Reply(ctx context.Context, id int64, text string) (Thread, error) {
	body, _ := json.Marshal(apiv1.ReplyRequest{Content: text})
	var t Thread
	raw, err := c.do(ctx, http.MethodPost, threadPath(id, "/messages"), body, "application/json", &t)
	t.Raw = raw
	return t, err
}

// UsageOptions choose a usage report; zero values are the API's defaults
// (by day, the last 30 days).
type UsageOptions struct {
	Group string // day, user, skill or model
	From  string // the first UTC day, YYYY-MM-DD
	To    string // the last UTC day, YYYY-MM-DD
}

// UsageReport is what the model calls cost in a range of days.
type UsageReport struct {
	apiv1.UsageReport
	// Raw is the answer's JSON as the server sent it.
	Raw json.RawMessage `json:"-"`
}

// Usage reports what the model calls cost, grouped as asked. Only an admin
// (a token with the admin scope of one) may read it: anyone else is
// refused with a 403.
func (c *Client) Usage(ctx context.Context, o UsageOptions) (UsageReport, error) {
	q := url.Values{}
	for k, v := range map[string]string{"group": o.Group, "from": o.From, "to": o.To} {
		if v != "" {
			q.Set(k, v)
		}
	}
	var out UsageReport
	raw, err := c.do(ctx, http.MethodGet, "/api/v1/usage?"+q.Encode(), nil, "", &out)
	out.Raw = raw
	return out, err
}

// Thread actions without parameters: POST /api/v1/threads/{id}/{action}.
const (
	ActionCancel    = "cancel"
	ActionRetry     = "retry"
	ActionRead      = "read"
	ActionUnread    = "unread"
	ActionArchive   = "archive"
	ActionUnarchive = "unarchive"
)

// Act applies one of the Action* changes to a thread.
func (c *Client) Act(ctx context.Context, id int64, action string) (Thread, error) {
	var t Thread
	raw, err := c.do(ctx, http.MethodPost, threadPath(id, "/"+action), nil, "", &t)
	t.Raw = raw
	return t, err
}

func threadPath(id int64, rest string) string {
	return "/api/v1/threads/" + strconv.FormatInt(id, 10) + rest
}

func (c *Client) do(ctx context.Context, method, path string, body []byte, contentType string, out any) (json.RawMessage, error) {
	return c.doStatus(ctx, method, path, body, contentType, out, nil)
}

// doStatus sends a request and decodes a 2xx answer into out; it returns
// the answer's JSON as it came.
func (c *Client) doStatus(ctx context.Context, method, path string, body []byte, contentType string, out any, status *int) (json.RawMessage, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := c.newRequest(ctx, method, path, rd)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.connError(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("read the answer of %s %s: %w", method, path, err)
	}
	if status != nil {
		*status = resp.StatusCode
	}
	if resp.StatusCode/100 != 2 {
		return data, apiError(resp, data)
	}
	if err := c.decode(data, out); err != nil {
		return data, fmt.Errorf("the server's answer to %s %s is not the JSON expected: %w", method, path, err)
	}
	return data, nil
}

// decode reads one JSON value into out; a strict client refuses fields out
// does not have.
func (c *Client) decode(data []byte, out any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if c.strict {
		dec.DisallowUnknownFields()
	}
	return dec.Decode(out)
}

func (c *Client) newRequest(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+path, body)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	} else {
		// A server without sign-in takes a change only from a request
		// that says it comes from the server's own origin (its pages, or a
		// client of its own, like this one): a browser on another site
		// cannot send that. With a token the token is the proof.
		req.Header.Set("Origin", c.base.Scheme+"://"+c.base.Host)
	}
	req.Header.Set("User-Agent", "pizza-bot-cli")
	return req, nil
}

// connError says the server could not be reached, without the request's
// details (the URL is the user's own; no credential is in it).
func (c *Client) connError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if errors.Is(ue.Err, context.Canceled) || errors.Is(ue.Err, context.DeadlineExceeded) {
			return ue.Err
		}
		err = ue.Err
	}
	return fmt.Errorf("cannot reach the server at %s: %w", c.base, err)
}

// apiError makes an *Error of a refusal: the API's message, or the status
// when the answer is not the API's JSON (a proxy's error page).
func apiError(resp *http.Response, data []byte) error {
	var body apiv1.Error
	msg := ""
	if json.Unmarshal(data, &body) == nil && body.Error != "" {
		msg = body.Error
		if body.RequestID != "" {
			msg += " (request " + body.RequestID + ")"
		}
	} else {
		msg = "the server answered " + resp.Status
	}
	return &Error{Status: resp.StatusCode, Message: msg}
}
