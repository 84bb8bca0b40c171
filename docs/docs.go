// Package docs is the user guide (Markdown, one page per topic), the
// OpenAPI document of the JSON API, and their tests: the examples people
// copy load with the real loaders, every relative link of the README and
// the guide resolves, and the document describes every /api/v1 route
// (handlers' tests validate the API's answers against it).
package docs

import _ "embed"

// OpenAPI is the OpenAPI 3.1 document of /api/v1 (openapi.json), served at
// GET /api/v1/openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte
