package ledger

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/internal/luapre"
)

// ClaimStatus is what a ledger claim found.
type ClaimStatus int

const (
	// Claimed: the caller holds the send lease and may send.
	Claimed ClaimStatus = iota
	// AlreadySent: the job was sent before; the caller must not send it again.
	AlreadySent
	// Busy: another worker holds an unexpired lease (it is sending this job
	// now); the caller waits Claim.BusyFor and asks again.
	Busy
)

// Claim is the answer of Ledger.Claim.
type Claim struct {
	Status   ClaimStatus
	Attempts int           // transient provider failures counted so far, across redeliveries
	BusyFor  time.Duration // Busy: until the other lease ends
}

// Ledger is the job ledger: a small record per job id, kept for dedup_ttl,
// that answers "already sent?" on a redelivery, counts transient provider
// failures across redeliveries (deferrals never count), and leases a job to
// one sender at a time, so that a copy redelivered after ack_wait while the
// first worker is still sending waits instead of sending twice.
//
// Implementations are safe for concurrent use.
type Ledger interface {
	// Claim takes (or extends, for the same owner) the send lease of job id
	// for lease.
	Claim(ctx context.Context, id, owner string, lease time.Duration) (Claim, error)
	// Sent records that the provider accepted the job and clears the lease.
	Sent(ctx context.Context, id, owner string) error
	// Failed counts one transient provider failure, notes its class (the
	// provider's status class, providers.StatusClass: "5xx", "error"; never
	// the provider's text), clears the owner's lease, and returns the
	// failures counted so far.
	Failed(ctx context.Context, id, owner, class string) (int, error)
	// Release gives up the owner's lease without counting anything (a
	// deferral, a shutdown).
	Release(ctx context.Context, id, owner string) error
	// Ended is Release that also notes how the job left the pipeline
	// unsent, for `notifier explain`: kind EndDead or EndSuppressed with
	// its Notifier-Reason. The reason must be one of the dispatcher's own
	// words, never a provider's text (which may hold a recipient). A sent
	// job's record is left as it is.
	Ended(ctx context.Context, id, owner, kind, reason string) error
	// Deferred is Release that also notes why the job was put off (one of
	// the Defer* words) and for how long, and counts the deferral, for
	// `notifier explain`. A sent job's record is left as it is.
	Deferred(ctx context.Context, id, owner, why string, delay time.Duration) error
	// Waiting notes a wait the job makes while it holds its lease (WaitSlot:
	// its send slot is far), releasing nothing. A sent job's record is left
	// as it is.
	Waiting(ctx context.Context, id, owner, why string, delay time.Duration) error
}

// Why a job was put off: the ledger's note of a deferral (Ledger.Deferred,
// Ledger.Waiting), the deferral's debug log line, and `notifier explain
// --job`'s answer.
const (
	DeferUserLimit          = "user_limit"          // the per-user cap, on_exceed: defer
	DeferDigest             = "digest"              // held for the user's next digest
	DeferDigestUnpublished  = "digest_unpublished"  // its digest is due but could not be published yet
	DeferCircuitOpen        = "circuit_open"        // the provider's circuit breaker is open
	DeferRecipientThrottled = "recipient_throttled" // the provider throttles this recipient
	DeferQuota              = "quota"               // the provider's quota is spent until its next window
	DeferProviderPaused     = "provider_paused"     // the provider is paused (a 429, a refused sender, notifier pause)
	DeferRefused            = "refused"             // Redis refused the job's own data (limits.Refused): a record or key it cannot read
	WaitSlot                = "slot"                // waiting in the provider's leaky queue for its send slot
)

// The kinds of Ledger.Ended.
const (
	EndDead       = "dead"
	EndSuppressed = "suppressed"
)

var (
	// record.lua, the record's string form (lenstr, entry, encode, parse,
	// convert), prepended to every ledger script; update.lua (load, store)
	// to those that rewrite a record.
	//go:embed record.lua
	ledgerRecordLua string
	//go:embed update.lua
	ledgerUpdateLua string

	//go:embed claim.lua
	ledgerClaimLua    string
	ledgerClaimScript = redis.NewScript(luapre.Now + luapre.Num + ledgerRecordLua + ledgerClaimLua)

	// The record's other decisions, one script each: a transient failure
	// counted (Failed), the lease given up with or without an end noted
	// (Release, Ended), the record of an unsent job forgotten
	// (ResetForReplay).
	// keep_record, the expiry after a change that may leave a lease.
	//go:embed keep.lua
	ledgerKeepLua string

	//go:embed failed.lua
	ledgerFailedLua    string
	ledgerFailedScript = redis.NewScript(luapre.Num + ledgerRecordLua + ledgerUpdateLua + ledgerKeepLua + ledgerFailedLua)

	//go:embed release.lua
	ledgerReleaseLua    string
	ledgerReleaseScript = redis.NewScript(luapre.Now + luapre.Num + ledgerRecordLua + ledgerUpdateLua + ledgerKeepLua + ledgerReleaseLua)

	//go:embed reset.lua
	ledgerResetLua    string
	ledgerResetScript = redis.NewScript(luapre.Num + ledgerRecordLua + ledgerUpdateLua + ledgerResetLua)

	// Jobs sent (Sent, SentGroup): the records of many jobs in one run.
	//go:embed sent.lua
	ledgerSentLua    string
	ledgerSentScript = redis.NewScript(luapre.Num + ledgerRecordLua + ledgerSentLua)
)

// Redis keeps the ledger in Redis, one string per job (record.lua) under
// the hash tag {<prefix>j:<id>}, so it runs unchanged on Redis Cluster.
// Every operation is one atomic script reading the Redis clock; a record
// an earlier version kept as a hash is read as it is and rewritten as a
// string by the first script that meets it.
type Redis struct {
	rdb    redis.Cmdable
	prefix string
	ttl    time.Duration
	now    func() time.Time // WithNow, tests only: when set, scripts get this clock instead of TIME
}

var _ Ledger = (*Redis)(nil)

// NewRedis returns a ledger that remembers each job for ttl
// (dedup_ttl) after its last change; a claim keeps it ttl past its lease's
// end, which the sent record written within that lease leaves as it is.
func NewRedis(rdb redis.Cmdable, prefix string, ttl time.Duration, opts ...Option) *Redis {
	return &Redis{rdb: rdb, prefix: prefix, ttl: ttl, now: clockOf(opts)}
}

// Key is the Redis key of job id's ledger record.
func Key(prefix, id string) string { return "{" + prefix + "j:" + id + "}" }

// KeyOf is the Redis key of job id's record in this ledger (Key under its
// prefix): what a pipeline groups claims by on Redis Cluster.
func (l *Redis) KeyOf(id string) string { return Key(l.prefix, id) }

// Load loads the ledger scripts, so they can be sent inside a pipeline
// (where a NOSCRIPT reply does not fall back to EVAL).
func (l *Redis) Load(ctx context.Context) error {
	for _, s := range []*redis.Script{ledgerClaimScript, ledgerFailedScript, ledgerReleaseScript, ledgerResetScript, ledgerSentScript} {
		if err := s.Load(ctx, l.rdb).Err(); err != nil {
			return fmt.Errorf("load ledger script: %w", err)
		}
	}
	return nil
}

// Claim implements Ledger.
func (l *Redis) Claim(ctx context.Context, id, owner string, lease time.Duration) (Claim, error) {
	g := l.ClaimGroup()
	c := g.Add(id, owner, lease)
	g.cmd = ledgerClaimScript.Run(ctx, l.rdb, g.keys, g.args...)
	return c.Result()
}

// ClaimGroup is the claims of several jobs made by one script run: the
// same answers, in the order of Add, as that many Claim calls at one
// instant, for one EVALSHA and one read of the clock. On Redis Cluster the
// jobs of one group must hash to one slot (LedgerSlot). Add and Queue are
// not safe for concurrent use; the ClaimCmds' Results are, once the
// pipeline has run.
type ClaimGroup struct {
	l    *Redis
	ids  []string
	keys []string
	args []any
	cmd  *redis.Cmd

	lease    int64 // the latest claim's lease (ms), boxed in leaseArg
	leaseArg any
	handles  []ClaimCmd

	once    sync.Once
	replies []Claim
	err     error
}

// groupCap is the claims or records a group makes room for at its start
// (it grows past it as a slice does): a pipeline's group is a few to a
// few dozen jobs, and growing from nothing would cost an allocation every
// doubling of each of its slices.
const groupCap = 16

// ClaimGroup starts a group of claims.
func (l *Redis) ClaimGroup() *ClaimGroup {
	args := make([]any, 2, 2+2*groupCap)
	args[0], args[1] = l.ttl.Milliseconds(), l.nowArg()
	return &ClaimGroup{l: l, args: args, ids: make([]string, 0, groupCap), keys: make([]string, 0, groupCap),
		handles: make([]ClaimCmd, 0, groupCap)}
}

// Add adds the claim of job id by owner for lease and returns its handle.
func (g *ClaimGroup) Add(id, owner string, lease time.Duration) *ClaimCmd {
	g.ids = append(g.ids, id)
	g.keys = append(g.keys, Key(g.l.prefix, id))
	// The claims of a group mostly share their lease: boxed once.
	if ms := lease.Milliseconds(); g.leaseArg == nil || ms != g.lease {
		g.lease, g.leaseArg = ms, ms
	}
	g.args = append(g.args, owner, g.leaseArg)
	// The handle lives in the group's own slice (it never changes once
	// made, so a pointer into a slice that grew since still reads right).
	g.handles = append(g.handles, ClaimCmd{g: g, i: len(g.ids) - 1})
	return &g.handles[len(g.handles)-1]
}

// Len is the number of claims added.
func (g *ClaimGroup) Len() int { return len(g.ids) }

// Queue queues the group's script on pipe (EVALSHA only: call Load first,
// and again when a Result says ErrNotLoaded). An empty group queues
// nothing.
func (g *ClaimGroup) Queue(ctx context.Context, pipe redis.Pipeliner) {
	if len(g.ids) > 0 {
		g.cmd = ledgerClaimScript.EvalSha(ctx, pipe, g.keys, g.args...)
	}
}

// ClaimCmd is a claim queued on a pipeline in a ClaimGroup; its Result is
// ready after the pipeline's Exec.
type ClaimCmd struct {
	g *ClaimGroup
	i int
}

// Result decodes the claim; a script missing from the server's cache wraps
// ErrNotLoaded.
func (c *ClaimCmd) Result() (Claim, error) {
	g := c.g
	g.once.Do(g.decode)
	if g.err != nil {
		return Claim{}, fmt.Errorf("claim job %s: %w", g.ids[c.i], g.err)
	}
	return g.replies[c.i], nil
}

// decode reads the group's reply once.
func (g *ClaimGroup) decode() {
	if g.cmd == nil {
		g.err = errors.New("claim not queued")
		return
	}
	res, err := g.cmd.Int64Slice()
	switch {
	case err != nil && redis.HasErrorPrefix(err, "NOSCRIPT"):
		g.err = ErrNotLoaded
		return
	case err != nil:
		g.err = err
		return
	case len(res) != 3*len(g.ids):
		g.err = fmt.Errorf("unexpected reply %v for %d claims", res, len(g.ids))
		return
	}
	g.replies = make([]Claim, len(g.ids))
	for i := range g.replies {
		c := Claim{Status: ClaimStatus(res[3*i]), Attempts: int(res[3*i+1]), BusyFor: time.Duration(res[3*i+2]) * time.Millisecond}
		if c.Status < Claimed || c.Status > Busy {
			g.err = fmt.Errorf("unexpected status %d", res[3*i])
			return
		}
		g.replies[i] = c
	}
}

// ErrNotLoaded: a pipelined script was not in the server's script cache (a
// restart, a failover): Load the scripts and try again.
var ErrNotLoaded = errors.New("script not loaded on the server")

// settle runs script (ledger_failed, ledger_release or ledger_reset) on
// job id's record with args; op names the operation in the error.
func (l *Redis) settle(ctx context.Context, script *redis.Script, op, id string, args ...any) (int, error) {
	n, err := script.Run(ctx, l.rdb, []string{Key(l.prefix, id)}, args...).Int()
	if err != nil {
		return 0, fmt.Errorf("record %s for job %s: %w", op, id, err)
	}
	return n, nil
}

// Sent implements Ledger.
func (l *Redis) Sent(ctx context.Context, id, owner string) error {
	g := l.SentGroup()
	g.Add(id, 0, "")
	g.cmd = ledgerSentScript.Run(ctx, l.rdb, g.keys, g.args...)
	return g.Err()
}

// SentGroup is the "sent" records of several jobs written by one script
// run: s = 1 (which every later claim reads first), the message sent when
// it is known and the lease ended, atomically for each job. A job is sent
// within the lease of its latest claim, which keeps the record dedup_ttl
// past the lease's end, so the record outlives the send by dedup_ttl as it
// is; a record no claim wrote is kept dedup_ttl from the write. On
// Redis Cluster the jobs of one group must hash to one slot (KeyOf). Add
// and Queue are not safe for concurrent use; Err is, once the pipeline has
// run.
type SentGroup struct {
	l    *Redis
	ids  []string
	keys []string
	args []any
	cmd  *redis.Cmd
}

// SentGroup starts a group of sent records.
func (l *Redis) SentGroup() *SentGroup {
	args := make([]any, 1, 1+2*groupCap)
	args[0] = l.ttl.Milliseconds()
	return &SentGroup{l: l, args: args, ids: make([]string, 0, groupCap), keys: make([]string, 0, groupCap)}
}

// Add adds the record of job id, sent as the message of stream sequence
// seq whose bytes have digest, so that a later message with the same id
// can be told apart (SentFrom); 0 and "" record nothing beside s.
func (g *SentGroup) Add(id string, seq uint64, digest string) {
	g.ids = append(g.ids, id)
	g.keys = append(g.keys, Key(g.l.prefix, id))
	if seq == 0 {
		g.args = append(g.args, "", "")
		return
	}
	g.args = append(g.args, seq, digest)
}

// Len is the number of records added.
func (g *SentGroup) Len() int { return len(g.ids) }

// Queue queues the group's script on pipe (EVALSHA only: call Load first,
// and again when Err says ErrNotLoaded). An empty group queues nothing.
func (g *SentGroup) Queue(ctx context.Context, pipe redis.Pipeliner) {
	if len(g.ids) > 0 {
		g.cmd = ledgerSentScript.EvalSha(ctx, pipe, g.keys, g.args...)
	}
}

// Err is the group's error once its pipeline has run: nil when every
// record was written; a script missing from the server's cache wraps
// ErrNotLoaded.
func (g *SentGroup) Err() error {
	var err error
	switch {
	case len(g.ids) == 0:
		return nil
	case g.cmd == nil:
		err = errors.New("not queued")
	default:
		err = g.cmd.Err()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			err = ErrNotLoaded
		}
	}
	if err == nil {
		return nil
	}
	if len(g.ids) == 1 {
		return fmt.Errorf("record sent for job %s: %w", g.ids[0], err)
	}
	return fmt.Errorf("record sent for %d jobs (%s, ...): %w", len(g.ids), g.ids[0], err)
}

// SentFrom reads which message of job id was sent (SentGroup.Add): its
// stream sequence and digest; ok is false when the record holds none.
func (l *Redis) SentFrom(ctx context.Context, id string) (seq uint64, digest string, ok bool, err error) {
	fields, err := l.fields(ctx, id)
	if err != nil {
		return 0, "", false, fmt.Errorf("read the sent record of job %s: %w", id, err)
	}
	q, h := fields["q"], fields["h"]
	if q == "" {
		return 0, "", false, nil
	}
	seq, err = strconv.ParseUint(q, 10, 64)
	if err != nil {
		return 0, "", false, fmt.Errorf("read the sent record of job %s: sequence %q: %w", id, q, err)
	}
	return seq, h, true, nil
}

// fields reads job id's record, field -> value (empty when there is none).
func (l *Redis) fields(ctx context.Context, id string) (map[string]string, error) {
	key := Key(l.prefix, id)
	return l.fieldsOf(ctx, key, l.rdb.Get(ctx, key))
}

// fieldsOf reads the record at key from get, a GET of it that has run, in
// either form: the string of this version (record.lua), or the hash of an
// earlier one (WRONGTYPE: read with HGETALL), which only a script rewrites.
func (l *Redis) fieldsOf(ctx context.Context, key string, get *redis.StringCmd) (map[string]string, error) {
	v, err := get.Result()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, nil
	case redis.HasErrorPrefix(err, "WRONGTYPE"):
		return l.rdb.HGetAll(ctx, key).Result()
	case err != nil:
		return nil, err
	}
	return ParseRecord(v)
}

// ParseRecord reads a ledger record string (record.lua: entries of a
// field's one-letter name, its value's length in bytes, ':' and the
// value, a later entry of a field overriding an earlier one, an empty
// value clearing it) into its fields. A string that is not one gives an
// error saying where it breaks.
func ParseRecord(s string) (map[string]string, error) {
	fields := map[string]string{}
	for i := 0; i < len(s); {
		c := strings.IndexByte(s[i+1:], ':')
		if c < 0 {
			return nil, fmt.Errorf("ledger record malformed at byte %d: no length", i)
		}
		c += i + 1
		// Decimal digits only, as record.lua's parse takes them (Atoi
		// alone would take a sign, and the scripts would then refuse a
		// record this reads).
		digits := s[i+1 : c]
		n, err := strconv.Atoi(digits)
		if digits == "" || strings.Trim(digits, "0123456789") != "" || err != nil || n > len(s)-c-1 {
			return nil, fmt.Errorf("ledger record malformed at byte %d: length %q", i, s[i+1:c])
		}
		f, v := s[i:i+1], s[c+1:c+1+n]
		if v == "" {
			delete(fields, f)
		} else {
			fields[f] = v
		}
		i = c + 1 + n
	}
	return fields, nil
}

// Failed implements Ledger.
func (l *Redis) Failed(ctx context.Context, id, owner, class string) (int, error) {
	return l.settle(ctx, ledgerFailedScript, "failed", id, owner, l.ttl.Milliseconds(), class)
}

// Release implements Ledger.
func (l *Redis) Release(ctx context.Context, id, owner string) error {
	_, err := l.settle(ctx, ledgerReleaseScript, "release", id, owner, l.ttl.Milliseconds())
	return err
}

// Ended implements Ledger: the release's script notes the end in the same
// run, so it costs no round trip more.
func (l *Redis) Ended(ctx context.Context, id, owner, kind, reason string) error {
	if err := checkEnd(kind); err != nil {
		return fmt.Errorf("record %s for job %s: %w", kind, id, err)
	}
	_, err := l.settle(ctx, ledgerReleaseScript, "end", id, owner, l.ttl.Milliseconds(), kind, reason)
	return err
}

// Deferred implements Ledger: the release's script notes the deferral in
// the same run, so it costs no round trip more.
func (l *Redis) Deferred(ctx context.Context, id, owner, why string, delay time.Duration) error {
	return l.note(ctx, "deferral", "deferred", id, owner, why, delay)
}

// Waiting implements Ledger.
func (l *Redis) Waiting(ctx context.Context, id, owner, why string, delay time.Duration) error {
	return l.note(ctx, "wait", "waiting", id, owner, why, delay)
}

// note runs release.lua's note of kind ("deferred": the lease
// given up; "waiting": kept), why and until now + delay.
func (l *Redis) note(ctx context.Context, op, kind, id, owner, why string, delay time.Duration) error {
	_, err := l.settle(ctx, ledgerReleaseScript, op, id, owner, l.ttl.Milliseconds(), kind, why, max(delay, 0).Milliseconds(), l.nowArg())
	return err
}

// nowArg is the scripts' now argument: empty (the Redis clock) but in tests
// (WithNow).
func (l *Redis) nowArg() string {
	if l.now == nil {
		return ""
	}
	return strconv.FormatInt(l.now().UnixMicro(), 10)
}

// checkEnd refuses a kind Ended does not know.
func checkEnd(kind string) error {
	switch kind {
	case EndDead, EndSuppressed:
		return nil
	}
	return fmt.Errorf("unknown end %q", kind)
}

// Record is what the ledger holds for one job: the answer of
// Redis.Record and Memory.Record.
type Record struct {
	// Found is false when the ledger holds nothing for the job: never
	// claimed (dead or suppressed before its admission, or not taken
	// yet), or forgotten dedup_ttl after its last change.
	Found bool
	// Sent: the provider accepted the job.
	Sent bool
	// Attempts is the transient provider failures counted so far.
	Attempts int
	// Owner holds the send lease (an instance and a delivery number)
	// until LeaseUntil; empty when no lease is held or it has ended.
	Owner      string
	LeaseUntil time.Time
	// Seq is the stream sequence of the message that was sent (0 when not
	// recorded).
	Seq uint64
	// Outcome is EndDead or EndSuppressed when the job left unsent while
	// it held its lease, with its Notifier-Reason in Reason; empty
	// otherwise.
	Outcome, Reason string
	// LastError is the class of the last transient provider failure
	// ("5xx", "error": providers.StatusClass), empty when none was counted.
	LastError string
	// Why is why the job was last put off (a Defer* word, or WaitSlot),
	// Until when it is due again (on the Redis clock), and Deferrals how
	// many times it was handed back or held; empty and zero when never.
	Why       string
	Until     time.Time
	Deferrals int
	// TTL is how long the record is still kept.
	TTL time.Duration
}

// Record reads job id's ledger record in one round trip (two for a record
// an earlier version wrote), changing nothing. The lease shows only while
// it lasts, on the Redis clock.
func (l *Redis) Record(ctx context.Context, id string) (Record, error) {
	key := Key(l.prefix, id)
	pipe := l.rdb.Pipeline()
	get := pipe.Get(ctx, key)
	ttl := pipe.PTTL(ctx, key)
	now := pipe.Time(ctx)
	_, _ = pipe.Exec(ctx) // each command carries its error
	if err := errors.Join(ttl.Err(), now.Err()); err != nil {
		return Record{}, fmt.Errorf("read the ledger record of job %s: %w", id, err)
	}
	fields, err := l.fieldsOf(ctx, key, get)
	if err != nil {
		return Record{}, fmt.Errorf("read the ledger record of job %s: %w", id, err)
	}
	if l.now != nil {
		now.SetVal(l.now())
	}
	return parseRecord(id, fields, ttl.Val(), now.Val())
}

// parseRecord decodes a ledger record's fields read at now.
func parseRecord(id string, h map[string]string, ttl time.Duration, now time.Time) (Record, error) {
	if len(h) == 0 {
		return Record{}, nil
	}
	r := Record{Found: true, Sent: h["s"] == "1", Outcome: h["x"], Reason: h["r"], LastError: h["e"], Why: h["w"], TTL: max(ttl, 0)}
	var err error
	num := func(f string) int64 {
		v, ok := h[f]
		if !ok || err != nil {
			return 0
		}
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil {
			err = fmt.Errorf("read the ledger record of job %s: field %s %q: %w", id, f, v, perr)
		}
		return n
	}
	r.Attempts = int(num("a"))
	r.Seq = uint64(max(num("q"), 0))
	r.Deferrals = int(num("n"))
	if u := num("u"); u > 0 {
		r.Until = time.UnixMicro(u)
	}
	if end := num("l"); !r.Sent && h["o"] != "" && end > now.UnixMicro() {
		r.Owner, r.LeaseUntil = h["o"], time.UnixMicro(end)
	}
	return r, err
}

// HeaderReplayed marks a job republished by `notifier dead replay`; its
// value is the replay's time (RFC 3339).
const HeaderReplayed = "Notifier-Replayed"

// ResetForReplay forgets the ledger record of job id before a dead letter
// is replayed, so the replay starts with no attempts counted. A job the
// ledger says was sent is kept and reported (sent = true): replaying it
// would send it twice.
func (l *Redis) ResetForReplay(ctx context.Context, id string) (sent bool, err error) {
	n, err := l.settle(ctx, ledgerResetScript, "reset", id)
	if err != nil {
		return false, err
	}
	return n < 0, nil
}

// Option configures a Redis or Memory.
type Option func(*options)

type options struct {
	now func() time.Time // nil: the ledger's own clock
}

// clockOf is the clock opts give (WithNow), nil when none does.
func clockOf(opts []Option) func() time.Time {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o.now
}

// WithNow sets the ledger's clock; nil keeps its own, as WithNow does
// for the limit backends (leaky, userlimit, globallimit). Memory
// reads it (default time.Now). Redis sends it to its scripts instead
// of reading the Redis TIME, and reads a Record's lease against it: for
// tests only (a fake clock, step-by-step comparison of the backends),
// since with it the fleet no longer shares one clock.
func WithNow(now func() time.Time) Option {
	return func(o *options) { o.now = now }
}

// Memory keeps the ledger in this process: the demo's, and the
// fallback of redis.on_failure: local, where it still stops one process from
// sending a job twice (across processes JetStream's single delivery is then
// the only guard). Records are dropped ttl after their last change.
type Memory struct {
	now func() time.Time
	ttl time.Duration

	mu        sync.Mutex
	recs      map[string]*ledgerRec
	lastSweep time.Time
}

type ledgerRec struct {
	sent      bool
	attempts  int
	outcome   string // Ended: dead or suppressed
	reason    string
	lastError string // Failed: the class of the last failure
	why       string // Deferred, Waiting: why it was put off
	until     time.Time
	deferrals int
	owner     string
	leaseEnd  time.Time
	expiresAt time.Time
}

var _ Ledger = (*Memory)(nil)

// NewMemory returns an in-process ledger that drops each job's record
// ttl after its last change (a claim: ttl past its lease's end, which a
// sent record leaves as it is), as Redis does; its clock is WithNow's,
// else time.Now.
func NewMemory(ttl time.Duration, opts ...Option) *Memory {
	now := clockOf(opts)
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, ttl: ttl, recs: map[string]*ledgerRec{}}
}

// get returns the live record of id, creating it when create is set; the
// caller holds mu. It sweeps expired records at most once per ttl/4.
func (l *Memory) get(id string, now time.Time, create bool) *ledgerRec {
	if now.Sub(l.lastSweep) > l.ttl/4 {
		for k, r := range l.recs {
			if !now.Before(r.expiresAt) {
				delete(l.recs, k)
			}
		}
		l.lastSweep = now
	}
	r := l.recs[id]
	if r != nil && !now.Before(r.expiresAt) {
		delete(l.recs, id)
		r = nil
	}
	if r == nil && create {
		r = &ledgerRec{}
		l.recs[id] = r
	}
	return r
}

// Claim implements Ledger.
func (l *Memory) Claim(_ context.Context, id, owner string, lease time.Duration) (Claim, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	r := l.get(id, now, true)
	if r.sent {
		return Claim{Status: AlreadySent, Attempts: r.attempts}, nil
	}
	if r.owner != "" && r.owner != owner && r.leaseEnd.After(now) {
		busy := (r.leaseEnd.Sub(now) + time.Millisecond - 1).Truncate(time.Millisecond) // ceil, as the script does
		return Claim{Status: Busy, Attempts: r.attempts, BusyFor: busy}, nil
	}
	// Kept dedup_ttl past the lease's end, as claim.lua does.
	r.owner, r.leaseEnd, r.expiresAt = owner, now.Add(lease), now.Add(l.ttl+lease)
	return Claim{Status: Claimed, Attempts: r.attempts}, nil
}

// Sent implements Ledger.
func (l *Memory) Sent(_ context.Context, id, _ string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	r := l.get(id, now, true)
	// As sent.lua: the record is kept at least dedup_ttl from now (one a
	// claim holds already is, dedup_ttl past its lease's end).
	if e := now.Add(l.ttl); r.expiresAt.Before(e) {
		r.expiresAt = e
	}
	r.sent, r.owner = true, ""
	return nil
}

// Failed implements Ledger.
func (l *Memory) Failed(_ context.Context, id, owner, class string) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	r := l.get(id, now, true)
	r.attempts++
	if class != "" {
		r.lastError = class
	}
	if r.owner == owner {
		r.owner = ""
	}
	l.keep(r, now)
	return r.attempts, nil
}

// Release implements Ledger.
func (l *Memory) Release(_ context.Context, id, owner string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.get(id, l.now(), false); r != nil && r.owner == owner {
		r.owner = ""
	}
	return nil
}

// Ended implements Ledger.
func (l *Memory) Ended(_ context.Context, id, owner, kind, reason string) error {
	if err := checkEnd(kind); err != nil {
		return fmt.Errorf("record %s for job %s: %w", kind, id, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	r := l.get(id, now, true)
	if r.owner == owner {
		r.owner = ""
	}
	if !r.sent {
		r.outcome, r.reason = kind, reason
	}
	l.keep(r, now)
	return nil
}

// Deferred implements Ledger.
func (l *Memory) Deferred(_ context.Context, id, owner, why string, delay time.Duration) error {
	l.note(id, owner, why, delay, true)
	return nil
}

// Waiting implements Ledger.
func (l *Memory) Waiting(_ context.Context, id, owner, why string, delay time.Duration) error {
	l.note(id, owner, why, delay, false)
	return nil
}

// note records a deferral (release) or a wait, as release.lua does.
func (l *Memory) note(id, owner, why string, delay time.Duration, release bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	r := l.get(id, now, true)
	if release && r.owner == owner {
		r.owner = ""
	}
	if !r.sent {
		r.why, r.until = why, now.Add(max(delay, 0))
		if release {
			r.deferrals++
		}
	}
	l.keep(r, now)
}

// keep makes r live the ledger's ttl more, never shortening its expiry
// while it holds a lease or was sent, as keep.lua does.
func (l *Memory) keep(r *ledgerRec, now time.Time) {
	if (r.owner == "" && !r.sent) || r.expiresAt.Before(now.Add(l.ttl)) {
		r.expiresAt = now.Add(l.ttl)
	}
}

// Record reads job id's record (see Redis.Record; Seq is not kept
// here).
func (l *Memory) Record(_ context.Context, id string) (Record, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	r := l.get(id, now, false)
	if r == nil {
		return Record{}, nil
	}
	rec := Record{Found: true, Sent: r.sent, Attempts: r.attempts, Outcome: r.outcome, Reason: r.reason, LastError: r.lastError,
		Why: r.why, Until: r.until, Deferrals: r.deferrals, TTL: r.expiresAt.Sub(now)}
	if r.owner != "" && r.leaseEnd.After(now) {
		rec.Owner, rec.LeaseUntil = r.owner, r.leaseEnd
	}
	return rec, nil
}

// OwnerToken makes a lease owner token: the instance and a per-process
// sequence number, unique for the life of the fleet's records.
func OwnerToken(instance string, seq uint64) string {
	return instance + "/" + strconv.FormatUint(seq, 10)
}

// Reasons in Notifier-Reason (SPEC §6).
const (
	ReasonInvalid         = "invalid"
	ReasonUnknownProvider = "unknown_provider"
	ReasonRejected        = "rejected"
	ReasonMaxAttempts     = "max_attempts"
	ReasonUserLimit       = "user_limit"
	ReasonExpired         = "expired"
	// ReasonAmbiguous: a request whose outcome is unknown (written whole,
	// no answer) to a provider with retry_on_timeout: false, which prefers
	// a missed message to a doubled one. Check with the provider, then
	// replay or delete it.
	ReasonAmbiguous = "ambiguous"
	// ReasonUndelivered: the provider accepted the job, then reported
	// that it could not deliver it (a Twilio status callback:
	// undelivered or failed). The dead letter records the report; the
	// job's content is not kept after a send.
	ReasonUndelivered = "undelivered"
	// ReasonDuplicateID: a job whose id (within its tenant) was already
	// sent with other content: two different messages were given one id.
	// The second is not sent, and not dropped in silence.
	ReasonDuplicateID = "duplicate_id"
)
