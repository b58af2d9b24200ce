package gateway

import (
	"encoding/json"
	"testing"

	"github.com/notifier/notifier/queue"
)

// FuzzDecodeRequest holds the request decoder to: no panic whatever the
// bytes; the scan's count equals the array's length whenever the array
// decodes (the count prices the request, so it must not undercount); and
// each item goes through queue.DecodeFilled without a panic. Seeds are in
// testdata/fuzz/FuzzDecodeRequest.
func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"user_id":"u1","channel":"sms","to":"+14155550123","body":"hi"}`))
	f.Add([]byte(`[{"user_id":"u1","channel":"sms","to":"+14155550123","body":"a,b]"},{"x":[1,2,{"y":"}"}]}]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		n, array, err := countJobs(body)
		if err != nil || !array {
			return
		}
		items, err := splitJobs(body)
		if err != nil {
			return
		}
		if n != len(items) && !(n > MaxBatch && len(items) > MaxBatch) {
			var v []json.RawMessage
			_ = json.Unmarshal(body, &v)
			t.Fatalf("countJobs says %d, the array has %d items: %q", n, len(items), body)
		}
		for i, item := range items {
			_, _ = queue.DecodeFilled("", item, func(j *queue.Job) error {
				j.Tenant = "acme"
				if j.ID == "" {
					j.ID = idempotencyItemID("k", i)
				}
				return nil
			})
		}
	})
}
