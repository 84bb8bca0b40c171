package agent

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
)

// Image is an image sent inline with a user message.
type Image struct {
	// MediaType is e.g. "image/png".
	MediaType string `json:"media_type"`
	// Data is the image file's bytes.
	Data []byte `json:"data"`
}

// DataURL returns the image as a data: URL, the form in which Chat
// Completions accepts inline images.
func (im Image) DataURL() string {
	return "data:" + im.MediaType + ";base64," + base64.StdEncoding.EncodeToString(im.Data)
}

// ImagesRefused reports whether err is a provider refusing a request
// because the model does not take images. Providers do not say in advance
// which models accept images, and they word the refusal differently, so
// this is a guess from the answer: a 400 whose message mentions images,
// vision or multimodal input.
func ImagesRefused(err error) bool {
	var pe *ProviderError
	if !errors.As(err, &pe) || pe.Status != http.StatusBadRequest {
		return false
	}
	msg := strings.ToLower(pe.Message)
	return strings.Contains(msg, "image") || strings.Contains(msg, "vision") || strings.Contains(msg, "multimodal")
}
