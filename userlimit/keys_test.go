package userlimit_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/notifier/notifier/testenv"
	"github.com/notifier/notifier/userlimit"
	"github.com/notifier/notifier/userlimit/userlimittest"
)

// crc16 is CRC-16/XMODEM, the checksum Redis Cluster hashes keys with.
func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// slot is the Redis Cluster slot of key: the CRC16 of its hash tag (what lies
// between the first '{' and the first '}' after it, when not empty) or of the
// whole key, modulo 16384.
func slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16([]byte(key)) % 16384)
}

var awkwardUsers = []string{
	"alice", "a:b", "{", "}", "{}", "}{", "{x}", "a}b{c", "%7D", "用户", "ü-😀", "", " ", "\x00", strings.Repeat("z", 256),
}

func TestTag(t *testing.T) {
	t.Parallel()
	cases := []struct {
		prefix string
		key    userlimit.Key
		want   string
	}{
		{"notifier:", userlimit.Key{Channel: "push", User: "alice"}, "{notifier:u:push:alice}"},
		{"notifier:", userlimit.Key{Channel: "push", User: "a:b"}, "{notifier:u:push:a:b}"},
		{"notifier:", userlimit.Key{Channel: "push:a", User: "b"}, "{notifier:u:push%3Aa:b}"},
		{"notifier:", userlimit.Key{Channel: "push", User: "{x}%"}, "{notifier:u:push:%7Bx%7D%25}"},
		{"n}", userlimit.Key{Channel: "sms", User: "用户"}, "{n%7Du:sms:用户}"},
	}
	for _, c := range cases {
		if got := userlimit.Tag(c.prefix, c.key); got != c.want {
			t.Errorf("Tag(%q, %+v) = %q, want %q", c.prefix, c.key, got, c.want)
		}
	}
	if got, want := userlimit.Keys("notifier:", userlimit.Key{Channel: "push", User: "alice"}, userlimit.FixedWindow, "job-1"),
		[]string{"{notifier:u:push:alice}:fw", "{notifier:u:push:alice}:fw:j:job-1"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Keys = %q, want %q", got, want)
	}
}

// TestKeysShareOneSlot proves every key one decision touches hashes to one
// Redis Cluster slot, by a CRC16 written here and by the cluster's own
// CLUSTER KEYSLOT, whatever the user id holds.
func TestKeysShareOneSlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.RedisCluster(t).Client()
	slots := map[int]bool{}
	for _, prefix := range []string{"notifier:", "", "a{b}c:"} {
		for _, ch := range []string{"push", "sms", "email", "we:ird{}"} {
			for _, user := range awkwardUsers {
				key := userlimit.Key{Channel: ch, User: user}
				tagSlot := slot(userlimit.Tag(prefix, key))
				slots[tagSlot] = true
				for _, alg := range userlimittest.Algorithms {
					for _, k := range userlimit.Keys(prefix, key, alg, "job:{1}") {
						if !strings.HasPrefix(k, userlimit.Tag(prefix, key)) {
							t.Fatalf("key %q does not start with its tag", k)
						}
						if got := slot(k); got != tagSlot {
							t.Fatalf("%s key %q: slot %d, want the tag's slot %d", alg, k, got, tagSlot)
						}
						server, err := rdb.ClusterKeySlot(ctx, k).Result()
						if err != nil {
							t.Fatalf("CLUSTER KEYSLOT %q: %v", k, err)
						}
						if int(server) != tagSlot {
							t.Fatalf("%s key %q: CLUSTER KEYSLOT says %d, want %d", alg, k, server, tagSlot)
						}
					}
				}
			}
		}
	}
	// The hash tag holds the user, so users spread over the cluster.
	if len(slots) < 100 {
		t.Fatalf("only %d distinct slots for %d keys: users do not spread", len(slots), 3*4*len(awkwardUsers))
	}
}
