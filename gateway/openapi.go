package gateway

import _ "embed"

// OpenAPI is the OpenAPI 3.1 document of the gateway's HTTP API, served at
// GET /openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte
