package framework

// A flood of callers without valid credentials against the secure metrics
// endpoint, for the tests that check it cannot wear the controller down.

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Flood is many callers sending requests with random bearer tokens, as
// someone without credentials trying to make the controller spend its API
// budget on reviewing them would. Each caller sends at a set pace, with a
// fresh token each time (a token seen before may be answered from a cache),
// and gives up on a request after a short timeout without waiting for the
// answer: the review a request started may outlive it.
type Flood struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	codes map[int]int // status code → requests; 0: no answer in time
}

// StartFlood floods url from callers goroutines, each sending a request
// every interval (or as soon as the previous one ended, if later) and
// giving up on it after timeout. It stops at Stop or at the end of the
// test.
func StartFlood(t testing.TB, url string, callers int, interval, timeout time.Duration) *Flood {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &Flood{cancel: cancel, codes: map[int]int{}}
	client := &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			// The controller's certificate is self-signed.
			TLSClientConfig:     &tls.Config{InsecureSkipVerify: true},
			MaxIdleConnsPerHost: callers,
		},
	}
	for range callers {
		f.wg.Go(func() {
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				f.record(send(ctx, client, url))
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		})
	}
	t.Cleanup(func() { f.Stop() })
	return f
}

// send makes one request with a random token and returns its status code,
// 0 if it got none.
func send(ctx context.Context, client *http.Client, url string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0
	}
	req.Header.Set("Authorization", "Bearer "+randomToken())
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// randomToken looks like a ServiceAccount token's length, and no cache has
// seen it.
func randomToken() string {
	b := make([]byte, 600)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (f *Flood) record(code int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.codes[code]++
}

// Sent is how many requests the flood has made so far.
func (f *Flood) Sent() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.codes {
		n += c
	}
	return n
}

// Stop stops the callers and waits for them; it returns the requests by
// status code (0: no answer in time). Stopping twice is harmless.
func (f *Flood) Stop() map[int]int {
	f.cancel()
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[int]int, len(f.codes))
	for code, n := range f.codes {
		out[code] = n
	}
	return out
}

// FormatCodes shows Stop's counts in a log line: "401×120 429×5000
// none×3".
func FormatCodes(codes map[int]int) string {
	keys := make([]int, 0, len(codes))
	for code := range codes {
		keys = append(keys, code)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, code := range keys {
		name := fmt.Sprint(code)
		if code == 0 {
			name = "none"
		}
		parts = append(parts, fmt.Sprintf("%s×%d", name, codes[code]))
	}
	return strings.Join(parts, " ")
}

// GetAsWithin is HTTPGetAs giving up after within: for a scraper that
// must be answered in time. It returns the status code and body, or the
// error that kept an answer from coming.
func GetAsWithin(ctx context.Context, url, token string, within time.Duration) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	code, body, err := getAs(ctx, url, token)
	return code, string(body), err
}
