package mcpclient

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
)

// MaxResultText bounds the text of a tool result given to the model.
const MaxResultText = 256 << 10

// FormatResult turns a tool's result into the text the model reads, and
// whether the tool reported an error. Text content is kept as is; images,
// audio and binary resources are described (the model gets no bytes);
// structured content is added as JSON unless a text part already says the
// same.
func FormatResult(res *mcp.CallToolResult) (string, bool) {
	if res == nil {
		return "", false
	}
	var parts []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case mcp.TextContent:
			parts = append(parts, c.Text)
		case *mcp.TextContent:
			parts = append(parts, c.Text)
		case mcp.ImageContent:
			parts = append(parts, fmt.Sprintf("[image %s, %d bytes base64, not shown]", c.MIMEType, len(c.Data)))
		case mcp.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio %s, %d bytes base64, not shown]", c.MIMEType, len(c.Data)))
		case mcp.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource %s: %s]", c.Name, c.URI))
		case mcp.EmbeddedResource:
			switch r := c.Resource.(type) {
			case mcp.TextResourceContents:
				parts = append(parts, fmt.Sprintf("[resource %s]\n%s", r.URI, r.Text))
			case mcp.BlobResourceContents:
				parts = append(parts, fmt.Sprintf("[resource %s, %s, %d bytes base64, not shown]", r.URI, r.MIMEType, len(r.Blob)))
			default:
				parts = append(parts, "[resource]")
			}
		default:
			if b, err := json.Marshal(c); err == nil {
				parts = append(parts, string(b))
			}
		}
	}
	if structured := structuredJSON(res); structured != nil && !saysTheSame(parts, structured) {
		if len(parts) == 0 {
			parts = append(parts, string(structured))
		} else {
			parts = append(parts, "Structured content:\n"+string(structured))
		}
	}
	text := strings.Join(parts, "\n")
	if len(text) > MaxResultText {
		text = strings.ToValidUTF8(text[:MaxResultText], "") + fmt.Sprintf("\n[… cut: the result is %d bytes, more than the %d KiB limit]", len(text), MaxResultText>>10)
	}
	if text == "" && !res.IsError {
		text = "(the tool returned no content)"
	}
	return text, res.IsError
}

func structuredJSON(res *mcp.CallToolResult) []byte {
	var raw []byte
	switch {
	case len(res.RawStructuredContent) > 0:
		raw = res.RawStructuredContent
	case res.StructuredContent != nil:
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return nil
		}
		raw = b
	default:
		return nil
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil || buf.String() == "null" {
		return nil
	}
	return buf.Bytes()
}

// saysTheSame reports whether a text part is the structured content's JSON.
func saysTheSame(parts []string, structured []byte) bool {
	var want any
	if json.Unmarshal(structured, &want) != nil {
		return false
	}
	for _, p := range parts {
		var got any
		if json.Unmarshal([]byte(p), &got) == nil {
			a, _ := json.Marshal(got)
			b, _ := json.Marshal(want)
			if bytes.Equal(a, b) {
				return true
			}
		}
	}
	return false
}
