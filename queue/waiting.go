package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// Waiting is where a job waits in the job stream: published (or handed
// back) and not acknowledged yet. The job stream keeps a message until it
// is acknowledged (work-queue retention), so a job found there has not
// ended.
type Waiting struct {
	Seq     uint64    `json:"seq"`     // its stream sequence
	Subject string    `json:"subject"` // the subject (queue or fair lane) it waits on
	Stored  time.Time `json:"stored"`  // when the stream stored it
	// Channel and Provider are the job's own fields (Provider "" when it
	// names none: its channel's default provider sends it).
	Channel  string `json:"channel"`
	Provider string `json:"provider,omitempty"`
}

// WaitingScan is the answer of FindWaiting.
type WaitingScan struct {
	// Job is where the job waits, nil when the scan did not find it.
	Job *Waiting `json:"job,omitempty"`
	// Scanned is how many messages were read, of InStream in the stream
	// when the scan began; Complete says that the whole stream was read
	// (so a job not found is not waiting there).
	Scanned  uint64 `json:"scanned"`
	InStream uint64 `json:"in_stream"`
	Complete bool   `json:"complete"`
}

// The shape of FindWaiting's reads: scanWorkers gets at once, each over
// the next scanChunk sequences not read yet, oldest first.
const (
	scanWorkers = 8
	scanChunk   = 512
)

// FindWaiting looks through the job stream, oldest first, for tenant's job
// id ("" the default tenant's) and reads about limit messages at most (0:
// the whole stream). It changes nothing and creates no consumer (a
// work-queue stream allows none beside the dispatchers'): it reads with
// the stream's message gets, scanWorkers at a time, skipping the
// sequences of jobs already acknowledged. A job is matched by its JSON id
// and its tenant as the dispatcher sees them (its subject's, its
// Notifier-Tenant header's, its own tenant field), so a copy the router
// moved to a fair lane is found too.
func FindWaiting(ctx context.Context, js jetstream.JetStream, cfg Config, tenant, id string, limit int) (WaitingScan, error) {
	scan, _, err := findWaiting(ctx, js, cfg, tenant, id, limit)
	return scan, err
}

// findWaiting is FindWaiting, also saying how many message gets it made.
func findWaiting(ctx context.Context, js jetstream.JetStream, cfg Config, tenant, id string, limit int) (scan WaitingScan, gets uint64, err error) {
	cfg = cfg.WithDefaults()
	if !ValidID(id) {
		return scan, 0, fmt.Errorf("find job in %s: %q is not a job id", cfg.Stream, id)
	}
	s, err := js.Stream(ctx, cfg.Stream)
	if err != nil {
		return scan, 0, fmt.Errorf("find job in %s: %w", cfg.Stream, err)
	}
	st := s.CachedInfo().State
	scan.InStream = st.Msgs
	if st.Msgs == 0 {
		scan.Complete = true
		return scan, 0, nil
	}
	var (
		mu      sync.Mutex
		next    = st.FirstSeq // the first sequence no worker has taken
		found   *Waiting
		scanned uint64
		done    bool // found, or the limit reached
	)
	// take hands a worker the next chunk of sequences: [lo, hi].
	take := func() (lo, hi uint64, ok bool) {
		mu.Lock()
		defer mu.Unlock()
		if done || next > st.LastSeq || limit > 0 && scanned >= uint64(limit) {
			return 0, 0, false
		}
		lo, hi = next, min(next+scanChunk-1, st.LastSeq)
		next = hi + 1
		return lo, hi, true
	}
	needle := []byte(id)
	g, gctx := errgroup.WithContext(ctx)
	for range scanWorkers {
		g.Go(func() error {
			for {
				lo, hi, ok := take()
				if !ok {
					return nil
				}
				for seq := lo; seq <= hi; {
					mu.Lock()
					stop := done || limit > 0 && scanned >= uint64(limit)
					mu.Unlock()
					if stop {
						return nil
					}
					m, err := s.GetMsg(gctx, seq, jetstream.WithGetMsgSubject(">"))
					atomic.AddUint64(&gets, 1)
					if errors.Is(err, jetstream.ErrMsgNotFound) {
						break // nothing from seq on
					}
					if err != nil {
						return fmt.Errorf("find job in %s: read sequence %d: %w", cfg.Stream, seq, err)
					}
					if m.Sequence > hi {
						// The next message is past this chunk: the
						// sequences up to it hold nothing. Unless a chunk
						// handed out already holds it, this worker takes
						// the chunk from it on, so that no worker asks for
						// the same distant message again chunk after chunk
						// (a gap of 10 million acknowledged sequences was
						// 20,000 gets of one message).
						mu.Lock()
						jump := m.Sequence >= next
						switch {
						case m.Sequence > st.LastSeq: // published since the scan began
							next = max(next, st.LastSeq+1)
							jump = false
						case jump:
							hi = min(m.Sequence+scanChunk-1, st.LastSeq)
							next = hi + 1
						}
						mu.Unlock()
						if !jump {
							break
						}
					}
					seq = m.Sequence + 1
					hit := bytes.Contains(m.Data, needle) && jobID(m.Data) == id && isTenants(m.Subject, m.Header, m.Data, tenant)
					mu.Lock()
					scanned++
					if hit && (found == nil || m.Sequence < found.Seq) {
						found = &Waiting{Seq: m.Sequence, Subject: m.Subject, Stored: m.Time}
						found.Channel, found.Provider = routing(m.Data)
						done = true
					}
					mu.Unlock()
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		return scan, gets, err
	}
	scan.Job, scan.Scanned = found, scanned
	scan.Complete = found == nil && (limit <= 0 || scanned < uint64(limit)) && next > st.LastSeq
	return scan, gets, nil
}

// routing reads a job's channel and provider fields.
func routing(data []byte) (channel, provider string) {
	var j struct {
		Channel  string `json:"channel"`
		Provider string `json:"provider"`
	}
	_ = json.Unmarshal(data, &j)
	return j.Channel, j.Provider
}

// isTenants reports whether a stored job is tenant's (jobTenant): a job
// whose header or field names no tenant is nobody's.
func isTenants(subject string, h nats.Header, data []byte, tenant string) bool {
	t, bad := jobTenant(subject, h, data)
	return t == tenant && bad == ""
}
