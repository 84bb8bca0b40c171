package db

import "strings"

// Text is s as a text column (and a string in a jsonb one) can hold it:
// PostgreSQL refuses a NUL byte in either, and bytes that are not UTF-8,
// and the whole statement fails with them. What a tool returns, what a
// model says and what an error quotes come from outside (an MCP server's
// binary output, a page, a provider's reply), so every such string is
// written through Text: each NUL and each invalid byte becomes U+FFFD,
// which says something was there, rather than the step failing to record
// it (and the run stopping on a call whose outcome it could not keep).
func Text(s string) string {
	if strings.IndexByte(s, 0) < 0 && isUTF8(s) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

func isUTF8(s string) bool { return strings.ToValidUTF8(s, "") == s }
