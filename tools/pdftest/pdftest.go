// Package pdftest writes PDFs for tests.
package pdftest

import (
	"bytes"
	"fmt"
	"strings"
)

// Handmade writes a minimal valid PDF by hand: one page per string,
// in Helvetica (ASCII text only). encrypt adds a standard security handler
// whose password is not empty, as a password-protected file has.
func Handmade(pages []string, encrypt bool) []byte {
	var b bytes.Buffer
	var offsets []int
	obj := func(body string) {
		offsets = append(offsets, b.Len())
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", len(offsets), body)
	}
	b.WriteString("%PDF-1.4\n")
	n := len(pages)
	// 1 catalog, 2 pages, 3 font, then a page and its content per page.
	obj("<< /Type /Catalog /Pages 2 0 R >>")
	var kids []string
	for i := range pages {
		kids = append(kids, fmt.Sprintf("%d 0 R", 4+2*i))
	}
	obj(fmt.Sprintf("<< /Type /Pages /Kids [%s] /Count %d >>", strings.Join(kids, " "), n))
	obj("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
	for i, text := range pages {
		obj(fmt.Sprintf("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>", 5+2*i))
		stream := fmt.Sprintf("BT /F1 24 Tf 72 700 Td (%s) Tj ET", text)
		obj(fmt.Sprintf("<< /Length %d >>\nstream\n%s\nendstream", len(stream), stream))
	}
	trailerExtra := ""
	if encrypt {
		pad := strings.Repeat("ab", 32)
		obj(fmt.Sprintf("<< /Filter /Standard /V 1 /R 2 /O <%s> /U <%s> /P -4 >>", pad, pad))
		trailerExtra = fmt.Sprintf(" /Encrypt %d 0 R /ID [<%s> <%s>]", len(offsets), pad[:32], pad[:32])
	}
	xref := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(offsets)+1)
	for _, o := range offsets {
		fmt.Fprintf(&b, "%010d 00000 n \n", o)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n", len(offsets)+1, trailerExtra, xref)
	return b.Bytes()
}
