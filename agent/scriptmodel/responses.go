package scriptmodel

import "net/http"

// responses answers as OpenAI's Responses API does. Not built yet.
func (s *Server) responses(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotImplemented, "invalid_request_error", "not_implemented", "OpenAI's Responses API is not scripted yet", "")
}
