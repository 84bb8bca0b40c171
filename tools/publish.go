package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"pizzabot/agent"
	"pizzabot/netguard"
)

// PublishTool is the name of the tool that publishes a brief.
const PublishTool = "publish_brief"

// Publish is where publish_brief publishes, as the admin configured it
// (PIZZA_PUBLISH_FOLDER, PIZZA_PUBLISH_WEBHOOK_URL and _SECRET). With
// neither set the tool does not exist, and a skill that lists it in
// allowed-tools is not offered.
type Publish struct {
	// Folder is an absolute host folder inside a writable folder grant: a
	// brief becomes <Folder>/<title as a file name>.md there, through the
	// grant's checks (a grant removed or made read-only stops it).
	Folder string
	// WebhookURL receives each brief as a JSON POST signed with Standard
	// Webhooks (webhook-id, webhook-timestamp, webhook-signature).
	WebhookURL string
	// WebhookSecret is the signing secret, "whsec_" and base64.
	WebhookSecret string
	// Guard checks the webhook's address at every connect; Loopback only
	// under PIZZA_PUBLISH_ALLOW_INSECURE.
	Guard *netguard.Guard
	// Protected are the folders no grant reaches into (Workspace.Protected).
	Protected []string
}

// Configured reports whether a destination is set.
func (p Publish) Configured() bool { return p.Folder != "" || p.WebhookURL != "" }

// Check reports what is wrong with the configuration, for the start of
// the server: a relative folder, a webhook without a valid secret or with
// a URL that is not http(s).
func (p Publish) Check() []error {
	var errs []error
	if p.Folder != "" {
		if _, err := CheckGrantPath(p.Folder); err != nil {
			errs = append(errs, fmt.Errorf("PIZZA_PUBLISH_FOLDER: %w", err))
		}
	}
	if p.WebhookURL != "" {
		if !strings.HasPrefix(p.WebhookURL, "https://") && !strings.HasPrefix(p.WebhookURL, "http://") {
			errs = append(errs, errors.New("PIZZA_PUBLISH_WEBHOOK_URL: want an https:// URL"))
		}
		if p.WebhookSecret == "" {
			errs = append(errs, errors.New("PIZZA_PUBLISH_WEBHOOK_SECRET is required with PIZZA_PUBLISH_WEBHOOK_URL (whsec_ and base64 of 24 to 64 random bytes, e.g. whsec_$(openssl rand -base64 32))"))
		} else if _, err := standardwebhooks.NewWebhook(p.WebhookSecret); err != nil {
			errs = append(errs, fmt.Errorf("PIZZA_PUBLISH_WEBHOOK_SECRET: not base64 (with or without whsec_): %v", err))
		}
	} else if p.WebhookSecret != "" {
		errs = append(errs, errors.New("PIZZA_PUBLISH_WEBHOOK_SECRET is set without PIZZA_PUBLISH_WEBHOOK_URL"))
	}
	return errs
}

// Destinations names where briefs go, for people (the guide, the form).
func (p Publish) Destinations() string {
	var d []string
	if p.Folder != "" {
		d = append(d, "the folder "+p.Folder)
	}
	if p.WebhookURL != "" {
		d = append(d, "a webhook")
	}
	return strings.Join(d, " and ")
}

// PublishTools returns publish_brief when a destination is configured, and
// nothing otherwise.
func PublishTools(p Publish) []Tool {
	if !p.Configured() {
		return nil
	}
	pb := &publisher{cfg: p, grants: &grantTools_{protected: NewProtected(append(slices.Clone(p.Protected), pdfCacheDir())...)}}
	if p.Guard == nil {
		pb.cfg.Guard = &netguard.Guard{}
	}
	return []Tool{{
		Spec: agent.ToolSpec{
			Name: PublishTool,
			Description: "Publish a finished brief to " + p.Destinations() + ", where the team reads it. " +
				"title becomes the file name and heading; body is the brief in Markdown, without the title heading. " +
				"Publish once, when the brief is done: the call usually waits for a person's approval.",
			Parameters: schema(`{"type":"object","properties":{
				"title":{"type":"string","minLength":1,"maxLength":200,"description":"The brief's title, e.g. Vector databases in 2026"},
				"body":{"type":"string","minLength":1,"maxLength":1000000,"description":"The brief in Markdown"}},
				"required":["title","body"],"additionalProperties":false}`),
		},
		Call: pb.publish,
	}}
}

type publisher struct {
	cfg    Publish
	grants *grantTools_
}

// webhookTimeout bounds one delivery.
const webhookTimeout = 30 * time.Second

func (pb *publisher) publish(ctx context.Context, run Run, args map[string]any) (string, error) {
	title, _ := args["title"].(string)
	body, _ := args["body"].(string)
	title = strings.Join(strings.Fields(title), " ")
	switch {
	case title == "":
		return "", errors.New("title is empty")
	case utf8.RuneCountInString(title) > 200:
		return "", errors.New("title is longer than 200 characters")
	case strings.TrimSpace(body) == "":
		return "", errors.New("body is empty")
	case !utf8.ValidString(body):
		return "", errors.New("body is not valid UTF-8 text")
	}
	var done []string
	if pb.cfg.Folder != "" {
		msg, err := pb.toFolder(ctx, run, title, body)
		if err != nil {
			return "", err
		}
		done = append(done, msg)
	}
	if pb.cfg.WebhookURL != "" {
		msg, err := pb.toWebhook(ctx, run, title, body)
		if err != nil {
			if len(done) > 0 {
				return "", fmt.Errorf("%s, but the webhook failed: %w", strings.Join(done, "; "), err)
			}
			return "", err
		}
		done = append(done, msg)
	}
	return strings.Join(done, "\n"), nil
}

// BriefFileName is the file a brief titled title is written to: the title
// with letters and digits kept (any script), the rest as hyphens,
// lowercase, at most 80 characters, and ".md".
func BriefFileName(title string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(title) {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
		if utf8.RuneCountInString(b.String()) >= 80 {
			break
		}
	}
	name := strings.Trim(b.String(), "-")
	if name == "" {
		name = "brief"
	}
	return name + ".md"
}

// toFolder writes the brief into the folder, through the grant's checks,
// never over an earlier brief: a second brief of the same title gets -2.
func (pb *publisher) toFolder(ctx context.Context, run Run, title, body string) (string, error) {
	name := BriefFileName(title)
	content := "# " + title + "\n\n" + strings.TrimSpace(body) + "\n"
	base := strings.TrimSuffix(name, ".md")
	for i := 1; i <= 100; i++ {
		file := name
		if i > 1 {
			file = fmt.Sprintf("%s-%d.md", base, i)
		}
		p := filepath.Join(pb.cfg.Folder, file)
		t, err := pb.grants.resolve(ctx, run, p, true)
		if err != nil {
			return "", fmt.Errorf("publishing to %s: %w", pb.cfg.Folder, err)
		}
		if t.exists {
			continue
		}
		msg, err := pb.grants.writeFile(ctx, run, map[string]any{"path": p, "content": content})
		if err != nil {
			return "", fmt.Errorf("publishing to %s: %w", pb.cfg.Folder, err)
		}
		return "Published to " + p + ". " + msg, nil
	}
	return "", fmt.Errorf("publishing to %s: 100 briefs named %s exist already: choose another title", pb.cfg.Folder, name)
}

// BriefEvent is the JSON body of a webhook delivery.
type BriefEvent struct {
	Type      string    `json:"type"` // "brief.published"
	Timestamp time.Time `json:"timestamp"`
	Data      BriefData `json:"data"`
}

// BriefData is the brief a webhook delivery carries.
type BriefData struct {
	Title    string `json:"title"`
	Body     string `json:"body"`
	ThreadID int64  `json:"thread_id"`
}

func (pb *publisher) toWebhook(ctx context.Context, run Run, title, body string) (string, error) {
	wh, err := standardwebhooks.NewWebhook(pb.cfg.WebhookSecret)
	if err != nil {
		return "", errors.New("the webhook's secret is not valid (PIZZA_PUBLISH_WEBHOOK_SECRET)")
	}
	if err := pb.cfg.Guard.CheckURL(ctx, pb.cfg.WebhookURL); err != nil {
		return "", fmt.Errorf("the webhook's address is refused: %w", err)
	}
	now := time.Now().UTC()
	payload, err := json.Marshal(BriefEvent{Type: "brief.published", Timestamp: now, Data: BriefData{Title: title, Body: body, ThreadID: run.ThreadID}})
	if err != nil {
		return "", err
	}
	// The same call sends the same id, so a receiver can drop a repeat.
	id := fmt.Sprintf("msg_pizza_%d_%d", run.ThreadID, run.Call.ID)
	sig, err := wh.Sign(id, now, payload)
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, pb.cfg.WebhookURL, bytes.NewReader(payload))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "pizza-bot")
	req.Header.Set(standardwebhooks.HeaderWebhookID, id)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, fmt.Sprint(now.Unix()))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	resp, err := pb.cfg.Guard.Client(webhookTimeout).Do(req)
	if err != nil {
		return "", fmt.Errorf("delivering to the webhook: %w", err)
	}
	defer resp.Body.Close()
	reply, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return "", fmt.Errorf("the webhook answered %s: %s", resp.Status, strings.TrimSpace(string(reply)))
	}
	return fmt.Sprintf("Delivered to the webhook (%s, message %s).", resp.Status, id), nil
}
