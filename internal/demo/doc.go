// Package demo is `notifier demo`: a tour of the three limits with nothing
// to set up. Run starts an embedded NATS JetStream server and the sandbox
// providers (localenv), a dispatcher on in-memory limits, publishes one
// tenant's blast and, a moment later, another tenant's one-time codes,
// and returns when every job has its outcome; Banner and Print write what
// it will do and what it did, layer by layer.
package demo
