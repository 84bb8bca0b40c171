package agent

import "errors"

// newConverseWire speaks Amazon Bedrock's Converse API. Not built yet: see
// the providers issue.
func newConverseWire(cfg wireConfig) (wire, string, error) {
	return nil, "", errors.New("Bedrock's Converse API is not supported yet")
}
