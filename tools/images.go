package tools

import (
	"slices"

	"pizzabot/db"
)

// Images attached to a thread are shown to the model with its first user
// message (jobs/images.go); these are the rules for which.

// ImageTypes are the image formats the Chat Completions providers accept
// inline; attachments' types are sniffed, so these are exact.
var ImageTypes = []string{"image/png", "image/jpeg", "image/gif", "image/webp"}

// Limits on the images shown to the model: providers refuse larger images,
// and every image is sent again with every step.
const (
	MaxImageSize = 5 << 20
	MaxImages    = 8
)

// ShowsImage reports whether an attachment is of a kind shown to the model
// (the rank limit, MaxImages, aside). It matches db.ThreadImages' filter.
func ShowsImage(a db.Attachment) bool {
	return slices.Contains(ImageTypes, a.ContentType) && a.Size <= MaxImageSize
}

// ShownImageIDs returns the ids of the attachments of a thread that are
// shown to the model.
func ShownImageIDs(as []db.Attachment) []int64 {
	var ids []int64
	for _, a := range as {
		if ShowsImage(a) && len(ids) < MaxImages {
			ids = append(ids, a.ID)
		}
	}
	return ids
}
