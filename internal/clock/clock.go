// Package clock measures this process's wall clock against the API
// server's. Every time the history records is this process's clock
// reading; readers compare it with other clocks (the API server's, a flow
// log's). A replica whose clock is off by a second would state a pod as
// certain a second after it let go. So each response of the API server is
// a sample of its clock (its Date header, to the second), bounded by the
// request's round trip, and the samples of the last minutes together
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

	mu      sync.Mutex
	samples []sample
	lo, hi  time.Duration
	known   bool
}

// sample is what one response says: the offset lies in [lo, hi], the
// response arriving at local time at.
type sample struct {
	lo, hi time.Duration
	at     time.Time
}

// Window is how long a sample counts: long enough for the samples' phases
// against the server's whole seconds to spread (a Date is truncated to the
// second), short enough to follow a clock that drifts or is stepped.
const Window = 2 * time.Minute

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
	n := sample{lo: date.Sub(received), hi: date.Add(time.Second).Sub(sent), at: received}
	s.mu.Lock()
	defer s.mu.Unlock()
	keep := s.samples[:0]
	for _, o := range s.samples {
		if received.Sub(o.at) < s.window {
			keep = append(keep, o)
		}
	}
	s.samples = append(keep, n)
	s.bound()
}

// bound intersects the samples, newest first; where an older one does not
// meet the newer ones (a clock was stepped), the older ones are dropped.
func (s *Server) bound() {
	last := len(s.samples) - 1
	lo, hi := s.samples[last].lo, s.samples[last].hi
	i := last - 1
	for ; i >= 0; i-- {
		o := s.samples[i]
		nlo, nhi := max(lo, o.lo), min(hi, o.hi)
		if nlo > nhi {
			break
		}
		lo, hi = nlo, nhi
	}
	if i >= 0 {
		s.samples = append(s.samples[:0], s.samples[i+1:]...)
	}
	s.lo, s.hi, s.known = lo, hi, true
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
