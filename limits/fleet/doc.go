// Package fleet keeps what the processes of a fleet share of themselves in
// Redis, beside the limits: the heartbeat that announces each process and
// counts the live ones (what redis.on_failure: local divides a contract by,
// and what `notifier status` lists), and why each paused provider is paused
// (a rate limit, or a refused sender with the fleet's one probe). The
// dispatcher (package dispatch) writes them; package inspect reads them.
package fleet
