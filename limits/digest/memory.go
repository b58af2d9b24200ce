package digest

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/notifier/notifier/internal/luapre"
)

// Memory is one process's store (`notifier dev`, the demo, local limits):
// the same decisions as Redis's, on clock now.
type Memory struct {
	now func() time.Time
	limits

	mu    sync.Mutex
	users map[Key]*user
}

type user struct {
	held    map[string]heldJob // id → when it expires, when it was held
	in      map[string]string  // id → digest
	digests map[string]taken
	until   time.Time // the state is dropped after
}

// heldJob is a held job's expires_at (zero: none) and when it was first
// held.
type heldJob struct{ expires, at time.Time }

// taken is a digest and when it was taken, µs.
type taken struct {
	Membership
	at int64
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty store on clock now (nil: time.Now).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, users: map[Key]*user{}}
}

func (m *Memory) user(key Key, ttl time.Duration) *user {
	u := m.users[key]
	if u == nil || m.now().After(u.until) {
		u = &user{held: map[string]heldJob{}, in: map[string]string{}, digests: map[string]taken{}}
		m.users[key] = u
	}
	if ttl > 0 {
		u.until = m.now().Add(ttl)
	}
	return u
}

// Hold implements Store.
func (m *Memory) Hold(_ context.Context, key Key, id string, expires time.Time, ttl time.Duration) (int, Membership, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.user(key, 0)
	if d, ok := u.in[id]; ok {
		return len(u.held), u.membership(d), nil
	}
	_, held := u.held[id]
	if !held && len(u.held) >= m.limits.held() {
		return len(u.held), Membership{}, ErrTooManyHeld
	}
	u = m.user(key, ttl)
	if !held {
		u.held[id] = heldJob{expires: expires, at: time.UnixMicro(m.now().UnixMicro())} // µs, as Redis keeps it
	}
	return len(u.held), Membership{}, nil
}

// Of implements Store.
func (m *Memory) Of(_ context.Context, key Key, id string) (Membership, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.user(key, 0)
	if d, ok := u.in[id]; ok {
		return u.membership(d), nil
	}
	return Membership{}, nil
}

// Take implements Store.
func (m *Memory) Take(_ context.Context, key Key, trigger string, expires, allowed time.Time, ttl time.Duration) (Taken, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.user(key, 0)
	if d, ok := u.in[trigger]; ok {
		return Taken{Digest: d, Already: true}, nil
	}
	if len(u.held) == 0 {
		return Taken{}, nil
	}
	now := m.now()
	u.prune(now.UnixMicro(), min(max(1, ttl.Milliseconds()), luapre.MaxTTL.Milliseconds())*1000)
	if allowed.IsZero() {
		allowed = now
	}
	allowed = time.UnixMicro(allowed.UnixMicro())
	var members []string
	for id, h := range u.held {
		switch {
		case id == trigger:
			members = append(members, id)
		case !h.expires.IsZero() && !h.expires.After(now):
			delete(u.held, id)
		case !h.at.After(allowed):
			members = append(members, id)
		}
	}
	if _, held := u.held[trigger]; !held && (expires.IsZero() || expires.After(now)) {
		members = append(members, trigger)
	}
	if len(members) < 2 {
		delete(u.held, trigger)
		return Taken{}, nil
	}
	slices.Sort(members)
	sum := sha1.Sum([]byte(strings.Join(members, " ")))
	d := "digest-" + hex.EncodeToString(sum[:])[:24]
	u = m.user(key, ttl)
	for _, id := range members {
		delete(u.held, id)
		u.in[id] = d
	}
	u.digests[d] = taken{Membership{Digest: d, State: Pending, Count: len(members), Members: slices.Clone(members[:min(len(members), m.limits.members())])}, now.UnixMicro()}
	return Taken{Digest: d, Members: members}, nil
}

// Publish implements Store.
func (m *Memory) Publish(_ context.Context, key Key, digest string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.user(key, 0)
	if d, ok := u.digests[digest]; ok {
		d.State, d.Members = Published, nil
		u.digests[digest] = d
	}
	return nil
}

// Digest implements Store.
func (m *Memory) Digest(_ context.Context, key Key, digest string) (Membership, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.user(key, 0)
	if _, ok := u.digests[digest]; !ok {
		return Membership{}, false, nil
	}
	return u.membership(digest), true, nil
}

// membership is digest d's, its members a copy.
func (u *user) membership(d string) Membership {
	ms := u.digests[d].Membership
	ms.Members = slices.Clone(ms.Members)
	return ms
}

// prune drops the digests taken longer than keep µs before now (µs), and
// which jobs went into them, as take.lua does.
func (u *user) prune(now, keep int64) {
	old := map[string]bool{}
	for d, t := range u.digests {
		if t.at+keep < now {
			old[d] = true
			delete(u.digests, d)
		}
	}
	if len(old) == 0 {
		return
	}
	for id, d := range u.in {
		if old[d] {
			delete(u.in, id)
		}
	}
}

// Held implements Store.
func (m *Memory) Held(_ context.Context, key Key) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.user(key, 0).held), nil
}
