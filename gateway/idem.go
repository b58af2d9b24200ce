package gateway

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notifier/notifier/internal/luapre"
)

var (
	//go:embed idem.lua
	idemLua    string
	idemScript = redis.NewScript(luapre.Num + idemLua)

	//go:embed unclaim.lua
	unclaimLua    string
	unclaimScript = redis.NewScript(luapre.Num + unclaimLua)
)

// IDKey is the Redis key of the record of a job id a client chose:
// {<prefix>gwid:<tenant>}:<id>. One hash tag per tenant, so a request's
// records are one call on Redis Cluster too; tenant "" is the default
// tenant's (no named tenant is empty), so two tenants' ids never meet.
func IDKey(prefix, tenant, id string) string { return "{" + prefix + "gwid:" + tenant + "}:" + id }

// idClaimKey is the key of the claim beside a job id's record,
// {<prefix>gwid:<tenant>}c:<id>: the token of the request that wrote the
// record, while that request alone holds the id and may give it back
// (idem.lua, unclaim.lua). Its own key, not the record's value, so that a
// record stays the job's hash alone, as every gateway version reads it.
func idClaimKey(prefix, tenant, id string) string {
	return "{" + prefix + "gwid:" + tenant + "}c:" + id
}

// claimSlack is how much longer than the publish a claim is kept: a
// request gives its ids back after its publish failed, within
// publish_timeout, and one Redis call.
const claimSlack = 10 * time.Second

// newClaimToken is a request's claim token: 128 random bits.
func newClaimToken() string { return rand.Text() }

// What a claim found of a job's id (idem.lua's reply).
type idClaim int

const (
	idNew      idClaim = iota // no record: this request's job holds the id now
	idSame                    // the same job holds it: a retry, published again
	idOther                   // another job holds it: 409
	idNoRecord idClaim = -1   // a generated id: no record kept
)

// contentHash is what a job's record holds: the first 128 bits of the
// SHA-256 of its encoding (the id, tenant and category included) and
// whether it takes the priority lane, in hex. Not of its subject, so that
// a change of the subjects' layout does not make a retry another job.
func contentHash(high bool, data []byte) string {
	h := sha256.New()
	if high {
		h.Write([]byte("high\x00"))
	} else {
		h.Write([]byte("normal\x00"))
	}
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// claimIDs claims the ids of a request's jobs in one round trip: the
// record keys[2i] and its claim keys[2i+1] for the job of hashes[i], the
// records kept ttl, the claims hold under token.
func claimIDs(ctx context.Context, rdb redis.Scripter, keys, hashes []string, token string, ttl, hold time.Duration) ([]idClaim, error) {
	args := make([]any, 0, 3+len(hashes))
	args = append(args, ttl.Milliseconds(), hold.Milliseconds(), token)
	for _, h := range hashes {
		args = append(args, h)
	}
	v, err := idemScript.Run(ctx, rdb, keys, args...).Result()
	if err != nil {
		return nil, fmt.Errorf("claim %d job ids: %w", len(hashes), err)
	}
	a, ok := v.([]any)
	if !ok || len(a) != len(hashes) {
		return nil, fmt.Errorf("claim job ids: unexpected script reply %v", v)
	}
	out := make([]idClaim, len(a))
	for i, x := range a {
		n, ok := x.(int64)
		if !ok || n < 0 || n > int64(idOther) {
			return nil, fmt.Errorf("claim job ids: unexpected script reply %v", v)
		}
		out[i] = idClaim(n)
	}
	return out, nil
}

// unclaimIDs releases the ids a request claimed under token (claimIDs
// answered idNew) for jobs that were never sent (notSent): each record
// keys[2i] is deleted, with its claim keys[2i+1], only while the claim
// still holds token and the record hashes[i]. It returns how many were
// deleted.
func unclaimIDs(ctx context.Context, rdb redis.Scripter, keys, hashes []string, token string) (int, error) {
	args := make([]any, 0, 1+len(hashes))
	args = append(args, token)
	for _, h := range hashes {
		args = append(args, h)
	}
	n, err := unclaimScript.Run(ctx, rdb, keys, args...).Int()
	if err != nil {
		return 0, fmt.Errorf("release %d job ids: %w", len(hashes), err)
	}
	return n, nil
}
