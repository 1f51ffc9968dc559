// Package clock measures this process's wall clock against the API
// server's. Every time the history records is this process's clock
// reading; readers compare it with other clocks (the API server's, a flow
// log's). A replica whose clock is off by a second would state a pod as
// certain a second after it let go. So each response of the API server is
// a sample of its clock (its Date header, to the second), bounded by the
// request's round trip, and the samples of the last minute or two together
// bound the offset; the history widens every time it records by it, and
// stops vouching for time while it is too large.
package clock

import (
	"net/http"
	"sync"
	"time"
)

// Server follows the offset of the API server's clock from this
// process's (server minus local), from the responses it sees.
type Server struct {
	now    func() time.Time
	window time.Duration

	mu sync.Mutex
	// cur and prev intersect the samples of the current window and of the
	// one before: the offset's bound spans one to two windows of samples,
	// at a constant cost a response.
	cur, prev span
	lo, hi    time.Duration
	known     bool
}

// span is the intersection of the samples since start: the offset lies in
// [lo, hi]; n counts them (0: none).
type span struct {
	lo, hi time.Duration
	start  time.Time
	n      int
}

// take narrows s by the sample [lo, hi], and reports false, changing
// nothing, if they do not meet (a clock was stepped).
func (s *span) take(lo, hi time.Duration) bool {
	if s.n == 0 {
		s.lo, s.hi, s.n = lo, hi, 1
		return true
	}
	nlo, nhi := max(s.lo, lo), min(s.hi, hi)
	if nlo > nhi {
		return false
	}
	s.lo, s.hi, s.n = nlo, nhi, s.n+1
	return true
}

// Window is how long a window of samples lasts: long enough for the
// samples' phases against the server's whole seconds to spread (a Date is
// truncated to the second), short enough to follow a clock that drifts or
// is stepped.
const Window = time.Minute

// New returns a Server on the local clock now (nil: time.Now).
func New(now func() time.Time) *Server {
	if now == nil {
		now = time.Now
	}
	return &Server{now: now, window: Window}
}

// Now returns this process's clock.
func (s *Server) Now() time.Time { return s.now() }

// Wrap returns rt with each response's Date header taken as a sample; for
// rest.Config's Wrap.
func (s *Server) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper{s: s, rt: rt}
}

type roundTripper struct {
	s  *Server
	rt http.RoundTripper
}

func (r roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	sent := r.s.now()
	resp, err := r.rt.RoundTrip(req)
	if err == nil {
		if d, perr := http.ParseTime(resp.Header.Get("Date")); perr == nil {
			r.s.Observe(d, sent, r.s.now())
		}
	}
	return resp, err
}

// Observe takes a response whose Date was date, to a request sent at sent
// and answered at received (local times): the server read its clock
// between the two, and truncated it to the second.
func (s *Server) Observe(date, sent, received time.Time) {
	if received.Before(sent) {
		return // the local clock was stepped back meanwhile
	}
	lo, hi := date.Sub(received), date.Add(time.Second).Sub(sent)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur.n > 0 && received.Sub(s.cur.start) >= s.window {
		s.prev, s.cur = s.cur, span{}
	}
	if s.cur.n == 0 {
		s.cur.start = received
	}
	if !s.cur.take(lo, hi) {
		// Stepped: the samples before say nothing of the clock now.
		s.prev, s.cur = span{}, span{start: received}
		s.cur.take(lo, hi)
	}
	s.lo, s.hi = s.cur.lo, s.cur.hi
	if s.prev.n > 0 {
		if nlo, nhi := max(s.lo, s.prev.lo), min(s.hi, s.prev.hi); nlo <= nhi {
			s.lo, s.hi = nlo, nhi
		}
	}
	s.known = true
}

// Offset returns the bounds of the server's clock minus this process's,
// and false before any response was seen.
func (s *Server) Offset() (lo, hi time.Duration, known bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lo, s.hi, s.known
}

// Spread returns how far this process's clock may be from the server's,
// either way (0 before any response: unknown, see Offset).
func (s *Server) Spread() time.Duration {
	lo, hi, _ := s.Offset()
	return max(abs(lo), abs(hi))
}

// ServerNow returns the latest time the server's clock can show now: a
// reader's "now", which the retention window starts from, is then never
// earlier than the server's. Before any response it is the local clock.
func (s *Server) ServerNow() time.Time {
	_, hi, _ := s.Offset()
	return s.now().Add(hi)
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
