package agent

import "errors"

// newAnthropicWire speaks Anthropic's Messages API. Not built yet: see the
// providers issue.
func newAnthropicWire(cfg wireConfig) (wire, string, error) {
	return nil, "", errors.New("Anthropic's Messages API is not supported yet")
}
