// Package statuspage is the /status page of the metrics port: a sampler
// that reads the fleet's state (inspect.FleetStatus) every second and keeps
// the last minutes of it, a handler that serves the page, its embedded
// assets and /status.json, and Table, the current numbers formatted
// exactly as `notifier status` prints them, so the page and the command
// never disagree.
//
// The page loads nothing from elsewhere: its script, style and icon are
// embedded and served under a strict Content-Security-Policy.
package statuspage
