package scriptmodel

import "net/http"

// converseStream answers as Bedrock's ConverseStream does. Not built yet.
func (s *Server) converseStream(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotImplemented, "invalid_request_error", "not_implemented", "Bedrock's ConverseStream is not scripted yet", "")
}
