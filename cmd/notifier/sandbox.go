package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// sandbox is the demo's (and bench's) provider: an in-process HTTP server
// speaking the webhook protocol, one lane per path, each enforcing its own
// contract the way a strict SMS gateway does: at most Contract accepted
// requests in any trailing second, the excess answered 429 with
// Retry-After. It can fail every Nth request with a 503, once, to show
// retries. It honours Idempotency-Key: a repeated key is answered 200 and
// not delivered twice, and counted.
type sandbox struct {
	srv *http.Server
	ln  net.Listener
	// retain, when set, is how long the lanes remember: arrivals for a
	// second, Idempotency-Keys for retain (a long-running `dev`); zero
	// keeps everything for the report (the demo, the bench).
	retain time.Duration
	// answered, when set, is told of every request answered: its lane's
	// path, its body and the status given (after the answer).
	answered func(path string, body []byte, status int)

	mu    sync.Mutex
	lanes map[string]*sandboxLane
}

type sandboxLane struct {
	contract  int
	failEvery int // 0: never
	requests  int
	accepted  []time.Time // arrival times of accepted requests, in order
	refused   []time.Time // arrival times of the requests answered 429, in order
	seen      map[string]bool
	firstAt   map[string]time.Time // when each Idempotency-Key was first accepted
	keys      []string             // the keys of seen in order, from keyHead on, while retained
	keyHead   int
	dups      int
	n429      int
	n503      int
}

// sandboxStats is one lane's account.
type sandboxStats struct {
	Accepted, Duplicates, Answered429, Answered503 int
	MostInOneSecond                                int
	MostInFiveSeconds                              int
	First, Last                                    time.Time
}

func newSandbox() (*sandbox, error) { return startSandbox(&sandbox{}) }

// startSandbox serves s (its retain and answered set as wanted) on a free
// loopback port.
func startSandbox(s *sandbox) (*sandbox, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("sandbox provider: %w", err)
	}
	s.ln, s.lanes = ln, map[string]*sandboxLane{}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// lane adds a path with its contract; failEvery > 0 answers every Nth new
// request 503.
func (s *sandbox) lane(path string, contract, failEvery int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lanes[path] = &sandboxLane{contract: contract, failEvery: failEvery, seen: map[string]bool{}, firstAt: map[string]time.Time{}}
	return "http://" + s.ln.Addr().String() + path
}

func (s *sandbox) Close() { _ = s.srv.Close() }

func (s *sandbox) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil || r.Method != http.MethodPost || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") || !json.Valid(body) {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	l := s.lanes[r.URL.Path]
	if l == nil {
		s.mu.Unlock()
		http.NotFound(w, r)
		return
	}
	l.requests++
	status := http.StatusOK
	switch {
	case key != "" && l.seen[key]:
		l.dups++
	case l.inLastSecond(now) >= l.contract:
		l.n429++
		l.refused = append(l.refused, now)
		status = http.StatusTooManyRequests
	case l.failEvery > 0 && l.requests%l.failEvery == 0:
		l.n503++
		status = http.StatusServiceUnavailable
	default:
		l.accepted = append(l.accepted, now)
		if key != "" {
			l.seen[key] = true
			l.firstAt[key] = now
			if s.retain > 0 {
				l.keys = append(l.keys, key)
			}
		}
	}
	if s.retain > 0 {
		l.forget(now, s.retain)
	}
	s.mu.Unlock()
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(status)
	if s.answered != nil {
		s.answered(r.URL.Path, body, status)
	}
}

// forget drops the arrivals older than a second (inLastSecond needs no
// more) and the Idempotency-Keys first accepted longer than retain ago;
// the caller holds mu.
func (l *sandboxLane) forget(now time.Time, retain time.Duration) {
	from := now.Add(-time.Second)
	i := sort.Search(len(l.accepted), func(i int) bool { return l.accepted[i].After(from) })
	if i > 0 {
		l.accepted = append(l.accepted[:0], l.accepted[i:]...)
	}
	if i := sort.Search(len(l.refused), func(i int) bool { return l.refused[i].After(from) }); i > 0 {
		l.refused = append(l.refused[:0], l.refused[i:]...)
	}
	for l.keyHead < len(l.keys) && now.Sub(l.firstAt[l.keys[l.keyHead]]) > retain {
		delete(l.seen, l.keys[l.keyHead])
		delete(l.firstAt, l.keys[l.keyHead])
		l.keys[l.keyHead] = ""
		l.keyHead++
	}
	if l.keyHead > 1024 && 2*l.keyHead > len(l.keys) { // compact, now and then
		l.keys = append(l.keys[:0], l.keys[l.keyHead:]...)
		l.keyHead = 0
	}
}

// inLastSecond counts accepted requests in (now−1s, now]; the caller holds mu.
func (l *sandboxLane) inLastSecond(now time.Time) int {
	from := now.Add(-time.Second)
	i := sort.Search(len(l.accepted), func(i int) bool { return l.accepted[i].After(from) })
	return len(l.accepted) - i
}

// acceptedAt is when the lane at path first accepted the message with
// Idempotency-Key key (the job's id); ok is false if it never did.
func (s *sandbox) acceptedAt(path, key string) (at time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.lanes[path]; l != nil {
		at, ok = l.firstAt[key]
	}
	return at, ok
}

// rate is the accepted rate over the last window.
func (s *sandbox) rate(path string, window time.Duration) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lanes[path]
	now := time.Now()
	from := now.Add(-window)
	i := sort.Search(len(l.accepted), func(i int) bool { return l.accepted[i].After(from) })
	return float64(len(l.accepted)-i) / window.Seconds()
}

func (s *sandbox) stats(path string) sandboxStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lanes[path]
	st := sandboxStats{Accepted: len(l.accepted), Duplicates: l.dups, Answered429: l.n429, Answered503: l.n503}
	if len(l.accepted) > 0 {
		st.First, st.Last = l.accepted[0], l.accepted[len(l.accepted)-1]
	}
	st.MostInOneSecond = mostInWindow(l.accepted, time.Second)
	st.MostInFiveSeconds = mostInWindow(l.accepted, 5*time.Second)
	return st
}

// mostArrivals is the most requests that reached the lane at path in any
// window of length w, those answered 429 included: what a sender put into
// the window, which the accepted requests alone cannot show (the lane
// refuses the excess).
func (s *sandbox) mostArrivals(path string, w time.Duration) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lanes[path]
	all := append(append(make([]time.Time, 0, len(l.accepted)+len(l.refused)), l.accepted...), l.refused...)
	sort.Slice(all, func(i, j int) bool { return all[i].Before(all[j]) })
	return mostInWindow(all, w)
}

// mostInWindow is the most arrivals in any window of length w (half-open,
// as a provider counts a trailing window); arrivals are in order.
func mostInWindow(arrivals []time.Time, w time.Duration) int {
	most, j := 0, 0
	for i, t := range arrivals {
		for !arrivals[j].After(t.Add(-w)) {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// busiest is the accepted rate over the busiest 5 s: what the provider
// got while the queue had a backlog.
func (st sandboxStats) busiest() float64 { return float64(st.MostInFiveSeconds) / 5 }

// all is every lane's arrivals merged in order.
func (s *sandbox) all() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []time.Time
	for _, l := range s.lanes {
		out = append(out, l.accepted...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}
