package clock

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 29, 14, 5, 0, 0, time.UTC)

// TestObserveBoundsTheOffset checks samples of a server whose clock is
// 1.5 s ahead, read at several phases of its seconds: each bounds the
// offset by the round trip and the Date's truncation, and together they
// narrow it to the truth.
func TestObserveBoundsTheOffset(t *testing.T) {
	s := New(nil)
	if _, _, known := s.Offset(); known || s.Spread() != 0 {
		t.Fatal("an offset is known before any response")
	}
	const offset = 1500 * time.Millisecond
	for phase := time.Duration(50); phase < 1000; phase += 100 {
		sent := t0.Add(phase * time.Millisecond)
		received := sent.Add(10 * time.Millisecond)
		server := sent.Add(5*time.Millisecond + offset)
		s.Observe(server.Truncate(time.Second), sent, received)
		lo, hi, known := s.Offset()
		if !known || lo > offset || hi < offset {
			t.Fatalf("after phase %v ms: offset in [%v, %v], want it to hold %v", phase, lo, hi, offset)
		}
	}
	lo, hi, _ := s.Offset()
	if hi-lo > 120*time.Millisecond {
		t.Errorf("offset in [%v, %v] after ten phases, want within 120 ms", lo, hi)
	}
	if sp := s.Spread(); sp < offset || sp > offset+200*time.Millisecond {
		t.Errorf("Spread = %v, want about %v", sp, offset)
	}
}

// TestObserveFollowsAStep checks a local clock stepped by a minute: the
// samples before it no longer meet the new ones and are dropped, rather
// than leaving no bound at all.
func TestObserveFollowsAStep(t *testing.T) {
	s := New(nil)
	s.Observe(t0, t0.Add(-100*time.Millisecond), t0.Add(100*time.Millisecond))
	local := t0.Add(time.Second + time.Minute) // stepped a minute ahead
	s.Observe(t0.Add(time.Second), local, local.Add(10*time.Millisecond))
	lo, hi, _ := s.Offset()
	if lo > -time.Minute || hi < -time.Minute+time.Second-100*time.Millisecond || hi > 0 {
		t.Errorf("offset after the step in [%v, %v], want about -1m", lo, hi)
	}
}

// TestWrapSamplesResponses checks the round tripper: a response's Date is
// a sample, and ServerNow is then never earlier than the server's clock.
func TestWrapSamplesResponses(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Date", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat))
	}))
	defer srv.Close()
	s := New(nil)
	c := &http.Client{Transport: s.Wrap(http.DefaultTransport)}
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	lo, hi, known := s.Offset()
	if !known || lo > time.Hour || hi < time.Hour {
		t.Errorf("offset in [%v, %v] (known %v), want it to hold 1h", lo, hi, known)
	}
	if now := s.ServerNow(); now.Before(time.Now().Add(time.Hour - time.Second)) {
		t.Errorf("ServerNow = %v, want at least an hour ahead", now)
	}
}
