// Package gateway is the notifier's HTTP intake (`notifier gateway`): jobs
// come in over HTTP, are limited per API key, per tenant and for the whole
// intake at the edge, and are published to the NOTIFY stream. It is
// stateless: every limit lives in Redis, so any number of instances can run
// behind a load balancer.
//
// # API
//
//   - POST /v1/notifications: one job (SPEC §2 JSON) or an array of up to
//     MaxBatch. The body is decoded and validated by queue.DecodeFilled,
//     the dispatcher's own code path. The answer is 202 {"id": …} (an
//     array: a result per item) only once JetStream has acknowledged the
//     publish. ?priority=high publishes on the priority lane, for a key
//     allowed it (Key.Priority; else 403).
//   - GET /healthz, GET /readyz, GET /metrics, GET /openapi.json (OpenAPI).
//
// A job's id is its Idempotency-Key header when given (an array's item i:
// <key>-<i>), else the body's id, else a random UUID. An id is unique
// within its tenant: the Nats-Msg-Id is queue.MsgID(tenant, id), so a
// retried POST within the stream's duplicate window is one job and two
// tenants may use the same id; an id the client chose is recorded with its
// job's content for Config.IdempotencyTTL (idem.lua), so the same id with
// another job is answered 409 and not published; a job NATS refused before
// it left (nothing stored) gives its claimed id back (unclaim.lua), unless
// a retry of the same job found the id meanwhile and may have stored it
// (the retry deletes the first request's claim token). The
// tenant is the API key's: a body naming another tenant is refused (400,
// field tenant), never published as that tenant.
//
// An array is priced and published as a whole: it costs as many tokens as
// it has items from each bucket it passes, all or nothing; its valid items
// are published and its invalid ones reported (202 with per-item results);
// an array with no valid item is a 400 naming each item's problem.
//
// # Limits
//
// A key (Authorization: Bearer <key>) is found by the SHA-256 of the token,
// compared whole with every configured hash in constant time. A request
// takes its jobs from its key's bucket (Key.Rate, Key.Burst), its tenant's
// (Config.Tenants) and the whole intake's (Config.Capacity), all in one
// EVALSHA of globallimit's take.lua (GCRA on the Redis clock, the fleet
// bucket's script, all or nothing: globallimit.RedisStore.TakeAll; keys
// {<prefix>gw}:<kind>:<name>, one hash tag). Failed authentications are counted per client IP
// (authfail.lua, {<prefix>gwauth:<ip>}; like every per-address bound, an
// IPv6 client's /64, addrKey); over Config.AuthFailures the IP is
// blocked in memory until the window ends, and its requests are refused
// before any key lookup or Redis call (a fleet of P instances gives an
// address at most limit + P tries per window).
//
// Every answer of POST /v1/notifications carries RateLimit-Policy and
// RateLimit (draft-ietf-httpapi-ratelimit-headers) of the bucket that
// decided (policy "key", "tenant" or "capacity"), or "auth" (the
// failed-authentication limit) for one without a valid key; with
// Config.LegacyHeaders also RateLimit-Limit, -Remaining, -Reset and
// X-RateLimit-*.
//
// The checks go from the cheapest to the dearest (SPEC §9 lists them): a
// blocked address, the key (a hash in memory), for a request without a
// key the requests in flight, the capacity bucket as this instance last
// heard of it, the platform's slowness, then Redis for a request without
// a key; the key's and tenant's buckets as last heard of (a lower bound
// of each bucket: it can only be emptier, so this never refuses what
// Redis would grant — except after Redis lost its state, when a key may
// be refused until its bucket would have refilled) refuse before the body
// is read; otherwise the body is read (into a buffer grown as it arrives,
// never its declared length up front), the request counted in flight,
// its jobs counted by a scan of its brackets, and the buckets asked in
// one Redis round trip. A body left unread is dropped by the server up
// to 256 KiB; past that, or chunked, the answer is written at once on the
// hijacked connection, and the rest read and dropped for up to two seconds
// before the close (finishUnread), so that the close cannot reset the
// connection before the client reads the answer.
//
// # Shedding
//
// The gateway refuses rather than queues: past Shed.MaxInFlight requests
// (in total and per client IP; a request with a key counts once its body
// is read, so slow uploads cannot fill the bound), while JetStream acknowledges slower than
// Shed.MaxPublishLatency (ackMeter: a moving average of the acks, or the
// age of the oldest publish waiting), or while the stream is deeper than
// Shed.MaxStreamDepth, a request is answered 503 at once. Serve bounds the
// connections (connLimiter): at Shed.MaxConns, or Shed.MaxConnsPerIP for
// an address, the connection idle longest is closed for the new one, else
// the new one is refused; running out of file descriptors is survived
// (never an exit), answered, and logged at most once a second.
//
// # Server
//
// Handle serves the requests; Server is the fasthttp server `notifier
// gateway` runs it on (HTTP/1.1, bodies streamed so that one over
// MaxRequestBytes gets the gateway's own 413), served by Serve. fasthttp
// rather than net/http because a rejection must cost a small fraction of
// an accepted request: on a 2-core machine net/http spends about 30 µs of
// CPU on a request whose handler does nothing, fasthttp about 22, and a
// 202 costs 120 to 140, so on net/http a 429 could not be 5 times cheaper
// however little its handler did (`notifier bench --gateway` measures all
// three). Nothing a client sends reaches the log: a request the server
// cannot read is answered with a problem and logged by its method, route,
// size and reason only; the server's own messages by their fixed text.
//
// # Concurrency
//
// A Gateway is safe for concurrent use. Run, which adds the rejection
// counts of `notifier top --gateway` to Redis every 5 s and reads the
// stream's depth every second, is its only goroutine besides the server's.
package gateway
