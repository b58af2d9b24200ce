// Package ledger is the job ledger: a small record per job id, kept for
// dedup_ttl, that answers "already sent?" on a redelivery, counts transient
// provider failures across redeliveries, leases a job to one sender at a
// time, and notes how a job that was not sent left the pipeline (dead,
// suppressed, deferred, waiting) for `notifier explain --job`.
//
// Redis keeps it fleet-wide, one string per job (record.lua: a new job's
// claim is one SET ... NX PX ... GET, its sent record one APPEND) under the
// hash tag {<prefix>j:<id>} and one atomic script per decision, so it runs unchanged
// on Redis Cluster; Memory is the in-memory twin the dispatcher uses on
// local limits, held to the same answers by the conformance suite. The
// dispatcher (package dispatch) writes it; package inspect reads it.
package ledger
