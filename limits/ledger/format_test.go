package ledger

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/notifier/notifier/testenv"
)

// TestRecordIsOneString: a claim writes the record as one string with its
// expiry (dedup_ttl past the lease's end), the sent record is appended to
// it (s, q, h, l = 0 and the owner cleared), keeping the rest (attempts
// counted before) and the expiry, and every reader sees the same fields.
func TestRecordIsOneString(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testenv.Redis(t).Client()
	l := NewRedis(c, "fmt:", time.Hour)
	if err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := l.Claim(ctx, "a", "host-a/1", time.Minute); err != nil || got.Status != Claimed {
		t.Fatalf("claim = %+v, %v", got, err)
	}
	key := Key("fmt:", "a")
	v, err := c.Get(ctx, key).Result()
	if err != nil || !strings.HasPrefix(v, "o8:host-a/1l16:") || len(v) != len("o8:host-a/1l16:")+16 {
		t.Fatalf("the claimed record = %q, %v; want o8:host-a/1l16:<16-digit µs>", v, err)
	}
	if ttl, err := c.PTTL(ctx, key).Result(); err != nil || ttl <= time.Hour || ttl > time.Hour+time.Minute {
		t.Fatalf("PTTL of the claimed record = %s, %v; want dedup_ttl + the lease", ttl, err)
	}
	if n, err := l.Failed(ctx, "a", "host-a/1", "5xx"); err != nil || n != 1 {
		t.Fatalf("Failed = %d, %v", n, err)
	}
	if got, err := l.Claim(ctx, "a", "host-b/7", time.Minute); err != nil || got.Status != Claimed || got.Attempts != 1 {
		t.Fatalf("claim after a failure = %+v, %v; want claimed with 1 attempt", got, err)
	}
	g := l.SentGroup()
	g.Add("a", 42, "d1g")
	pipe := c.Pipeline()
	g.Queue(ctx, pipe)
	_, _ = pipe.Exec(ctx)
	if err := g.Err(); err != nil {
		t.Fatal(err)
	}
	v, _ = c.Get(ctx, key).Result()
	if !strings.HasSuffix(v, "s1:1q2:42h3:d1gl1:0o0:") {
		t.Errorf("the sent record = %q; want the sent entries appended (s1:1q2:42h3:d1gl1:0o0:)", v)
	}
	want := map[string]string{"s": "1", "a": "1", "l": "0", "q": "42", "h": "d1g", "e": "5xx"}
	if fields, err := ParseRecord(v); err != nil || !equalFields(fields, want) {
		t.Errorf("the sent record's fields = %v, %v; want %v (owner gone, attempts and class kept)", fields, err, want)
	}
	r, err := l.Record(ctx, "a")
	if err != nil || !r.Sent || r.Attempts != 1 || r.Seq != 42 || r.LastError != "5xx" || r.Owner != "" {
		t.Errorf("Record = %+v, %v", r, err)
	}
	if seq, sum, ok, err := l.SentFrom(ctx, "a"); err != nil || !ok || seq != 42 || sum != "d1g" {
		t.Errorf("SentFrom = %d %q %v %v", seq, sum, ok, err)
	}
	if ttl, err := c.PTTL(ctx, key).Result(); err != nil || ttl <= time.Hour || ttl > time.Hour+time.Minute {
		t.Errorf("PTTL of the sent record = %s, %v; want where the claim put it", ttl, err)
	}

	// A script that rewrites the record reads its latest entries: the
	// owner cleared and the lease ended by the sent record stay so.
	if n, err := l.Failed(ctx, "a", "other/9", ""); err != nil || n != 2 {
		t.Fatalf("Failed after the send = %d, %v", n, err)
	}
	v, _ = c.Get(ctx, key).Result()
	want["a"] = "2"
	if fields, err := ParseRecord(v); err != nil || !equalFields(fields, want) {
		t.Errorf("the record rewritten after the send = %q: %v, %v; want %v", v, fields, err, want)
	}
	if ttl, err := c.PTTL(ctx, key).Result(); err != nil || ttl <= time.Hour || ttl > time.Hour+time.Minute {
		t.Errorf("PTTL of the rewritten sent record = %s, %v; want where the claim put it", ttl, err)
	}
}

// TestEarlierHashRecords: a record an earlier version kept as a hash is
// honoured by every operation as it was written (a sent job is not sent
// again, a lease still held is respected, attempts carry on). A claim that
// is refused leaves the hash for its owner, a process of the earlier build
// that can still write its sent record to it; a claim that is granted, and
// every other script that changes a record, rewrites it as a string.
func TestEarlierHashRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testenv.Redis(t).Client()
	clock := newFakeClock()
	l := NewRedis(c, "old:", time.Hour, WithNow(clock.Now))
	if err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	now := clock.Now().UnixMicro()
	hash := func(id string, ttl time.Duration, fields ...any) string {
		t.Helper()
		key := Key("old:", id)
		if err := c.HSet(ctx, key, fields...).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.PExpire(ctx, key, ttl).Err(); err != nil {
			t.Fatal(err)
		}
		return key
	}
	typeIs := func(key, want string, min, max time.Duration) {
		t.Helper()
		if typ, err := c.Type(ctx, key).Result(); err != nil || typ != want {
			t.Errorf("%s is a %s (%v); want a %s", key, typ, err, want)
		}
		if left, err := c.PTTL(ctx, key).Result(); err != nil || left <= min || left > max {
			t.Errorf("%s: PTTL %s, %v; want in (%s, %s]", key, left, err, min, max)
		}
	}

	// Sent: read as sent by Record and SentFrom, never claimed again (the
	// hash left as it is), kept by a reset (which rewrites it).
	sent := hash("sent", 50*time.Minute, "s", "1", "q", "9", "h", "sum", "l", "0", "a", "2")
	if r, err := l.Record(ctx, "sent"); err != nil || !r.Sent || r.Attempts != 2 || r.Seq != 9 {
		t.Errorf("Record of a sent hash = %+v, %v", r, err)
	}
	if seq, sum, ok, err := l.SentFrom(ctx, "sent"); err != nil || !ok || seq != 9 || sum != "sum" {
		t.Errorf("SentFrom of a sent hash = %d %q %v %v", seq, sum, ok, err)
	}
	if got, err := l.Claim(ctx, "sent", "me", time.Minute); err != nil || got.Status != AlreadySent || got.Attempts != 2 {
		t.Errorf("claim of a sent hash = %+v, %v; want AlreadySent, 2 attempts", got, err)
	}
	typeIs(sent, "hash", 49*time.Minute, 50*time.Minute)
	if was, err := l.ResetForReplay(ctx, "sent"); err != nil || !was {
		t.Errorf("reset of a sent hash = %v, %v; want kept as sent", was, err)
	}
	typeIs(sent, "string", 49*time.Minute, 50*time.Minute)

	// Leased by a process of the earlier build: busy until its lease ends,
	// and its sent record, written to the hash meanwhile, makes the next
	// claim a duplicate.
	leased := hash("leased", 40*time.Minute, "o", "other/1", "l", now+30_000_000, "a", "1")
	if got, err := l.Claim(ctx, "leased", "me", time.Minute); err != nil || got.Status != Busy || got.Attempts != 1 || got.BusyFor != 30*time.Second {
		t.Errorf("claim of a hash leased for 30 s more = %+v, %v; want busy for 30s, 1 attempt", got, err)
	}
	typeIs(leased, "hash", 39*time.Minute, 40*time.Minute)
	if err := c.HSet(ctx, leased, "s", "1", "l", "0").Err(); err != nil {
		t.Fatalf("the earlier build's sent record: %v", err)
	}
	if got, err := l.Claim(ctx, "leased", "me", time.Minute); err != nil || got.Status != AlreadySent {
		t.Errorf("claim after the earlier build's sent record = %+v, %v; want AlreadySent", got, err)
	}

	// A lease that ended: the claim is granted and the record becomes a
	// string kept dedup_ttl past the new lease, its attempts carried on.
	ended := hash("ended", 20*time.Minute, "o", "other/2", "l", now-1, "a", "3", "e", "5xx")
	if got, err := l.Claim(ctx, "ended", "me", time.Minute); err != nil || got.Status != Claimed || got.Attempts != 3 {
		t.Errorf("claim of a hash whose lease ended = %+v, %v; want claimed, 3 attempts", got, err)
	}
	typeIs(ended, "string", time.Hour, time.Hour+time.Minute)
	if r, err := l.Record(ctx, "ended"); err != nil || r.Owner != "me" || r.Attempts != 3 || r.LastError != "5xx" {
		t.Errorf("Record after the claim = %+v, %v", r, err)
	}

	// Failures carry on counting; a deferral's count too.
	failed := hash("failed", 30*time.Minute, "a", "3", "e", "5xx")
	if n, err := l.Failed(ctx, "failed", "me", "error"); err != nil || n != 4 {
		t.Errorf("Failed on a hash with 3 attempts = %d, %v; want 4", n, err)
	}
	typeIs(failed, "string", 59*time.Minute, time.Hour)
	_ = hash("deferred", 30*time.Minute, "o", "me", "l", now+60_000_000, "n", "2")
	if err := l.Deferred(ctx, "deferred", "me", DeferUserLimit, time.Minute); err != nil {
		t.Fatal(err)
	}
	if r, err := l.Record(ctx, "deferred"); err != nil || r.Deferrals != 3 || r.Owner != "" || r.Why != DeferUserLimit {
		t.Errorf("Record after a deferral of a hash = %+v, %v; want 3 deferrals, no owner", r, err)
	}

	// The sent record of a job claimed under the earlier version.
	claimed := hash("claimed", 61*time.Minute, "o", "me", "l", now+60_000_000)
	g := l.SentGroup()
	g.Add("claimed", 5, "s5")
	pipe := c.Pipeline()
	g.Queue(ctx, pipe)
	_, _ = pipe.Exec(ctx)
	if err := g.Err(); err != nil {
		t.Fatal(err)
	}
	typeIs(claimed, "string", time.Hour, 61*time.Minute)
	if seq, _, ok, err := l.SentFrom(ctx, "claimed"); err != nil || !ok || seq != 5 {
		t.Errorf("SentFrom after the sent record of a hash = %d %v %v", seq, ok, err)
	}
}

// TestScriptErrorsAreNotTakenForAnEarlierHash: only WRONGTYPE sends a
// script to the hash of an earlier version; any other error (here out of
// memory) comes back as it is, and nothing is written.
func TestScriptErrorsAreNotTakenForAnEarlierHash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testenv.Redis(t).Client()
	l := NewRedis(c, "oom:", time.Hour)
	if err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := l.Claim(ctx, "held", "me", time.Minute); err != nil || got.Status != Claimed {
		t.Fatalf("claim = %+v, %v", got, err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	defer c.ConfigSet(ctx, "maxmemory", "0")
	for _, id := range []string{"held", "new"} {
		if got, err := l.Claim(ctx, id, "you", time.Minute); err == nil || !strings.Contains(err.Error(), "OOM") {
			t.Errorf("claim of %s out of memory = %+v, %v; want the OOM error", id, got, err)
		}
	}
	if err := l.Sent(ctx, "held", "me"); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Errorf("sent record out of memory: %v; want the OOM error", err)
	}
	if n, err := c.Exists(ctx, Key("oom:", "new")).Result(); err != nil || n != 0 {
		t.Errorf("a record for the refused claim: %d, %v; want none", n, err)
	}
}

// TestParseRecord: the Go reader of record strings takes what record.lua
// writes, the later entry of a field winning and an empty one clearing
// it, and refuses a malformed string with the byte it breaks at.
func TestParseRecord(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want map[string]string
		err  bool
	}{
		{"", map[string]string{}, false},
		{"s1:1q2:42h3:a:bl1:0", map[string]string{"s": "1", "q": "42", "h": "a:b", "l": "0"}, false},
		{"o3:a;bo0:a1:2", map[string]string{"a": "2"}, false},
		{"o3:abcl1:5o3:xyz", map[string]string{"o": "xyz", "l": "5"}, false},
		{"o", nil, true},
		{"o3:ab", nil, true},
		{"ox:abc", nil, true},
		{"h12:ab:3:cd:efgh", map[string]string{"h": "ab:3:cd:efgh"}, false},
		{"w6:h\u00e9llo", map[string]string{"w": "h\u00e9llo"}, false},
		{"w5:h\u00e9llo", nil, true},
		{"o-1:", nil, true},
		{"o+3:abc", nil, true},
		{"o-0:", nil, true},
		{"o:x", nil, true},
		{"o99999999999999999999:x", nil, true},
	} {
		got, err := ParseRecord(c.in)
		if (err != nil) != c.err {
			t.Errorf("ParseRecord(%q) error %v; want error %v", c.in, err, c.err)
			continue
		}
		if !c.err && !equalFields(got, c.want) {
			t.Errorf("ParseRecord(%q) = %v; want %v", c.in, got, c.want)
		}
	}
}

// TestParsersAgree: a record string the Go reader takes, the scripts take
// too, and one it refuses, they refuse (a record one side reads and the
// other does not would show in inspect and stop every script, or the
// reverse).
func TestParsersAgree(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testenv.Redis(t).Client()
	l := NewRedis(c, "agree:", time.Hour)
	if err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	for i, s := range []string{
		"a1:2", "h12:ab:3:cd:efgh", "w6:h\u00e9llo", "o3:abcl1:5o3:xyz",
		"w5:h\u00e9llo", "o+3:abc", "o-0:", "o:x", "ox:abc", "o3:ab", "o", "o99999999999999999999:x",
	} {
		id := strconv.Itoa(i)
		if err := c.Set(ctx, Key("agree:", id), s, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		_, goErr := ParseRecord(s)
		_, luaErr := l.Claim(ctx, id, "me", time.Minute)
		if (goErr != nil) != (luaErr != nil) {
			t.Errorf("record %q: Go reads it with error %v, the claim script with %v; want both to take or both to refuse it", s, goErr, luaErr)
		}
	}
}

func equalFields(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// FuzzParseRecord: no input panics ParseRecord, and a record re-encoded
// from what it read reads back the same.
func FuzzParseRecord(f *testing.F) {
	for _, s := range []string{"", "s1:1q2:42h3:a:bl1:0", "o8:host-a/1l16:1765110000000000", "o3:a;bo0:a1:2", "o3:ab", "o-1:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fields, err := ParseRecord(s)
		if err != nil {
			return
		}
		var b strings.Builder
		for k, v := range fields {
			b.WriteString(k + strconv.Itoa(len(v)) + ":" + v)
		}
		again, err := ParseRecord(b.String())
		if err != nil || !equalFields(fields, again) {
			t.Fatalf("ParseRecord(%q) = %v; re-encoded %q reads %v, %v", s, fields, b.String(), again, err)
		}
	})
}

// TestMemorySentKeepsDedupTTL: the in-memory ledger keeps a sent record at
// least dedup_ttl from the send, as sent.lua does, also when the send
// comes after its claim's lease ended (the claim's expiry then nearer).
func TestMemorySentKeepsDedupTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := newFakeClock()
	l := NewMemory(time.Hour, WithNow(clock.Now))
	if got, err := l.Claim(ctx, "late", "me", time.Minute); err != nil || got.Status != Claimed {
		t.Fatalf("claim = %+v, %v", got, err)
	}
	clock.Advance(time.Hour) // the lease ended 59 min ago; the record is due in 1 min
	if err := l.Sent(ctx, "late", "me"); err != nil {
		t.Fatal(err)
	}
	if r, err := l.Record(ctx, "late"); err != nil || !r.Sent || r.TTL < time.Hour {
		t.Errorf("Record after a late send = %+v, %v; want sent, kept at least dedup_ttl (1h)", r, err)
	}
	clock.Advance(59 * time.Minute)
	if got, err := l.Claim(ctx, "late", "you", time.Minute); err != nil || got.Status != AlreadySent {
		t.Errorf("claim 59 min after the send = %+v, %v; want AlreadySent", got, err)
	}
}
