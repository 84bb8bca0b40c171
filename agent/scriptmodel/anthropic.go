package scriptmodel

import "net/http"

// anthropicMessages answers as Anthropic's Messages API does. Not built yet.
func (s *Server) anthropicMessages(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotImplemented, "invalid_request_error", "not_implemented", "Anthropic's Messages API is not scripted yet", "")
}
