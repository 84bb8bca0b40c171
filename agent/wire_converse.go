package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrock"
	bedrocktypes "github.com/aws/aws-sdk-go-v2/service/bedrock/types"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/document"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/schemas"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/auth/bearer"
	smithydocument "github.com/aws/smithy-go/document"
	"github.com/aws/smithy-go/transport/http/protocol/restjson1"
)

// converseWire speaks Amazon Bedrock's Converse API (ConverseStream), with
// the AWS SDK: every Bedrock model that is not a Claude model with a
// Bedrock id (those go to the Anthropic Messages wire), inference profiles
// (us.anthropic.claude-..., global....) and ARNs included.
//
// Credentials: a Bedrock API key (AWS_BEARER_TOKEN_BEDROCK, sent as a
// bearer token, over HTTPS only as the SDK insists), else the AWS default
// credential chain: static keys given through getenv, AWS_PROFILE with the
// shared config and credentials files (SSO, assumed roles, credential
// processes), web identity, container and instance roles.
type converseWire struct {
	provider string
	model    string
	region   string
	runtime  *bedrockruntime.Client
	control  *bedrock.Client
	// runtimeOverridden and controlOverridden: the endpoints were given
	// (AWS_ENDPOINT_URL_BEDROCK_RUNTIME, AWS_ENDPOINT_URL_BEDROCK).
	runtimeOverridden, controlOverridden bool
	// claude: the model is of the Claude family (an inference profile or
	// an ARN of one), whose thinking Effort sets.
	claude bool
	// cache: where the model takes prompt cache points (conversePromptCache).
	cache promptCache
}

// promptCache says where a model takes Converse's cache points.
type promptCache struct {
	system, tools, messages bool
}

// conversePromptCache is where model takes cache points, as Bedrock's
// prompt caching documents it: Claude 3.5 Haiku, 3.7 Sonnet and the
// Claude 4 family in the system prompt, the tools and the messages;
// Amazon Nova's text models in the system prompt and the messages. Other
// models (older Claude 3 among them) get none: some refuse them.
func conversePromptCache(model string) promptCache {
	switch {
	case strings.Contains(model, "anthropic.claude"):
		if strings.Contains(model, "claude-3-") && !strings.Contains(model, "claude-3-5-haiku") && !strings.Contains(model, "claude-3-7-") {
			return promptCache{}
		}
		return promptCache{system: true, tools: true, messages: true}
	case strings.Contains(model, "amazon.nova-"):
		for _, media := range []string{"sonic", "canvas", "reel"} {
			if strings.Contains(model, "nova-"+media) {
				return promptCache{}
			}
		}
		return promptCache{system: true, messages: true}
	}
	return promptCache{}
}

// cachePoint is Converse's cache point: what comes before it is cached
// (for five minutes, refreshed on each hit).
var cachePoint = types.CachePointBlock{Type: types.CachePointTypeDefault}

// The Bedrock variables read through getenv, beside the provider's key
// and endpoint.
const (
	awsEndpointBedrock = "AWS_ENDPOINT_URL_BEDROCK" // the control plane (the model list)
	awsCABundle        = "AWS_CA_BUNDLE"
)

// newConverseWire builds the Bedrock clients from getenv: the region
// (AWSRegion: AWS_REGION, AWS_DEFAULT_REGION, the profile's, else
// us-west-2), the endpoint (AWS_ENDPOINT_URL_BEDROCK_RUNTIME, else the
// region's) and the credentials.
func newConverseWire(cfg wireConfig) (wire, string, error) {
	awsCfg, endpoint, err := loadAWSConfig(cfg)
	if err != nil {
		return nil, "", err
	}
	key := strings.TrimSpace(cfg.getenv(cfg.provider.APIKeyEnv))
	// bedrockruntime.New reads AWS_BEARER_TOKEN_BEDROCK from the process
	// environment by itself; getenv decides instead, both ways.
	auth := func(token string) (bearer.TokenProvider, []string) {
		if token == "" {
			return nil, nil
		}
		return bearer.TokenProviderFunc(func(context.Context) (bearer.Token, error) {
			return bearer.Token{Value: token}, nil
		}), []string{"httpBearerAuth"}
	}
	runtimeEndpoint := strings.TrimSpace(cfg.getenv(cfg.provider.BaseURLEnv))
	controlEndpoint := strings.TrimSpace(cfg.getenv(awsEndpointBedrock))
	w := &converseWire{
		provider: cfg.provider.Name,
		model:    cfg.model,
		region:   awsCfg.Region,
		claude:   strings.Contains(cfg.model, "anthropic.claude"),
		cache:    conversePromptCache(cfg.model),
		// The region's endpoints unless given.
		runtimeOverridden: runtimeEndpoint != "",
		controlOverridden: controlEndpoint != "",
		runtime: bedrockruntime.NewFromConfig(awsCfg, func(o *bedrockruntime.Options) {
			o.HTTPClient = ownBody{o.HTTPClient}
			o.BaseEndpoint = optional(runtimeEndpoint)
			o.BearerAuthTokenProvider, o.AuthSchemePreference = auth(key)
			o.Retryer = aws.NopRetryer{} // Model.Complete retries
		}),
		control: bedrock.NewFromConfig(awsCfg, func(o *bedrock.Options) {
			o.HTTPClient = ownBody{o.HTTPClient}
			o.BaseEndpoint = optional(controlEndpoint)
			o.BearerAuthTokenProvider, o.AuthSchemePreference = auth(key)
			o.Retryer = aws.NopRetryer{}
		}),
	}
	return w, endpoint, nil
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// loadAWSConfig loads the AWS configuration the SDK's way (the shared
// files, the credential chain) with what getenv gives taking precedence,
// and returns it with the runtime endpoint in use.
func loadAWSConfig(cfg wireConfig) (aws.Config, string, error) {
	getenv := cfg.getenv
	p := cfg.provider
	opts := []func(*config.LoadOptions) error{
		config.WithHTTPClient(awsHTTPClient(cfg.http)),
		config.WithRetryer(func() aws.Retryer { return aws.NopRetryer{} }),
	}
	if bundle := strings.TrimSpace(getenv(awsCABundle)); bundle != "" {
		// The SDK's own variable, read through getenv: the certificates to
		// trust instead of the system's (a corporate proxy, a test server).
		pem, err := os.ReadFile(bundle)
		if err != nil {
			return aws.Config{}, "", fmt.Errorf("AWS_CA_BUNDLE: %w", err)
		}
		opts = append(opts, config.WithCustomCABundle(bytes.NewReader(pem)))
	}
	profile := strings.TrimSpace(getenv("AWS_PROFILE"))
	if profile != "" {
		opts = append(opts, config.WithSharedConfigProfile(profile))
	}
	id, secret := strings.TrimSpace(getenv("AWS_ACCESS_KEY_ID")), strings.TrimSpace(getenv("AWS_SECRET_ACCESS_KEY"))
	switch {
	case id != "" && secret != "":
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(id, secret, strings.TrimSpace(getenv("AWS_SESSION_TOKEN")))))
	case id != "" || secret != "":
		return aws.Config{}, "", errors.New("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY go together: set both, or neither to use AWS_PROFILE or the default credential chain")
	}
	// Loading reads the shared files only: credentials are fetched at the
	// first call, so an instance role costs nothing here.
	awsCfg, err := config.LoadDefaultConfig(context.Background(), opts...)
	if err != nil {
		var missing config.SharedConfigProfileNotExistError
		if errors.As(err, &missing) {
			return aws.Config{}, "", fmt.Errorf("AWS_PROFILE %q: no such profile in the AWS config or credentials file", profile)
		}
		return aws.Config{}, "", fmt.Errorf("the AWS configuration could not be loaded: %w", err)
	}
	region, err := AWSRegion(getenv, func() string { return sharedConfigRegion(awsCfg) })
	if err != nil {
		return aws.Config{}, "", err
	}
	awsCfg.Region = region
	awsCfg.Credentials = credentialsChain{awsCfg.Credentials}
	endpoint := strings.TrimSpace(getenv(p.BaseURLEnv))
	if endpoint == "" {
		endpoint = strings.ReplaceAll(p.DefaultBaseURL, "{region}", region)
	} else if _, err := p.BaseURL(getenv); err != nil {
		return aws.Config{}, "", err
	}
	return awsCfg, endpoint, nil
}

// sharedConfigRegion is the region of the shared config profile in use, not
// the one the SDK took from the process environment.
func sharedConfigRegion(c aws.Config) string {
	for _, src := range c.ConfigSources {
		if sc, ok := src.(config.SharedConfig); ok {
			return sc.Region
		}
	}
	return ""
}

// awsHTTPClient is the SDK's buildable client (the one it can give a CA
// bundle) with the header timeout and the dialer of hc's transport.
func awsHTTPClient(hc *http.Client) *awshttp.BuildableClient {
	c := awshttp.NewBuildableClient()
	if t, ok := hc.Transport.(*http.Transport); ok {
		c = c.WithTransportOptions(func(tr *http.Transport) {
			tr.ResponseHeaderTimeout = t.ResponseHeaderTimeout
			if t.DialContext != nil {
				tr.DialContext = t.DialContext
			}
		})
	}
	return c
}

// ownBody gives each request the SDK sends a body of the transport's own:
// its bytes, read once. The SDK (smithy-go's ClientHandler) closes the
// request body as soon as the response headers are back, and its closed
// body answers WriteTo with io.EOF; net/http, still checking after the
// last byte that the body holds no more than its Content-Length, takes
// that io.EOF for a write error and closes the connection, under the
// response being read. A stream then failed with "decode event: read
// tcp ...: use of closed network connection", after the server had
// answered, now and then (the server answering before the transport's
// writer got there), and the request was sent again: billed twice. A body
// the SDK cannot close is written to its end whatever the SDK does.
type ownBody struct{ next bedrockruntime.HTTPClient }

func (c ownBody) Do(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return c.next.Do(req)
	}
	data, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, fmt.Errorf("reading the request body: %w", err)
	}
	own := req.Clone(req.Context())
	own.Body = io.NopCloser(bytes.NewReader(data))
	own.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
	return c.next.Do(own)
}

// credentialsChain marks a failure to find AWS credentials, so that it is
// told as what it is rather than as a failed call.
type credentialsChain struct{ aws.CredentialsProvider }

func (c credentialsChain) Retrieve(ctx context.Context) (aws.Credentials, error) {
	if c.CredentialsProvider == nil {
		return aws.Credentials{}, &noCredentialsError{errors.New("no credential provider")}
	}
	creds, err := c.CredentialsProvider.Retrieve(ctx)
	if err != nil {
		return aws.Credentials{}, &noCredentialsError{err}
	}
	return creds, nil
}

type noCredentialsError struct{ err error }

func (e *noCredentialsError) Error() string { return "no AWS credentials: " + e.err.Error() }
func (e *noCredentialsError) Unwrap() error { return e.err }

// converseState is the converse wire's State.Data: the answer's content
// blocks, in order, exactly as Bedrock sent them (reasoning signatures
// and redacted reasoning are opaque and must go back unchanged).
type converseState struct {
	Blocks []converseBlock `json:"blocks"`
}

// converseBlock is one content block of an answer; Type says which of
// the other fields are set.
type converseBlock struct {
	// Type is "text", "reasoning", "redacted" or "tool_use".
	Type string `json:"type"`
	// Text is the text of a text or reasoning block.
	Text string `json:"text,omitempty"`
	// Signature is a reasoning block's signature.
	Signature string `json:"signature,omitempty"`
	// Redacted is a redacted reasoning block's content (base64 in JSON).
	Redacted []byte `json:"redacted,omitempty"`
	// ID, Name and Input are a tool use's id, tool name and raw JSON input.
	ID    string `json:"id,omitempty"`
	Name  string `json:"name,omitempty"`
	Input string `json:"input,omitempty"`
}

func (c *converseWire) attempt(ctx context.Context, req Request, s sink) (*Response, error) {
	in, err := c.input(req)
	if err != nil {
		return nil, err
	}
	// The SDK's protocol keeps one event stream codec per client, whose
	// fields every stream of that client writes unguarded (smithy-go
	// v1.28.9's Codec.DeserializeEventMessage): a data race between the
	// runs sharing a Model. Each stream gets a protocol of its own, the
	// one the SDK builds.
	out, err := c.runtime.ConverseStream(ctx, in, func(o *bedrockruntime.Options) {
		o.Protocol = restjson1.New(schemas.AmazonBedrockFrontendService)
	})
	if err != nil {
		return nil, c.failure(ctx, err, c.runtimeOverridden)
	}
	stream := out.GetStream()
	defer stream.Close()

	var (
		blocks  = map[int32]*converseBlock{}
		order   []int32
		stop    types.StopReason
		stopped bool
		usage   Usage
	)
	block := func(i *int32, kind string) *converseBlock {
		idx := aws.ToInt32(i)
		b, ok := blocks[idx]
		if !ok {
			b = &converseBlock{Type: kind}
			blocks[idx] = b
			order = append(order, idx)
		}
		return b
	}
	for ev := range stream.Events() {
		s.alive()
		switch ev := ev.(type) {
		case *types.ConverseStreamOutputMemberMessageStart:
		case *types.ConverseStreamOutputMemberContentBlockStart:
			if tu, ok := ev.Value.Start.(*types.ContentBlockStartMemberToolUse); ok {
				b := block(ev.Value.ContentBlockIndex, "tool_use")
				b.Type, b.ID, b.Name = "tool_use", aws.ToString(tu.Value.ToolUseId), aws.ToString(tu.Value.Name)
			}
		case *types.ConverseStreamOutputMemberContentBlockDelta:
			switch d := ev.Value.Delta.(type) {
			case *types.ContentBlockDeltaMemberText:
				block(ev.Value.ContentBlockIndex, "text").Text += d.Value
				s.text(d.Value)
			case *types.ContentBlockDeltaMemberToolUse:
				block(ev.Value.ContentBlockIndex, "tool_use").Input += aws.ToString(d.Value.Input)
			case *types.ContentBlockDeltaMemberReasoningContent:
				switch r := d.Value.(type) {
				case *types.ReasoningContentBlockDeltaMemberText:
					block(ev.Value.ContentBlockIndex, "reasoning").Text += r.Value
				case *types.ReasoningContentBlockDeltaMemberSignature:
					block(ev.Value.ContentBlockIndex, "reasoning").Signature += r.Value
				case *types.ReasoningContentBlockDeltaMemberRedactedContent:
					b := block(ev.Value.ContentBlockIndex, "redacted")
					b.Type = "redacted"
					b.Redacted = append(b.Redacted, r.Value...)
				}
			}
		case *types.ConverseStreamOutputMemberContentBlockStop:
		case *types.ConverseStreamOutputMemberMessageStop:
			stop, stopped = ev.Value.StopReason, true
		case *types.ConverseStreamOutputMemberMetadata:
			if u := ev.Value.Usage; u != nil {
				usage = Usage{
					PromptTokens:     int64(aws.ToInt32(u.InputTokens)),
					CompletionTokens: int64(aws.ToInt32(u.OutputTokens)),
					CacheReadTokens:  int64(aws.ToInt32(u.CacheReadInputTokens)),
					CacheWriteTokens: int64(aws.ToInt32(u.CacheWriteInputTokens)),
				}
			}
		}
	}
	// A stream that breaks after messageStop has given the whole answer:
	// what may be lost is the metadata event (the usage). Trying again
	// would send the request, and bill it, a second time for an answer
	// already had.
	if err := stream.Err(); err != nil && !stopped {
		return nil, c.failure(ctx, err, c.runtimeOverridden)
	}
	if !stopped {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, providerErrorf(c.provider, 0, true, "the stream ended before the model finished its answer")
	}
	slices.Sort(order)
	st := converseState{}
	msg := Message{Role: RoleAssistant}
	for _, idx := range order {
		b := *blocks[idx]
		st.Blocks = append(st.Blocks, b)
		switch b.Type {
		case "text":
			msg.Content += b.Text
		case "tool_use":
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Arguments: b.Input})
		}
	}
	data, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("converse state: %w", err)
	}
	msg.State = &State{Wire: WireConverse, Data: data}
	return &Response{Message: msg, Usage: usage, FinishReason: converseFinish(stop)}, nil
}

// converseFinish maps Bedrock's stop reason to Chat Completions' terms.
func converseFinish(r types.StopReason) string {
	switch r {
	case types.StopReasonEndTurn, types.StopReasonStopSequence:
		return "stop"
	case types.StopReasonToolUse:
		return "tool_calls"
	case types.StopReasonMaxTokens, types.StopReasonModelContextWindowExceeded:
		return "length"
	case types.StopReasonGuardrailIntervened, types.StopReasonContentFiltered:
		return "content_filter"
	default: // malformed_model_output, malformed_tool_use, and new ones
		return string(r)
	}
}

// Claude's extended thinking on Converse, by Effort: the budget_tokens of
// additionalModelRequestFields.thinking. "none" and "" leave thinking off
// (Claude's default on Bedrock); the answer's maxTokens must exceed the
// budget, so without Request.MaxTokens it is the budget plus room for the
// answer, within the 32,000 output tokens every thinking Claude allows.
// Other models' reasoning settings differ per family (Nova's
// reasoningConfig, DeepSeek's none): their Effort is ignored.
var converseThinkingBudget = map[string]int64{
	"minimal": 1024,
	"low":     2048,
	"medium":  8192,
	"high":    16384,
	"xhigh":   20480,
	"max":     24576,
}

const (
	converseThinkingRoom      = 8192  // answer tokens beside the budget
	converseThinkingMaxOutput = 32000 // Claude Opus 4's output limit, the lowest
)

// input converts a Request to ConverseStream's input.
func (c *converseWire) input(req Request) (*bedrockruntime.ConverseStreamInput, error) {
	in := &bedrockruntime.ConverseStreamInput{ModelId: aws.String(c.model)}
	if req.System != "" {
		in.System = append(in.System, &types.SystemContentBlockMemberText{Value: req.System})
	}
	var msgs []types.Message
	add := func(role types.ConversationRole, blocks ...types.ContentBlock) {
		// Bedrock wants user and assistant turns to alternate: consecutive
		// messages of one role are one turn (tool results and the user's
		// next words, say).
		if n := len(msgs); n > 0 && msgs[n-1].Role == role {
			msgs[n-1].Content = append(msgs[n-1].Content, blocks...)
			return
		}
		msgs = append(msgs, types.Message{Role: role, Content: blocks})
	}
	for i, msg := range req.Messages {
		switch msg.Role {
		case RoleSystem:
			in.System = append(in.System, &types.SystemContentBlockMemberText{Value: msg.Content})
		case RoleUser:
			var blocks []types.ContentBlock
			if strings.TrimSpace(msg.Content) != "" || len(msg.Images) == 0 {
				blocks = append(blocks, &types.ContentBlockMemberText{Value: nonBlank(msg.Content)})
			}
			for j, im := range msg.Images {
				format, ok := converseImageFormat(im.MediaType)
				if !ok {
					return nil, fmt.Errorf("message %d: image %d: Bedrock takes PNG, JPEG, GIF or WebP images, not %s", i, j, im.MediaType)
				}
				blocks = append(blocks, &types.ContentBlockMemberImage{Value: types.ImageBlock{
					Format: format,
					Source: &types.ImageSourceMemberBytes{Value: im.Data},
				}})
			}
			add(types.ConversationRoleUser, blocks...)
		case RoleAssistant:
			blocks, err := c.assistantBlocks(msg)
			if err != nil {
				return nil, fmt.Errorf("message %d: %w", i, err)
			}
			if len(blocks) > 0 { // an empty answer is no turn: Bedrock refuses empty ones
				add(types.ConversationRoleAssistant, blocks...)
			}
		case RoleTool:
			r := types.ToolResultBlock{
				ToolUseId: aws.String(msg.ToolCallID),
				Content:   []types.ToolResultContentBlock{&types.ToolResultContentBlockMemberText{Value: nonBlank(toolResultText(msg))}},
			}
			if msg.IsError {
				r.Status = types.ToolResultStatusError
			}
			add(types.ConversationRoleUser, &types.ContentBlockMemberToolResult{Value: r})
		default:
			return nil, fmt.Errorf("message %d: unknown role %q", i, msg.Role)
		}
	}
	if c.cache.system && len(in.System) > 0 {
		in.System = append(in.System, &types.SystemContentBlockMemberCachePoint{Value: cachePoint})
	}
	if c.cache.messages {
		// The end of the conversation is cached for the next step, which
		// reads it back up to the previous user turn's point (an agent
		// sends its whole history again at every step).
		marked := 0
		for i := len(msgs) - 1; i >= 0 && marked < 2; i-- {
			if i == len(msgs)-1 || msgs[i].Role == types.ConversationRoleUser {
				msgs[i].Content = append(msgs[i].Content, &types.ContentBlockMemberCachePoint{Value: cachePoint})
				marked++
			}
		}
	}
	in.Messages = msgs
	if len(req.Tools) > 0 {
		tc := &types.ToolConfiguration{}
		for _, t := range req.Tools {
			schema, err := t.schema()
			if err != nil {
				return nil, err
			}
			spec := types.ToolSpecification{Name: aws.String(t.Name), InputSchema: &types.ToolInputSchemaMemberJson{Value: document.NewLazyDocument(schema)}}
			if t.Description != "" {
				spec.Description = aws.String(t.Description)
			}
			tc.Tools = append(tc.Tools, &types.ToolMemberToolSpec{Value: spec})
		}
		if c.cache.tools {
			tc.Tools = append(tc.Tools, &types.ToolMemberCachePoint{Value: cachePoint})
		}
		in.ToolConfig = tc
	}
	maxTokens := req.MaxTokens
	if budget, ok := converseThinkingBudget[req.Effort]; ok && c.claude {
		if maxTokens == 0 {
			maxTokens = min(budget+converseThinkingRoom, converseThinkingMaxOutput)
		}
		budget = min(budget, maxTokens-1024)
		if budget >= 1024 { // Claude's least budget; less leaves thinking off
			in.AdditionalModelRequestFields = document.NewLazyDocument(map[string]any{
				"thinking": map[string]any{"type": "enabled", "budget_tokens": budget},
			})
		}
	}
	if maxTokens > 0 {
		in.InferenceConfig = &types.InferenceConfiguration{MaxTokens: aws.Int32(int32(min(maxTokens, 1<<31-1)))}
	}
	return in, nil
}

// converseReplay is the content blocks to send for an assistant message: its
// stored state, or its content and tool calls when it has none of this
// wire's. A state that does not decode (a row edited by hand) or whose
// tool uses are not the message's calls gives way to the message, keeping
// the reasoning it holds: the transcript's calls are what the tool results
// answer.
func converseReplay(msg Message) converseState {
	var plain converseState
	if msg.Content != "" {
		plain.Blocks = append(plain.Blocks, converseBlock{Type: "text", Text: msg.Content})
	}
	for _, tc := range msg.ToolCalls {
		plain.Blocks = append(plain.Blocks, converseBlock{Type: "tool_use", ID: tc.ID, Name: tc.Name, Input: tc.Arguments})
	}
	if msg.State == nil || msg.State.Wire != WireConverse {
		return plain
	}
	var st converseState
	if json.Unmarshal(msg.State.Data, &st) != nil {
		return plain
	}
	var ids []string
	for _, b := range st.Blocks {
		if b.Type == "tool_use" {
			ids = append(ids, b.ID)
		}
	}
	same := len(ids) == len(msg.ToolCalls)
	for i := 0; same && i < len(ids); i++ {
		same = ids[i] == msg.ToolCalls[i].ID
	}
	if same {
		return st
	}
	var kept converseState
	for _, b := range st.Blocks {
		if b.Type == "reasoning" || b.Type == "redacted" {
			kept.Blocks = append(kept.Blocks, b)
		}
	}
	kept.Blocks = append(kept.Blocks, plain.Blocks...)
	return kept
}

// nonBlank stands in for a blank text, which Bedrock refuses ("The text
// field ... is blank").
func nonBlank(s string) string {
	if strings.TrimSpace(s) == "" {
		return "(empty)"
	}
	return s
}

// assistantBlocks is an assistant message as content blocks: replayed from
// its state when this wire wrote it (reasoning and signatures included),
// otherwise its text and tool uses.
func (c *converseWire) assistantBlocks(msg Message) ([]types.ContentBlock, error) {
	st := converseReplay(msg)
	var blocks []types.ContentBlock
	for _, b := range st.Blocks {
		switch b.Type {
		case "text":
			if b.Text != "" { // Bedrock refuses blank text blocks
				blocks = append(blocks, &types.ContentBlockMemberText{Value: b.Text})
			}
		case "reasoning":
			blocks = append(blocks, &types.ContentBlockMemberReasoningContent{Value: &types.ReasoningContentBlockMemberReasoningText{
				Value: types.ReasoningTextBlock{Text: aws.String(b.Text), Signature: optional(b.Signature)},
			}})
		case "redacted":
			blocks = append(blocks, &types.ContentBlockMemberReasoningContent{Value: &types.ReasoningContentBlockMemberRedactedContent{Value: b.Redacted}})
		case "tool_use":
			input, err := documentOf(b.Input)
			if err != nil {
				return nil, err
			}
			blocks = append(blocks, &types.ContentBlockMemberToolUse{Value: types.ToolUseBlock{
				ToolUseId: aws.String(b.ID), Name: aws.String(b.Name), Input: document.NewLazyDocument(input),
			}})
		default:
			return nil, fmt.Errorf("the stored Bedrock state has a block of unknown type %q", b.Type)
		}
	}
	return blocks, nil
}

// documentOf is a tool use's input as a document value: a model's invalid
// JSON goes back as {} (the tool result already told it what was wrong),
// and numbers keep their exact text.
func documentOf(raw string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(wireArguments(raw)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("tool input: %w", err)
	}
	return smithyNumbers(v), nil
}

func smithyNumbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		return smithydocument.Number(v)
	case map[string]any:
		for k, x := range v {
			v[k] = smithyNumbers(x)
		}
	case []any:
		for i, x := range v {
			v[i] = smithyNumbers(x)
		}
	}
	return v
}

func converseImageFormat(mime string) (types.ImageFormat, bool) {
	switch strings.ToLower(mime) {
	case "image/png":
		return types.ImageFormatPng, true
	case "image/jpeg", "image/jpg":
		return types.ImageFormatJpeg, true
	case "image/gif":
		return types.ImageFormatGif, true
	case "image/webp":
		return types.ImageFormatWebp, true
	}
	return "", false
}

// Bedrock's exceptions that trying again later may fix.
var converseRetryable = []string{
	"ThrottlingException", "ServiceUnavailableException", "ModelNotReadyException",
	"InternalServerException", "ModelStreamErrorException", "ModelTimeoutException",
}

// failure turns an AWS SDK error into a *ProviderError saying what is
// wrong (overridden: the endpoint was given, not the region's), or returns the context's cause when the caller gave up.
func (c *converseWire) failure(ctx context.Context, err error, overridden bool) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	var noCreds *noCredentialsError
	if errors.As(err, &noCreds) {
		pe := providerErrorf(c.provider, 0, false, "no AWS credentials were found: set AWS_BEARER_TOKEN_BEDROCK (a Bedrock API key), AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
		pe.Cause = err
		return pe
	}
	var (
		status int
		header http.Header
	)
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
		if re.Response != nil {
			header = re.Response.Header
		}
	}
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		if status != 0 {
			return statusError(c.provider, &failure{status: status, header: header})
		}
		var de *smithy.DeserializationError
		if errors.As(err, &de) {
			return decodeError(c.provider, err)
		}
		pe := transportError(c.provider, err)
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && dnsErr.IsNotFound && !overridden {
			pe.Message = fmt.Sprintf("Bedrock's endpoint for region %s could not be resolved: is %s a region where Bedrock is offered?", c.region, c.region)
		}
		return pe
	}
	code, msg := apiErr.ErrorCode(), apiErr.ErrorMessage()
	if msg == "" {
		msg = code
	}
	pe := &ProviderError{
		Provider:   c.provider,
		Status:     status,
		Message:    msg,
		Code:       code,
		Type:       code,
		Retryable:  slices.Contains(converseRetryable, code),
		RetryAfter: retryAfter(header),
	}
	switch code {
	case "AccessDeniedException":
		pe.Message = fmt.Sprintf("no access to the model %s: %s", c.model, msg)
	case "ResourceNotFoundException":
		pe.Message = fmt.Sprintf("the model %s was not found in region %s: %s", c.model, c.region, msg)
	case "UnrecognizedClientException", "InvalidSignatureException", "ExpiredTokenException", "IncompleteSignatureException":
		pe.Message = "AWS refused the credentials: " + msg
	}
	return pe
}

// models lists the foundation models with text output offered on demand
// (and Claude's, which bedrock-mantle serves) and the inference profiles
// of the region, through Bedrock's control plane (the runtime has no
// listing): both catalogs a bedrock: model id may name.
func (c *converseWire) models(ctx context.Context) ([]string, error) {
	fm, err := c.control.ListFoundationModels(ctx, &bedrock.ListFoundationModelsInput{ByOutputModality: bedrocktypes.ModelModalityText})
	if err != nil {
		return nil, c.listFailure(ctx, err)
	}
	var ids []string
	for _, m := range fm.ModelSummaries {
		id := aws.ToString(m.ModelId)
		// Claude with a Bedrock id is reached through bedrock-mantle
		// (WireFor), on demand or not; other models need on-demand
		// throughput here, or an inference profile (listed below).
		if slices.Contains(m.InferenceTypesSupported, bedrocktypes.InferenceTypeOnDemand) || strings.HasPrefix(id, "anthropic.claude-") {
			ids = append(ids, id)
		}
	}
	pager := bedrock.NewListInferenceProfilesPaginator(c.control, &bedrock.ListInferenceProfilesInput{})
	for pager.HasMorePages() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, c.listFailure(ctx, err)
		}
		for _, p := range page.InferenceProfileSummaries {
			ids = append(ids, aws.ToString(p.InferenceProfileId))
		}
	}
	return ids, nil
}

func (c *converseWire) listFailure(ctx context.Context, err error) error {
	err = c.failure(ctx, err, c.controlOverridden)
	var pe *ProviderError
	if errors.As(err, &pe) && pe.Code == "AccessDeniedException" {
		pe.Message = "the credentials may not list Bedrock's models (bedrock:ListFoundationModels, bedrock:ListInferenceProfiles): " + strings.TrimPrefix(pe.Message, "no access to the model "+c.model+": ")
	}
	return err
}
