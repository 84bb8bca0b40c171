package apiv1

// Share is a folder's share as /api/v1/folders/{id}/shares shows it: with
// whom ("user:ana@example.com", "group:deal-desk") and the role (viewer or
// member). CreatedAt is RFC 3339 in UTC, to the second.
type Share struct {
	ID        int64  `json:"id"`
	With      string `json:"with"`
	Role      string `json:"role"`
	CreatedAt string `json:"created_at"`
}

// ShareList is the answer of GET /api/v1/folders/{id}/shares.
type ShareList struct {
	Shares []Share `json:"shares"`
}

// ShareRequest is the body of POST /api/v1/folders/{id}/shares, and what
// the folders page's form sends: whom ("ana@example.com",
// "user:ana@example.com" or "group:deal-desk") and the role (default
// viewer).
type ShareRequest struct {
	With string `json:"with"`
	Role string `json:"role"`
}
