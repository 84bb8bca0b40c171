package handlers

import (
	"errors"
	"fmt"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"

	"pizzabot/db"
	"pizzabot/jobs"
)

// Files uploaded with a prompt, from the compose form and the API: both
// send multipart/form-data with the files in "files". The whole request is
// bounded here; each file's limit is db.MaxAttachmentSize, checked before
// anything is written so that a refused upload leaves nothing behind.

const (
	// maxUploadTotal bounds the files of one request together.
	maxUploadTotal = 50 << 20
	// maxUploadBody is maxUploadTotal with room for the form's other
	// fields (a prompt of at most 100 KB) and the multipart framing.
	maxUploadBody = maxUploadTotal + 1<<20
	// maxUploadMemory is how much of the files is held in memory; the rest
	// waits in temporary files, which net/http removes when the request
	// ends.
	maxUploadMemory = 8 << 20
	// uploadField is the form field holding the files.
	uploadField = "files"
)

// isMultipart reports whether the request's body is multipart/form-data.
func isMultipart(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "multipart/form-data"
}

// parseUploadForm reads a multipart form of at most maxUploadBody bytes
// into r.PostForm and r.MultipartForm. A larger one is a 413 naming the
// limit, with nothing of it kept.
func parseUploadForm(w http.ResponseWriter, r *http.Request) error {
	r.Body = http.MaxBytesReader(w, r.Body, maxUploadBody)
	if err := r.ParseMultipartForm(maxUploadMemory); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return httpError{http.StatusRequestEntityTooLarge,
				fmt.Sprintf("The files are larger than %d MB in all: send fewer at once.", maxUploadTotal>>20)}
		}
		return httpError{http.StatusBadRequest, "The form could not be read."}
	}
	return nil
}

// uploadedFiles returns the files of the form's "files" field; a file input
// left empty sends a part without a file name, which is not a file.
func uploadedFiles(r *http.Request) []*multipart.FileHeader {
	if r.MultipartForm == nil {
		return nil
	}
	var out []*multipart.FileHeader
	for _, fh := range r.MultipartForm.File[uploadField] {
		if fh.Filename != "" {
			out = append(out, fh)
		}
	}
	return out
}

// checkUploads refuses a set of files that cannot all be attached to one
// new thread: too many, or one too large. It returns the status (413 or
// 400) and a sentence for the user, or 0 when the files are fine.
func checkUploads(fhs []*multipart.FileHeader) (int, string) {
	if len(fhs) > db.MaxAttachmentsPerThread {
		return http.StatusBadRequest, fmt.Sprintf("Attach at most %d files to a thread; %d were sent.", db.MaxAttachmentsPerThread, len(fhs))
	}
	for _, fh := range fhs {
		if fh.Size > db.MaxAttachmentSize {
			return http.StatusRequestEntityTooLarge, fmt.Sprintf("%s is larger than %d MB, the limit for one file.", db.CleanAttachmentName(fh.Filename), db.MaxAttachmentSize>>20)
		}
	}
	return 0, ""
}

// openUploads opens the files for jobs.StartRequest.Files. The returned
// function closes them; call it once the thread is started.
func openUploads(fhs []*multipart.FileHeader) ([]jobs.Upload, func(), error) {
	var files []multipart.File
	closeAll := func() {
		for _, f := range files {
			_ = f.Close()
		}
	}
	out := make([]jobs.Upload, 0, len(fhs))
	for _, fh := range fhs {
		f, err := fh.Open()
		if err != nil {
			closeAll()
			return nil, func() {}, fmt.Errorf("open upload %q: %w", fh.Filename, err)
		}
		files = append(files, f)
		out = append(out, jobs.Upload{Name: fh.Filename, ContentType: fh.Header.Get("Content-Type"), Body: f})
	}
	return out, closeAll, nil
}

// uploadNames lists the files' names, for a form that must ask for them
// again (a browser cannot refill a file input).
func uploadNames(fhs []*multipart.FileHeader) string {
	names := make([]string, 0, len(fhs))
	for _, fh := range fhs {
		names = append(names, db.CleanAttachmentName(fh.Filename))
	}
	return strings.Join(names, ", ")
}
