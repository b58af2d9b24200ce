package gateway_test

import (
	"fmt"

	"github.com/notifier/notifier/gateway"
)

// The configuration holds only the SHA-256 of each key (what `notifier
// gateway hash-key` prints); New checks it, and the Gateway that
// gateway.New(cfg, deps) returns serves it (Gateway.Server).
func ExampleConfig() {
	cfg := gateway.Config{Keys: []gateway.Key{{
		Name: "billing", Tenant: "acme", SHA256: gateway.HashKey("s3cret-api-key"), Rate: 50, Burst: 100,
	}}}.WithDefaults()
	fmt.Println(cfg.Listen, cfg.AuthFailures.Limit, cfg.AuthFailures.Window)
	fmt.Println(cfg.Keys[0].SHA256)
	fmt.Println(cfg.Validate())

	cfg.Keys[0].SHA256 = "s3cret-api-key" // a key in clear is refused
	fmt.Println(cfg.Validate())
	// Output:
	// 127.0.0.1:8080 10 1m0s
	// bc01b8eab9adbbe647a5d0a01bfb9d34c37b0de074298fe12b561fd04be89278
	// <nil>
	// keys[0].sha256: must be 64 hex digits (the SHA-256 of the key, never the key), got 14 characters
}
