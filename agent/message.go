// Package agent is Pizza Bot's agent core: the messages of a conversation,
// the tools offered to a model, the model providers, one step of the agent
// loop, and skills.
//
// The package is pure logic plus outbound calls to model providers. It has
// no HTTP server, no HTML, no job queue and no database: the jobs package
// runs each Step as a durable job and stores what it returns.
package agent

import "encoding/json"

// Role is who wrote a message in a conversation.
type Role string

// The roles of a Chat Completions conversation.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// ToolCall is a request by the model to call a tool.
type ToolCall struct {
	// ID identifies the call; the tool result refers to it.
	ID string `json:"id"`
	// Name is the name of the tool.
	Name string `json:"name"`
	// Arguments is the raw JSON text the model produced. It may be invalid:
	// check it with ToolSpec.ValidateArguments.
	Arguments string `json:"arguments"`
}

// Message is one message of a conversation.
type Message struct {
	Role    Role   `json:"role"`
	Content string `json:"content"`
	// ToolCalls are the calls an assistant message asks for.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID is the call a tool message answers (role tool).
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Name is the tool's name (role tool).
	Name string `json:"name,omitempty"`
	// IsError marks a tool result that reports a failure. The model is told
	// so: the content is sent prefixed with "Error: " (unless it already
	// starts with "error").
	IsError bool `json:"is_error,omitempty"`
	// Images are shown to the model with the text (role user only): the
	// message is then sent as content parts. Models that do not accept
	// images refuse such a request (see ImagesRefused).
	Images []Image `json:"images,omitempty"`
	// Documents are PDFs shown to the model with the text (role user
	// only), on the wire formats that read them: Anthropic's (document
	// blocks, for anthropic and Claude on Bedrock). Other wire formats
	// leave them out; the attachment tools read a PDF's text for them.
	Documents []Document `json:"documents,omitempty"`
	// State is what the provider needs back with this assistant message
	// next turn; nil when it needs nothing.
	State *State `json:"state,omitempty"`
}

// UserMessage returns a user message with the given text.
func UserMessage(text string) Message {
	return Message{Role: RoleUser, Content: text}
}

// ToolResult returns the tool message that answers call.
func ToolResult(call ToolCall, content string, isError bool) Message {
	return Message{Role: RoleTool, Content: content, ToolCallID: call.ID, Name: call.Name, IsError: isError}
}

// Document is a PDF sent inline with a user message.
type Document struct {
	// Name is the file's name, shown to the model as the document's title.
	Name string `json:"name"`
	// Data is the PDF file's bytes.
	Data []byte `json:"data"`
}

// State is what a provider needs back with an assistant message on the next
// turn, exactly as it sent it: Anthropic's thinking blocks and their
// signatures, OpenAI's reasoning items, Gemini's thought signatures,
// Bedrock's reasoning content. It is kept with the message in the durable
// transcript, so a run resumed after days, on another replica, replays it.
// Only the wire format that wrote it reads it; another one (the thread's
// model changed) sends the message's content and tool calls alone.
type State struct {
	// Wire is the wire format that wrote Data (Model.Wire).
	Wire string `json:"wire"`
	// Data is the wire format's own record, JSON.
	Data json.RawMessage `json:"data"`
}
