package framework

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"example.com/podtoip-controller/e2e/controlplane"
)

// WriteRelay is an HTTP relay in front of the API server that can lose the
// response to a write: the API server applies the write, and the client's
// request ends without an answer (its HTTP/2 stream is reset), as when a
// connection breaks after a request went out. Unlike the TCP relay
// (controlplane.Relay), which cannot see into the TLS it carries, it
// terminates TLS, so it can pick the one write whose answer goes missing.
//
// It forwards every request with the admin credentials of the control
// plane, so a client behind it acts as the admin user.
type WriteRelay struct {
	srv    *httptest.Server
	target *url.URL

	mu     sync.Mutex
	armed  []armedWrite
	lost   []RelayedWrite
	writes []RelayedWrite
}

// RelayedWrite is one write to an IPHistory that went through a
// WriteRelay.
type RelayedWrite struct {
	At     time.Time
	Method string
	Name   string // the IPHistory's name; empty for a create
	Status int
	// Request is the body the client sent (a JSON patch, an object, delete
	// options); Response the API server's answer, for a failed write.
	Request, Response string
	// Lost is set when the client never got the answer.
	Lost bool
}

func (w RelayedWrite) String() string {
	s := fmt.Sprintf("%s %s %s -> %d", w.At.Format("15:04:05.000"), w.Method, cmp.Or(w.Name, "(create)"), w.Status)
	if w.Lost {
		s += " (answer lost)"
	}
	s += " request " + w.Request
	if w.Status >= 300 {
		s += " answer " + w.Response
	}
	return s
}

// errLoseAnswer is what the relay's transport returns for a write whose
// answer is to go missing.
var errLoseAnswer = errors.New("the answer to this write is lost")

// iphistoryPath is the path of the IPHistory collection.
const iphistoryPath = "/apis/example.com/v1/iphistories"

// StartWriteRelay starts a WriteRelay in front of e.CP's API server and
// returns it with a kubeconfig whose server is the relay. It stops at the
// end of the test; start it before the client, so that the client stops
// first.
func (e *Env) StartWriteRelay(t testing.TB) (*WriteRelay, string) {
	t.Helper()
	target, err := url.Parse(e.CP.Host())
	if err != nil {
		t.Fatal(err)
	}
	upstream, err := rest.TransportFor(e.CP.Config)
	if err != nil {
		t.Fatal(err)
	}
	r := &WriteRelay{target: target}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
			pr.Out.Header.Del("Authorization")
		},
		// Watches stream: pass every byte on as it comes.
		FlushInterval: -1,
		Transport:     &relayTransport{r: r, next: upstream},
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			if errors.Is(err, errLoseAnswer) {
				// Reset the stream without a byte of answer.
				panic(http.ErrAbortHandler)
			}
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	r.srv = httptest.NewUnstartedServer(proxy)
	r.srv.EnableHTTP2 = true
	r.srv.StartTLS()
	t.Cleanup(func() {
		r.srv.CloseClientConnections()
		r.srv.Close()
	})
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.srv.Certificate().Raw})
	kc := e.KubeconfigWith(t, func(server *string, caData *[]byte) {
		*server = r.srv.URL
		*caData = caPEM
	})
	return r, kc
}

// armedWrite is a write whose answer the relay is to lose.
type armedWrite struct {
	name string
	when func(*History) bool
}

// LoseWrite makes the relay lose the answer to the next write to the
// IPHistory name that the API server accepts (2xx) and that leaves the
// object as when says (given the object the API server answered with): it
// is applied, and the client never learns it was.
func (r *WriteRelay) LoseWrite(name string, when func(*History) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.armed = append(r.armed, armedWrite{name, when})
}

// Lost returns the writes whose answers the relay lost, in order.
func (r *WriteRelay) Lost() []RelayedWrite {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lost)
}

// Writes returns every write to an IPHistory that went through the relay,
// in order.
func (r *WriteRelay) Writes() []RelayedWrite {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.writes)
}

// WaitLost waits up to within until the relay has lost n answers, and
// returns them.
func (r *WriteRelay) WaitLost(t testing.TB, within time.Duration, n int, what string) []RelayedWrite {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if l := r.Lost(); len(l) >= n {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting %v for %s: the relay lost %d answer(s), want %d; writes through it:\n%s",
				within, what, len(r.Lost()), n, FormatWrites(r.Writes()))
		}
		select {
		case <-tick.C:
		case <-t.Context().Done():
			t.Fatalf("waiting for %s: %v", what, t.Context().Err())
		}
	}
}

// FormatWrites lists writes one a line.
func FormatWrites(ws []RelayedWrite) string {
	var b strings.Builder
	for _, w := range ws {
		b.WriteString("  " + w.String() + "\n")
	}
	return b.String()
}

// relayTransport forwards to the API server and, for an armed IPHistory,
// swallows the answer to a successful write.
type relayTransport struct {
	r    *WriteRelay
	next http.RoundTripper
}

func (rt *relayTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	name, isWrite := iphistoryWrite(req)
	if !isWrite {
		return rt.next.RoundTrip(req)
	}
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
	}
	// The answer is read here: let the transport undo any compression.
	req.Header.Del("Accept-Encoding")
	resp, err := rt.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	answer, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(answer))
	w := RelayedWrite{At: time.Now(), Method: req.Method, Name: name, Status: resp.StatusCode, Request: string(body)}
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	if !ok {
		w.Response = strings.TrimSpace(string(answer))
	}
	var written *History
	if ok && req.Method != http.MethodDelete {
		var h History
		if json.Unmarshal(answer, &h) == nil {
			written = &h
		}
	}
	r := rt.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if written != nil {
		if i := slices.IndexFunc(r.armed, func(a armedWrite) bool { return a.name == name && a.when(written) }); i >= 0 {
			r.armed = slices.Delete(r.armed, i, i+1)
			w.Lost = true
			r.lost = append(r.lost, w)
		}
	}
	r.writes = append(r.writes, w)
	if w.Lost {
		return nil, errLoseAnswer
	}
	return resp, nil
}

// iphistoryWrite reports whether req writes an IPHistory, and which.
func iphistoryWrite(req *http.Request) (name string, ok bool) {
	switch req.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
	default:
		return "", false
	}
	p := req.URL.Path
	if p == iphistoryPath {
		return "", true
	}
	if rest, found := strings.CutPrefix(p, iphistoryPath+"/"); found && !strings.Contains(rest, "/") {
		return rest, true
	}
	return "", false
}

// holdsAddress reports whether the pod holds addr: it has the address, is
// not finished, its deletion is not final, and it does not use its node's
// network. A terminating pod still holds its address (its sandbox lives
// through its grace period): its hold stays open until the pod is gone or
// finished.
func holdsAddress(p *corev1.Pod, addr string) bool {
	if p.Spec.HostNetwork || PodDeletionFinal(p) || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	return slices.ContainsFunc(p.Status.PodIPs, func(ip corev1.PodIP) bool { return ip.IP == addr })
}

// HistoryMismatch compares the IPHistory of each IPv4 address in addresses
// with the pods of namespaces, and describes every difference: a live pod
// that holds the address and has no open hold, or more than one, and an
// open hold whose pod does not hold it. It returns "" when each address's
// open holds are exactly its live holders, one each.
func (e *Env) HistoryMismatch(ctx context.Context, namespaces, addresses []string) (string, error) {
	var pods []corev1.Pod
	for _, ns := range namespaces {
		list, err := e.CP.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", err
		}
		pods = append(pods, list.Items...)
	}
	var diffs []string
	for _, addr := range addresses {
		h, err := e.GetHistory(ctx, addr)
		if err != nil {
			return "", err
		}
		open := map[types.UID][]HistoryHold{}
		if h != nil {
			for _, hold := range h.Holders {
				if hold.To == nil {
					open[hold.PodUID] = append(open[hold.PodUID], hold)
				}
			}
		}
		for i := range pods {
			p := &pods[i]
			if !holdsAddress(p, addr) {
				continue
			}
			if n := len(open[p.UID]); n != 1 {
				diffs = append(diffs, fmt.Sprintf("%s: pod %s/%s holds it and has %d open holds, want 1", addr, p.Namespace, p.Name, n))
			}
			delete(open, p.UID)
		}
		for _, holds := range open {
			for _, hold := range holds {
				diffs = append(diffs, fmt.Sprintf("%s: open hold of %s/%s (uid %s, from %s), which does not hold it", addr, hold.Namespace, hold.Pod, hold.PodUID, hold.From.UTC().Format(time.RFC3339)))
			}
		}
	}
	sort.Strings(diffs)
	return strings.Join(diffs, "; "), nil
}

// WaitHistoryMatchesPods waits up to within until HistoryMismatch finds
// nothing, and fails the test with the last difference, the objects and
// the controllers' lines about IPHistories otherwise.
func (e *Env) WaitHistoryMatchesPods(t testing.TB, within time.Duration, what string, namespaces, addresses []string, procs ...*controlplane.Process) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(within)
	var last string
	var lastErr error
	for {
		last, lastErr = e.HistoryMismatch(t.Context(), namespaces, addresses)
		if lastErr == nil && last == "" {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-t.Context().Done():
		}
		if t.Context().Err() != nil {
			break
		}
	}
	t.Fatalf("%s: the IPHistories do not match the pods after %v: %s (error %v)\nobjects:\n%s\ncontroller lines about IPHistories:\n%s",
		what, within, last, lastErr, e.DescribeHistories(t, addresses), HistoryLogLines(30, procs...))
	return 0
}

// DescribeHistories returns the IPHistories of addresses as JSON, one a line.
func (e *Env) DescribeHistories(t testing.TB, addresses []string) string {
	var b strings.Builder
	for _, a := range addresses {
		h, err := e.GetHistory(context.Background(), a)
		switch {
		case err != nil:
			fmt.Fprintf(&b, "  %s: %v\n", a, err)
		case h == nil:
			fmt.Fprintf(&b, "  %s: none\n", a)
		default:
			j, _ := json.Marshal(struct {
				RV      string        `json:"resourceVersion"`
				Holders []HistoryHold `json:"holders"`
			}{h.ResourceVersion, h.Holders})
			fmt.Fprintf(&b, "  %s: %s\n", a, j)
		}
	}
	return b.String()
}

// HistoryLogLines returns the last n lines of each process's output that
// are about IPHistories.
func HistoryLogLines(n int, procs ...*controlplane.Process) string {
	var b strings.Builder
	for i, p := range procs {
		var lines []string
		for _, l := range strings.Split(p.Output(), "\n") {
			if strings.Contains(l, "IPHistor") {
				lines = append(lines, l)
			}
		}
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		fmt.Fprintf(&b, "  controller %d:\n", i+1)
		for _, l := range lines {
			b.WriteString("    " + l + "\n")
		}
	}
	return b.String()
}

// WhoHadNow runs `kubectl ptp who-had addr --at T -o json` for T the
// current second, and returns the pods it names ("namespace/pod"), its
// exit code and what it printed.
func (e *Env) WhoHadNow(t testing.TB, addr string) ([]string, int, string) {
	t.Helper()
	at := time.Now().UTC().Format(time.RFC3339)
	out, errOut, code := e.KubectlPTP(t, "who-had", addr, "--at", at, "-o", "json")
	printed := "kubectl ptp who-had " + addr + " --at " + at + ": exit " + fmt.Sprint(code) + ": " + strings.TrimSpace(out) + " " + strings.TrimSpace(errOut)
	var res struct {
		Holders []struct {
			Namespace string `json:"namespace"`
			Pod       string `json:"pod"`
		} `json:"holders"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%s: %v", printed, err)
	}
	var names []string
	for _, h := range res.Holders {
		names = append(names, h.Namespace+"/"+h.Pod)
	}
	return names, code, printed
}

// WaitNobodyHoldsNow waits up to within until `kubectl ptp who-had addr
// --at <now>` names no pod and exits as for nobody found: 1, or 4 where
// the plugin tells a time its history vouches for from one it does not
// vouch for yet. A hold that ended answers for the whole second it ended
// in, so the answer may name a pod for up to a second after its hold
// closed.
func (e *Env) WaitNobodyHoldsNow(t testing.TB, within time.Duration, addr string, procs ...*controlplane.Process) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		names, code, printed := e.WhoHadNow(t, addr)
		if len(names) == 0 && (code == 1 || code == 4) {
			return
		}
		if time.Now().After(deadline) || t.Context().Err() != nil {
			t.Fatalf("%v after the last pod holding %s went, who-had still names %v at the time asked; want nobody\n%s\nobject:\n%s\ncontroller lines about IPHistories:\n%s",
				within, addr, names, printed, e.DescribeHistories(t, []string{addr}), HistoryLogLines(30, procs...))
		}
		select {
		case <-time.After(300 * time.Millisecond):
		case <-t.Context().Done():
		}
	}
}

// NoDroppedHistory fails the test if a controller gave up writing the
// IPHistory of an address.
func NoDroppedHistory(t testing.TB, procs ...*controlplane.Process) {
	t.Helper()
	for i, p := range procs {
		if n := LogLines(p.Output(), "Dropping the IPHistory"); n > 0 {
			var lines []string
			for _, l := range strings.Split(p.Output(), "\n") {
				if strings.Contains(l, "Dropping the IPHistory") {
					lines = append(lines, l)
				}
			}
			t.Errorf("controller %d gave up on an IPHistory %d time(s):\n%s", i+1, n, strings.Join(lines, "\n"))
		}
	}
}

// DeleteHistoriesAtEnd deletes the IPHistories of addresses when the test
// ends, so that the tests after it find none of its objects. Register it
// before starting the controllers, so that it runs after they stopped.
func (e *Env) DeleteHistoriesAtEnd(t testing.TB, addresses ...string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, a := range addresses {
			_ = e.CP.Dynamic.Resource(IPHistoryGVR).Delete(ctx, a, metav1.DeleteOptions{})
		}
	})
}
