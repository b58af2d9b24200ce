package localenv

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"
)

// Sandbox is the demo's, dev's and the bench's provider: an in-process HTTP server
// speaking the webhook protocol, one lane per path, each enforcing its own
// contract the way a strict SMS gateway does: at most Contract accepted
// requests in any trailing second, the excess answered 429 with
// Retry-After. It can fail every Nth request with a 503, once, to show
// retries. It honours Idempotency-Key: a repeated key is answered 200 and
// not delivered twice, and counted.
type Sandbox struct {
	srv *http.Server
	ln  net.Listener
	o   SandboxOptions

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

// SandboxOptions configure a Sandbox.
type SandboxOptions struct {
	// Retain, when set, is how long the lanes remember: arrivals for a
	// second, Idempotency-Keys for Retain (a long-running `dev`); zero
	// keeps everything for the report (the demo, the bench).
	Retain time.Duration
	// Answered, when set, is told of every request answered: its lane's
	// path, its body and the status given (after the answer).
	Answered func(path string, body []byte, status int)
}

// SandboxStats is one lane's account.
type SandboxStats struct {
	Accepted, Duplicates, Answered429, Answered503 int
	MostInOneSecond                                int
	MostInFiveSeconds                              int
	First, Last                                    time.Time
}

// StartSandbox serves a sandbox with no lanes yet on a free loopback port.
// Close stops it.
func StartSandbox(o SandboxOptions) (*Sandbox, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("sandbox provider: %w", err)
	}
	s := &Sandbox{o: o, ln: ln, lanes: map[string]*sandboxLane{}}
	// Timeouts, so that idle or slow clients cannot hold descriptors for
	// good; idle longer than the providers' clients keep a connection (90 s).
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Lane adds a path with its contract (requests per any 1 s) and returns
// its URL; failEvery > 0 answers every Nth new request 503, once.
func (s *Sandbox) Lane(path string, contract, failEvery int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lanes[path] = &sandboxLane{contract: contract, failEvery: failEvery, seen: map[string]bool{}, firstAt: map[string]time.Time{}}
	return "http://" + s.ln.Addr().String() + path
}

// Close stops the server.
func (s *Sandbox) Close() { _ = s.srv.Close() }

// ServeHTTP answers one request as its lane's provider would.
func (s *Sandbox) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	wr, refused, why := ReadWebhook(r)
	if refused != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(refused)
		_, _ = io.WriteString(w, ReasonBody(why))
		return
	}
	key, body := IdempotencyKey(r.Header), wr.Body
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
	case ContractWait(l.accepted, l.contract, now) > 0:
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
			if s.o.Retain > 0 {
				l.keys = append(l.keys, key)
			}
		}
	}
	if s.o.Retain > 0 {
		l.forget(now, s.o.Retain)
	}
	s.mu.Unlock()
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(status)
	if s.o.Answered != nil {
		s.o.Answered(r.URL.Path, body, status)
	}
}

// forget drops the arrivals older than a second (ContractWait needs no
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

// AcceptedAt is when the lane at path first accepted the message with
// Idempotency-Key key (the job's Nats-Msg-Id: "tenant/id", or the id of a
// job without a tenant); ok is false if it never did.
func (s *Sandbox) AcceptedAt(path, key string) (at time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.lanes[path]; l != nil {
		at, ok = l.firstAt[key]
	}
	return at, ok
}

// Rate is the lane's accepted rate over the last window.
func (s *Sandbox) Rate(path string, window time.Duration) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lanes[path]
	now := time.Now()
	from := now.Add(-window)
	i := sort.Search(len(l.accepted), func(i int) bool { return l.accepted[i].After(from) })
	return float64(len(l.accepted)-i) / window.Seconds()
}

// Stats is the lane at path's account.
func (s *Sandbox) Stats(path string) SandboxStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lanes[path]
	st := SandboxStats{Accepted: len(l.accepted), Duplicates: l.dups, Answered429: l.n429, Answered503: l.n503}
	if len(l.accepted) > 0 {
		st.First, st.Last = l.accepted[0], l.accepted[len(l.accepted)-1]
	}
	st.MostInOneSecond = MostInWindow(l.accepted, time.Second)
	st.MostInFiveSeconds = MostInWindow(l.accepted, 5*time.Second)
	return st
}

// MostArrivals is the most requests that reached the lane at path in any
// window of length w, those answered 429 included: what a sender put into
// the window, which the accepted requests alone cannot show (the lane
// refuses the excess).
func (s *Sandbox) MostArrivals(path string, w time.Duration) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lanes[path]
	all := append(append(make([]time.Time, 0, len(l.accepted)+len(l.refused)), l.accepted...), l.refused...)
	sort.Slice(all, func(i, j int) bool { return all[i].Before(all[j]) })
	return MostInWindow(all, w)
}

// Busiest is the accepted rate over the busiest 5 s: what the provider
// got while the queue had a backlog.
func (st SandboxStats) Busiest() float64 { return float64(st.MostInFiveSeconds) / 5 }

// All is every lane's accepted arrivals merged in order.
func (s *Sandbox) All() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []time.Time
	for _, l := range s.lanes {
		out = append(out, l.accepted...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// Arrivals is the lane at path's accepted arrivals, in order.
func (s *Sandbox) Arrivals(path string) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.lanes[path]; l != nil {
		return append([]time.Time(nil), l.accepted...)
	}
	return nil
}

// Accepted is how many requests the lane at path has accepted.
func (s *Sandbox) Accepted(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.lanes[path]; l != nil {
		return len(l.accepted)
	}
	return 0
}
