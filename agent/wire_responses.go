package agent

import "errors"

// newResponsesWire speaks OpenAI's Responses API. Not built yet: see the
// providers issue.
func newResponsesWire(cfg wireConfig) (wire, string, error) {
	return nil, "", errors.New("the Responses API is not supported yet")
}
