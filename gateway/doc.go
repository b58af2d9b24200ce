// Package gateway is the notifier's HTTP intake (`notifier gateway`): jobs
// come in over HTTP, are limited per API key at the edge, and are published
// to the NOTIFY stream. It is stateless: every limit lives in Redis, so any
// number of instances can run behind a load balancer.
//
// # API
//
//   - POST /v1/notifications: one job (SPEC §2 JSON) or an array of up to
//     MaxBatch. The body is decoded and validated by queue.DecodeFilled,
//     the dispatcher's own code path. The answer is 202 {"id": …} (an
//     array: a result per item) only once JetStream has acknowledged the
//     publish. ?priority=high publishes on the priority lane.
//   - GET /healthz, GET /readyz, GET /metrics, GET /openapi.json (OpenAPI).
//
// A job's id is its Idempotency-Key header when given (an array's item i:
// <key>-<i>), else the body's id, else a random UUID; it is also the
// Nats-Msg-Id, so a retried POST within the stream's duplicate window is
// one job. The tenant is the API key's: a body naming another tenant is
// refused (400, field tenant), never published as that tenant.
//
// An array is priced and published as a whole: it costs as many tokens as
// it has items, all or nothing; its valid items are published and its
// invalid ones reported (202 with per-item results); an array with no
// valid item is a 400 naming each item's problem.
//
// # Limits
//
// A key (Authorization: Bearer <key>) is found by the SHA-256 of the token,
// compared with every configured hash in constant time. Each key has a
// token bucket (Key.Rate, Key.Burst) in Redis (take.lua: GCRA on the Redis
// clock, one EVALSHA, key {<prefix>gw:<name>}). Failed authentications are
// counted per client IP (authfail.lua, {<prefix>gwauth:<ip>}); over
// Config.AuthFailures every request from that IP gets 429 until the window
// ends: a bad key in Redis, a good one from the block this instance has
// learnt (so a fleet of P instances gives an address at most limit + P
// tries per window).
//
// Every answer of POST /v1/notifications carries RateLimit-Policy and
// RateLimit (draft-ietf-httpapi-ratelimit-headers): the policy "key" for an
// authenticated request, "auth" (the failed-authentication limit) for one
// without a valid key; with Config.LegacyHeaders also X-RateLimit-*.
//
// A 401 or 429 decodes no JSON and publishes nothing: the key is a hash in
// memory; a key this instance has seen refused and whose bucket cannot yet
// hold one token is refused before its body is read, without Redis (a
// lower bound of the bucket: it can only be emptier, so this never refuses
// what Redis would grant — except after Redis lost its state, when a key
// may be refused until its bucket would have refilled); otherwise the body
// is read, its jobs counted by a scan of its brackets, and the bucket asked
// in one Redis round trip. A body left unread is dropped by the server up
// to 256 KiB; a larger or chunked one is read and dropped after the answer
// is decided and the connection closed (finishUnread), so that the close
// cannot reset the connection before the client reads the answer.
//
// # Server
//
// Handle serves the requests; Server is the fasthttp server `notifier
// gateway` runs it on (HTTP/1.1, bodies streamed so that one over
// MaxRequestBytes gets the gateway's own 413). fasthttp rather than
// net/http because a rejection must cost a small fraction of an accepted
// request: on a 2-core machine net/http spends about 30 µs of CPU on a
// request whose handler does nothing, fasthttp about 22, and a 202 costs
// 120 to 140, so on net/http a 429 could not be 5 times cheaper however
// little its handler did (`notifier bench --gateway` measures all three).
//
// # Concurrency
//
// A Gateway is safe for concurrent use. Run, which adds the rejection
// counts of `notifier top --gateway` to Redis every 5 s, is its only
// goroutine.
package gateway
