// Package testenv starts real servers for tests: private redis-server
// processes (standalone and a three-node Redis Cluster), embedded NATS
// JetStream servers that can be stopped and restarted on the same port and
// store, TLS material for secure-connection tests, and fake providers that
// enforce a contract and record what they receive.
//
// The servers themselves are localenv's, which `notifier demo`, `dev` and
// `bench` start too; this package is their test wrapper. Every helper
// takes a testing.TB, calls t.Helper, registers its own t.Cleanup, and
// fails the test loudly when a server cannot start: nothing here skips.
// The fake providers (fake_*.go) are test-only and live here; their
// contract is localenv's (ContractWait), the one the sandbox enforces. A missing redis-server binary fails with the command that
// installs it.
//
// The servers are private to the test that starts them, so tests may run in
// parallel and never touch the machine's shared Redis or NATS services.
package testenv
