package dispatch

import "github.com/notifier/notifier/providers"

// retriesOnTimeout: TEMPORARY until providers' retry_on_timeout lands.
func retriesOnTimeout(providers.Config) bool { return true }
