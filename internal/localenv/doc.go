// Package localenv starts the servers the notifier needs on this machine,
// privately: redis-server processes (one, a three-master Redis Cluster
// with or without replicas, a Sentinel set), embedded NATS JetStream
// servers and clusters, all on free loopback ports, and the sandbox, a
// webhook provider that enforces a rate contract the way a strict SMS
// gateway does.
//
// It is the one place these are started: `notifier demo`, `notifier dev`
// and `notifier bench` use it directly, and the tests through testenv,
// its thin test wrapper (t.Helper, t.Cleanup, t.Fatal). Every function
// here returns an error and takes no testing.TB; every server has a Close
// (or Stop) that its starter owns.
//
// A missing redis-server binary is an error that says how to install it
// (ErrNoRedis); nothing here falls back to a shared server.
package localenv
