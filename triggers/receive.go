package triggers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"pizzabot/agent"
	"pizzabot/db"
	"pizzabot/jobs"
	"pizzabot/refusal"
)

// Kind says how a delivery ended: how it was taken, or why it was refused.
// The handler answers each kind with an HTTP status (Config.Status), which
// the delivery log records for the webhook's owner.
type Kind string

// How a delivery ends.
const (
	Accepted  Kind = "accepted"  // a run started
	Duplicate Kind = "duplicate" // a redelivery: answered with the first run
	Ping      Kind = "ping"      // GitHub's hello when a webhook is added: nothing to run

	NotFound        Kind = "not_found"        // no webhook at this URL, or its skill is gone
	WrongMethod     Kind = "wrong_method"     // not a POST
	RateLimited     Kind = "rate_limited"     // Call.Admit refused the owner's delivery
	TooLarge        Kind = "too_large"        // a body over MaxBody
	BadSignature    Kind = "bad_signature"    // the signature or its timestamp does not check out
	Malformed       Kind = "malformed"        // a body that is not what its type says, a bad delivery id
	UnsupportedBody Kind = "unsupported_body" // a Content-Type we do not take
	OwnerDisabled   Kind = "owner_disabled"   // the owner's account is disabled
	RunRefused      Kind = "run_refused"      // the runtime refused the run (Refusal.Err says why)
)

// Refusal is a delivery refused. A refusal of a known webhook is recorded
// among its deliveries, with a reason that may say more than Reason (which
// the sender reads).
type Refusal struct {
	Kind   Kind
	Reason string
	// Status is the HTTP status the delivery is answered with, as
	// Config.Status chose it.
	Status int
	// Err is the runtime's refusal of a RunRefused.
	Err error
}

func (r *Refusal) Error() string { return r.Reason }

// Unwrap returns the runtime's refusal, if any.
func (r *Refusal) Unwrap() error { return r.Err }

// Result is a delivery taken.
type Result struct {
	Kind   Kind // Accepted, Duplicate or Ping
	Status int  // as Config.Status chose it
	// ThreadID is the run started, or for a Duplicate the first
	// delivery's run (nil when that thread is deleted); nil for a Ping.
	ThreadID *int64
}

// Starter starts a run in the caller's transaction: jobs.Runtime.StartTx.
type Starter interface {
	StartTx(ctx context.Context, tx pgx.Tx, user db.User, req jobs.StartRequest) (db.Thread, error)
}

// Config is what a Receiver needs.
type Config struct {
	Pool *pgxpool.Pool
	Runs Starter
	// Skills returns the skills available now.
	Skills func() agent.SkillSet
	Logger *slog.Logger
	// Now is the clock signatures' timestamps are checked against; nil is
	// time.Now.
	Now func() time.Time
	// Status is the HTTP status a delivery of that kind is answered with;
	// err is the runtime's refusal of a RunRefused, nil otherwise. The
	// handler chooses, the receiver records it. Required.
	Status func(k Kind, err error) int
}

// Receiver takes deliveries to webhooks: it finds the webhook of a token,
// verifies the delivery, and starts its run once per delivery id.
type Receiver struct {
	cfg Config
}

// NewReceiver returns a receiver of webhook deliveries.
func NewReceiver(cfg Config) *Receiver {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Receiver{cfg: cfg}
}

// Call is one request to a webhook's URL.
type Call struct {
	// Skill and Token are the URL's.
	Skill, Token string
	Method       string
	Header       http.Header
	// Body is read once the webhook is known and admitted. The handler
	// bounds it (http.MaxBytesReader with MaxBody); a longer body is
	// refused as TooLarge.
	Body io.Reader
	// Admit spends one of the owner's deliveries (the handler's rate
	// limit); nil admits all. Its error is recorded as RateLimited and
	// returned as it is.
	Admit func(userID int64) error
	// RequestID names the request in the log.
	RequestID string
}

// noWebhook answers a URL that names no webhook: an unknown token and a
// token of another skill look the same to the caller.
const noWebhook = "there is no webhook at this URL"

// Receive takes one delivery. It returns a Result when the delivery was
// taken, a *Refusal when it was refused (recorded among the deliveries of
// a known webhook, and logged), the error of Call.Admit, or another error
// for a failure of ours.
func (rc *Receiver) Receive(ctx context.Context, c Call) (Result, error) {
	d := &delivery{rc: rc, ctx: ctx, call: c}
	if len(c.Token) == tokenLen && strings.HasPrefix(c.Token, TokenPrefix) {
		wh, err := db.WebhookByToken(ctx, rc.cfg.Pool, hashToken(c.Token))
		switch {
		case err == nil:
			d.wh, d.found = wh, true
		case !errors.Is(err, db.ErrNotFound):
			return Result{}, err
		}
	}
	d.rec = db.Delivery{WebhookID: d.wh.ID, UserID: d.wh.UserID, ContentType: c.Header.Get("Content-Type")}
	if len(d.rec.ContentType) > 200 {
		d.rec.ContentType = d.rec.ContentType[:200]
	}

	if c.Method != http.MethodPost {
		return d.reject(WrongMethod, "use POST, not "+c.Method)
	}
	if !d.found {
		return Result{}, rc.refusal(NotFound, noWebhook, nil)
	}
	if d.wh.Skill != c.Skill {
		// The owner sees which skill the URL named among the deliveries.
		if _, err := d.reject(NotFound, fmt.Sprintf("the URL names the skill %q, but this token is for %q", c.Skill, d.wh.Skill)); !isKind(err, NotFound) {
			return Result{}, err
		}
		return Result{}, rc.refusal(NotFound, noWebhook, nil)
	}
	if _, ok := rc.cfg.Skills().Get(c.Skill); !ok {
		return d.reject(NotFound, "the skill "+c.Skill+" no longer exists")
	}
	if c.Admit != nil {
		if err := c.Admit(d.wh.UserID); err != nil {
			// Recorded like any refusal, so the owner sees why; the sender
			// retries when Admit's error says.
			if _, rerr := d.reject(RateLimited, "rate limit of the owner's webhook deliveries"); !isKind(rerr, RateLimited) {
				return Result{}, rerr
			}
			return Result{}, err
		}
	}
	body, err := d.read()
	if err != nil {
		return Result{}, err
	}
	return d.take(body)
}

// refusal makes the refusal of a kind, with its status.
func (rc *Receiver) refusal(k Kind, reason string, err error) *Refusal {
	return &Refusal{Kind: k, Reason: reason, Status: rc.cfg.Status(k, err), Err: err}
}

func isKind(err error, k Kind) bool {
	var r *Refusal
	return errors.As(err, &r) && r.Kind == k
}

// delivery is one delivery being received.
type delivery struct {
	rc    *Receiver
	ctx   context.Context
	call  Call
	wh    db.Webhook
	found bool // wh is the token's webhook
	rec   db.Delivery
}

// reject records a refused delivery of a known webhook, logs it, and
// returns the refusal.
func (d *delivery) reject(k Kind, reason string) (Result, error) {
	return d.rejectErr(k, reason, nil)
}

func (d *delivery) rejectErr(k Kind, reason string, cause error) (Result, error) {
	r := d.rc.refusal(k, reason, cause)
	if d.found {
		d.rec.Outcome, d.rec.Status, d.rec.Reason = db.DeliveryRejected, r.Status, reason
		if _, err := db.RecordDelivery(context.WithoutCancel(d.ctx), d.rc.cfg.Pool, d.rec); err != nil {
			return Result{}, err
		}
		d.rc.cfg.Logger.InfoContext(d.ctx, "webhook delivery rejected", "request_id", d.call.RequestID,
			"webhook_id", d.wh.ID, "user_id", d.wh.UserID, "status", r.Status, "reason", reason)
	}
	return Result{}, r
}

// read reads the body, up to MaxBody.
func (d *delivery) read() ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(d.call.Body, MaxBody+1))
	d.rec.BodyBytes = len(body)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) || len(body) > MaxBody {
		_, err := d.reject(TooLarge, fmt.Sprintf("the body is larger than %d KB", MaxBody>>10))
		return nil, err
	}
	if err != nil {
		return nil, err // the client went away mid-body
	}
	return body, nil
}

// take verifies a delivery's body and headers and starts its run.
func (d *delivery) take(body []byte) (Result, error) {
	ctx, hdr, wh := d.ctx, d.call.Header, d.wh
	if err := d.verify(body); err != nil {
		return Result{}, err
	}
	isJSON, refused := hookBody(hdr.Get("Content-Type"), body)
	if refused != nil {
		return d.reject(refused.Kind, refused.Reason)
	}
	var err error
	if d.rec.DeliveryID, err = deliveryID(hdr); err != nil {
		return d.reject(Malformed, err.Error())
	}
	user, err := db.GetUser(ctx, d.rc.cfg.Pool, wh.UserID)
	if err != nil {
		return Result{}, err
	}
	if user.Disabled {
		return d.reject(OwnerDisabled, "the owner's account is disabled")
	}
	if hdr.Get("X-GitHub-Event") == "ping" {
		return d.ping()
	}

	skill := d.call.Skill
	title := skill + " webhook"
	if ev := hdr.Get("X-GitHub-Event"); ev != "" {
		title += ": " + ev
	}
	req := jobs.StartRequest{
		Prompt: hookPrompt(skill, hdr, d.rec.DeliveryID, isJSON, body), Skill: skill, Title: title,
		TriggerKind: db.TriggerWebhook, TriggerAt: d.rc.cfg.Now(), TriggerRef: d.rec.DeliveryID,
	}
	if len(body) > 0 {
		// Also kept as a file of the thread, for the agent to read again
		// (read_attachment) and the owner to download as sent.
		name := "webhook-body.txt"
		if isJSON {
			name = "webhook-body.json"
		}
		req.Files = []jobs.Upload{{Name: name, ContentType: hdr.Get("Content-Type"), Body: bytes.NewReader(body)}}
	}
	return d.start(user, req)
}

// verify checks the delivery's signature, when its webhook has a scheme.
func (d *delivery) verify(body []byte) error {
	wh := d.wh
	if wh.Signature == db.SignatureNone {
		return nil
	}
	box, err := secretBox(d.call.Token)
	if err != nil {
		return err
	}
	secret, err := box.Open(wh.SecretSealed, secretPurpose(wh.UserID, wh.Skill))
	if err != nil {
		return fmt.Errorf("open secret of webhook %d: %w", wh.ID, err)
	}
	var verr error
	if wh.Signature == db.SignatureStandard {
		verr = verifyStandardWebhook(string(secret), d.call.Header, body, d.rc.cfg.Now())
	} else {
		verr = verifyGitHubWebhook(string(secret), d.call.Header, body)
	}
	if verr != nil {
		_, err := d.reject(BadSignature, verr.Error())
		return err
	}
	return nil
}

// ping records GitHub's hello; a redelivered one is not recorded twice.
func (d *delivery) ping() (Result, error) {
	res := Result{Kind: Ping, Status: d.rc.cfg.Status(Ping, nil)}
	d.rec.Status, d.rec.Reason = res.Status, "GitHub ping: no run started"
	err := db.InTx(d.ctx, d.rc.cfg.Pool, func(ctx context.Context, tx pgx.Tx) error {
		_, err := db.ClaimDelivery(ctx, tx, d.rec)
		if errors.Is(err, db.ErrDuplicateDelivery) {
			return nil
		}
		return err
	})
	if err != nil {
		return Result{}, err
	}
	return res, nil
}

// start claims the delivery's id and starts its run in one transaction:
// concurrent redeliveries start one run, and the later ones are answered
// with it.
func (d *delivery) start(user db.User, req jobs.StartRequest) (Result, error) {
	ctx, rc := d.ctx, d.rc
	d.rec.Status = rc.cfg.Status(Accepted, nil)
	var thread db.Thread
	duplicate := false
	err := db.InTx(ctx, rc.cfg.Pool, func(ctx context.Context, tx pgx.Tx) error {
		claimed, err := db.ClaimDelivery(ctx, tx, d.rec)
		if errors.Is(err, db.ErrDuplicateDelivery) {
			duplicate = true
			return nil
		}
		if err != nil {
			return err
		}
		if thread, err = rc.cfg.Runs.StartTx(ctx, tx, user, req); err != nil {
			return err
		}
		return db.SetDeliveryThread(ctx, tx, claimed.ID, thread.ID)
	})
	if ref, ok := refusal.As(err); ok {
		return d.rejectErr(RunRefused, ref.Msg, err)
	}
	if err != nil {
		return Result{}, err
	}
	if duplicate {
		return d.duplicate()
	}
	rc.cfg.Logger.InfoContext(ctx, "webhook started a run", "request_id", d.call.RequestID,
		"webhook_id", d.wh.ID, "user_id", d.wh.UserID, "thread_id", thread.ID)
	return Result{Kind: Accepted, Status: d.rec.Status, ThreadID: &thread.ID}, nil
}

// duplicate records a redelivery of an accepted delivery, and answers it
// with the first delivery's run.
func (d *delivery) duplicate() (Result, error) {
	first, err := db.AcceptedDelivery(d.ctx, d.rc.cfg.Pool, d.wh.ID, d.rec.DeliveryID)
	if err != nil {
		return Result{}, err
	}
	res := Result{Kind: Duplicate, Status: d.rc.cfg.Status(Duplicate, nil), ThreadID: first.ThreadID}
	d.rec.Outcome, d.rec.Status, d.rec.ThreadID = db.DeliveryDuplicate, res.Status, first.ThreadID
	d.rec.Reason = "already accepted at " + first.ReceivedAt.UTC().Format(time.RFC3339)
	if _, err := db.RecordDelivery(d.ctx, d.rc.cfg.Pool, d.rec); err != nil {
		return Result{}, err
	}
	return res, nil
}
