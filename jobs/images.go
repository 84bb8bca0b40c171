package jobs

import (
	"context"
	"fmt"
	"slices"

	"pizzabot/agent"
	"pizzabot/db"
	"pizzabot/tools"
)

// Images attached to a thread are shown to the model with the thread's first
// user message, the one they were uploaded with, on every model step: the
// conversation is sent whole each time. Which models accept images is not
// something providers tell in advance, so a step sends them and, when the
// provider refuses (agent.ImagesRefused), takes the step again without them
// and tells the model in its instructions. Nothing is remembered between
// steps: a thread with images on a text-only model pays one refused call per
// step, which is cheap next to remembering wrongly (a vision model refusing
// one broken image must not become "text-only" for everyone). Which
// attachments are shown is the tools' rule (tools/images.go): read_attachment
// refuses those the model already sees.

// attachImages puts the thread's images on the first user message of msgs.
func (rt *Runtime) attachImages(ctx context.Context, t db.Thread, msgs []agent.Message) error {
	first := slices.IndexFunc(msgs, func(m agent.Message) bool { return m.Role == agent.RoleUser })
	if first < 0 {
		return nil
	}
	as, err := db.ThreadImages(ctx, rt.cfg.Pool, t.UserID, t.ID, tools.ImageTypes, tools.MaxImageSize, tools.MaxImages)
	if err != nil {
		return err
	}
	for _, a := range as {
		msgs[first].Images = append(msgs[first].Images, agent.Image{MediaType: a.ContentType, Data: a.Content})
	}
	return nil
}

// PDFs attached to a thread are shown to the models whose wire format reads
// them (Anthropic's document blocks, for anthropic and Claude on Bedrock) in
// the same way, on the first user message: the model reads the pages as
// they are, figures and tables included, and the prompt cache keeps them
// after the first step. Other models read a PDF's text through
// read_attachment, which works on these models too.
const (
	// maxDocuments and maxDocumentSize bound what is sent: Anthropic
	// takes requests up to 32 MB.
	maxDocuments    = 5
	maxDocumentSize = 8 << 20
)

// attachDocuments puts the thread's PDFs on the first user message of msgs.
func (rt *Runtime) attachDocuments(ctx context.Context, t db.Thread, msgs []agent.Message) error {
	first := slices.IndexFunc(msgs, func(m agent.Message) bool { return m.Role == agent.RoleUser })
	if first < 0 {
		return nil
	}
	as, err := db.ThreadImages(ctx, rt.cfg.Pool, t.UserID, t.ID, []string{"application/pdf"}, maxDocumentSize, maxDocuments)
	if err != nil {
		return err
	}
	for _, a := range as {
		msgs[first].Documents = append(msgs[first].Documents, agent.Document{Name: a.Name, Data: a.Content})
	}
	return nil
}

// stepShowingImages takes the step; when the provider refuses the images,
// it takes it once more without them, telling the model why it cannot see
// them.
func (rt *Runtime) stepShowingImages(ctx context.Context, threadID int64, in agent.StepInput) (*agent.StepOutput, error) {
	out, err := agent.Step(ctx, in)
	n := 0
	for _, m := range in.Messages {
		n += len(m.Images)
	}
	if err == nil || n == 0 || !agent.ImagesRefused(err) {
		return out, err
	}
	rt.cfg.Logger.Info("the model refused images: step taken again without them", "thread_id", threadID, "err", err)
	msgs := slices.Clone(in.Messages)
	for i := range msgs {
		msgs[i].Images = nil
	}
	in.Messages = msgs
	in.System += fmt.Sprintf("\n\nNote: the user attached %d image(s) to this thread, but they could not be shown to you: the model provider refused them (%s). "+
		"You cannot see these images and read_attachment cannot read them: if the task depends on them, tell the user.", n, err)
	return agent.Step(ctx, in)
}
