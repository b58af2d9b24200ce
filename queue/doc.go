// Package queue is the notifier's side of NATS JetStream: the Job message
// and its validation, the streams and queue consumers, publishing, pulling,
// acknowledging and dead-lettering. It knows nothing of limits or
// providers.
//
// # Subjects
//
// A job for channel sms, push or email is published as JSON (SPEC §2, see
// Decode) on notify.jobs.<channel> (the normal lane) or
// notify.jobs.<channel>.high (the priority lane), with the header
// Nats-Msg-Id set to the job id. A tenant's job goes on
// notify.jobs.<channel>.t.<tenant> or notify.jobs.<channel>.t.<tenant>.high
// (a '.' of the tenant name written '~'): the plain subjects are the
// default tenant's. A job that names its category (transactional or
// marketing) goes on its category's lane, notify.jobs.<channel>.marketing or
// .transactional (or after the tenant token), so that each category of a
// channel is a queue of its own; the priority lane is transactional; a job
// with no category on the normal lane takes its channel's (which the
// dispatcher's configuration sets). KeyFor picks a job's queue. A job that
// is not sent is published to
// notify.dead.<channel> (failed) or notify.suppressed.<channel> (dropped on
// purpose). JobSubject, JobSubjectFor, ParseJobSubject, DeadSubject,
// SuppressedSubject and ChannelOf build and read these subjects.
//
// # Streams
//
// EnsureStreams creates or updates, idempotently and safely from many
// processes at once:
//
//   - NOTIFY: subjects notify.jobs.*, notify.jobs.*.high,
//     notify.jobs.*.marketing, notify.jobs.*.transactional and the same
//     after .t.* only, work-queue retention (a job is
//     deleted once acknowledged), file storage, a two-minute duplicate
//     window, Discard New. A publish to any other subject under notify.jobs
//     (notify.jobs.a.b.c) matches no stream and is refused.
//   - NOTIFY_DEAD: subjects notify.dead.> and notify.suppressed.>, limits
//     retention with a maximum age of 7 days, file storage, a two-minute
//     duplicate window.
//
// # Queues and the pull discipline
//
// Every subject of the job stream is a queue (a Key: channel, tenant,
// lane) with a durable pull consumer of its own, filtered on exactly that
// subject, shared by every process, so each job is out with one worker at
// a time and the jobs of each queue are reachable without reading any
// other's (a work-queue stream requires consumers that do not overlap). The
// default tenant's queues of every channel, <name>-<channel>-high and
// <name>-<channel>-normal, are made by NewConsumer; a category's lane's
// (<name>-<channel>-marketing) and a named tenant's
// (<name>-<channel>-<lane>-t-<tenant>) when Queues first sees its subject
// hold jobs, and deleted by the server after an hour unused. A subject of
// the stream that is no queue (a channel that does not exist,
// notify.jobs.fax) gets a consumer too, so that its jobs reach a worker and
// are dead-lettered as invalid rather than sit unconsumed. All use explicit
// acks with the configured ack wait, no MaxDeliver (deferrals and retries
// must never make the server drop a job; the dispatcher's ledger counts
// provider failures), no BackOff, and a bounded MaxAckPending.
//
// Queues asks the server, in one request, which subjects hold jobs and how
// many. FetchFrom pulls chosen numbers of jobs from chosen queues in one
// round trip (a no-wait pull request each); Poll long-polls several queues
// for the first job (one request of one message each, held by the server:
// no busy loop). The dispatcher schedules between queues with these. Fetch
// is the simple way, with no regard for which queue a job comes from:
// priority lanes first, as soon as one job is available. None pulls more
// than asked: the caller asks for as many as it has free workers, so no
// message ages past its ack wait in a client-side buffer (buffered
// messages are redelivered to another process while still waiting here).
// A request is only ever withdrawn by draining its inbox: the server
// drops a waiting request whose inbox has no interest, and the drain
// still receives anything it sent before, so nothing in flight is left to
// its ack wait. A fetch's requests are answered on an inbox kept from one
// fetch to the next while every request on it ends (no subscription made
// and removed per fetch and lane); one withdrawn is drained and dropped. Pull requests go to the consumers' API subject
// directly rather than through jetstream.Consumer.Fetch, which can neither
// bound a no-wait request held open at MaxAckPending nor withdraw one
// without racing a delivery.
//
// A Delivery is acknowledged with Ack (a double ack: confirmed by the
// server), handed back with Nak or NakWithDelay (each counts as a
// delivery), kept alive with InProgress while a limiter holds it, or
// dropped with Term.
//
// # Deduplication
//
// Publisher.Publish sets Nats-Msg-Id to the job id, so a publish repeated
// within two minutes is stored once (and reported as a duplicate).
// Deduplication of sends after that window, and across redeliveries, is the
// dispatcher's ledger's job.
//
// # Dead letters
//
// Publisher.DeadLetter publishes a delivery's original bytes with the
// headers Notifier-Reason (one word), Notifier-Detail (one line) and
// Notifier-Subject, and a Nats-Msg-Id derived from the original stream
// sequence, so dead-lettering the same delivery twice (a crash between the
// publish and the ack) stores it once. The caller then acks the delivery.
//
// # Connections
//
// Connect dials with a credentials file, a token, or a user and password,
// and TLS with verification always on; it reconnects forever, and refuses a
// server without JetStream or older than MinServerVersion. Config redacts
// its secrets when printed or logged.
package queue
