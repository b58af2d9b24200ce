package gateway_test

import (
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/gateway"
)

func TestConfigValidateNamesEveryProblem(t *testing.T) {
	t.Parallel()
	h := gateway.HashKey("k")
	cfg := gateway.Config{
		Listen: "nowhere",
		Keys: []gateway.Key{
			{Name: "a", SHA256: h, Rate: 1, Burst: 1},
			{Name: "a", Tenant: "bad tenant", SHA256: h, Rate: 0, Burst: 0},
			{Name: "unauthenticated", SHA256: "xyz", Rate: 1, Burst: 1},
		},
		AuthFailures:   gateway.AuthFailures{Limit: -1, Window: time.Millisecond},
		PublishTimeout: time.Hour,
		HeaderTimeout:  time.Hour,
	}.WithDefaults()
	err := cfg.Validate()
	if err == nil {
		t.Fatal("an invalid configuration passed")
	}
	for _, want := range []string{
		"listen:", "keys[1].name:", "keys[1].tenant:", "keys[1].sha256: the same as keys[0]", "keys[1].rate:", "keys[1].burst:",
		"keys[2].name: \"unauthenticated\" is reserved", "keys[2].sha256: must be 64 hex digits",
		"auth_failures.limit:", "auth_failures.window:", "publish_timeout:", "header_timeout: must be from 1s to 1m",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("no problem %q in:\n%v", want, err)
		}
	}
	if err := (gateway.Config{}).WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), "keys: required") {
		t.Errorf("no keys: %v", err)
	}
}
