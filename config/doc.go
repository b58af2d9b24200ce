// Package config reads the notifier's YAML file (SPEC §4): every section
// is its owning package's config type (queue.Config, providers.Config,
// userlimit.Rule, ...), merged with the NOTIFIER_* environment overrides,
// filled with defaults and validated with every problem reported at once,
// each under its key path, with a suggestion for a misspelt key.
//
// It also builds what the configuration names: the Redis client (one
// server, a Cluster or Sentinel, TLS and ACL), the NATS JetStream
// connection, the limit set's configuration (Config.Limits) and the caps
// (Config.Caps), so `notifier run`, its operator commands and the bench
// read the file the same way.
package config
