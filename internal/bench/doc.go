// Package bench measures the notifier on the machine it runs on, each
// figure beside its reference measured in the same run: the throughput of
// the dispatch path with its limits wide open and with every layer on,
// beside a bare JetStream pull-consume-and-ack loop (the floor); Redis
// round trips, commands and CPU per job; the latency each layer adds; the
// pacing of a fleet of `notifier run` processes at a provider's contract;
// and the HTTP gateway's 202 and 429 paths.
//
// Run starts what it needs through localenv (or uses the servers it is
// pointed at) and returns a Result; Print writes the report. `notifier
// bench` is its command line.
package bench
