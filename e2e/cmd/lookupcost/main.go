// Command lookupcost measures what a lookup by address costs the API server
// as the number of PodToIps grows: it starts a throwaway kube-apiserver and
// etcd, installs the CRD, creates N PodToIps in one namespace (as the
// controller writes them) and times, many times over, a field-selector LIST
// that matches one object and a GET of one object by name. A
// field-selector LIST of a custom resource is filtered by a scan of the
// watch cache (custom resources have no field index), so its time grows
// with N; a GET does not.
//
//	go run ./cmd/lookupcost -n 150000
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"

	"example.com/podtoip-controller/e2e/controlplane"
)

func main() {
	n := flag.Int("n", 150000, "PodToIps to create.")
	rounds := flag.Int("rounds", 50, "Lookups of each kind to time.")
	concurrency := flag.Int("concurrency", 32, "Creates in flight.")
	flag.Parse()
	if err := run(*n, *rounds, *concurrency); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(n, rounds, concurrency int) error {
	ctx := context.Background()
	cp, err := controlplane.Start(controlplane.Options{})
	if err != nil {
		return err
	}
	defer func() { _ = cp.Stop() }()
	if err := cp.InstallCRD(ctx); err != nil {
		return err
	}
	if _, err := cp.Kubectl(ctx, "create", "namespace", "lookup"); err != nil {
		return err
	}
	cfg := rest.CopyConfig(cp.Config)
	cfg.QPS = -1
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	host := strings.TrimRight(cp.Host(), "/")
	base := host + "/apis/example.com/v1/namespaces/lookup/podtoips"
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for range concurrency {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n && firstErr.Load() == nil; i = int(next.Add(1) - 1) {
				if err := send(ctx, client, http.MethodPost, base, mirror(i), http.StatusCreated); err != nil {
					firstErr.Store(err)
				}
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return err
	}
	fmt.Printf("created %d PodToIps in %.1fs\n", n, time.Since(start).Seconds())

	target := n / 2
	list := host + "/apis/example.com/v1/podtoips?fieldSelector=podIPv4%3D" + address(target)
	get := base + "/" + name(target)
	for _, l := range []struct{ what, url string }{{"field-selector LIST across namespaces, 1 match", list}, {"GET by name", get}} {
		var took []time.Duration
		for range rounds {
			t0 := time.Now()
			if err := send(ctx, client, http.MethodGet, l.url, nil, http.StatusOK); err != nil {
				return err
			}
			took = append(took, time.Since(t0))
		}
		slices.Sort(took)
		fmt.Printf("%s at %d PodToIps: median %v, p90 %v (%d rounds)\n", l.what, n,
			took[len(took)/2].Round(time.Microsecond), took[len(took)*9/10].Round(time.Microsecond), rounds)
	}
	return nil
}

func name(i int) string { return fmt.Sprintf("pod-%06d", i) }

func address(i int) string { return fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255) }

// mirror is a PodToIp as the controller writes it.
func mirror(i int) []byte {
	return fmt.Appendf(nil, `{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":%q,"labels":{"app.kubernetes.io/managed-by":"podtoip-controller"}},`+
		`"podName":%q,"podUID":"00000000-0000-4000-8000-%012d","podAddress":%q,"podIPs":[%q],"podIPv4":%q,"nodeName":"node-1","hostNetwork":false,"conflict":false}`,
		name(i), name(i), i, address(i), address(i), address(i))
}

func send(ctx context.Context, c *http.Client, method, url string, body []byte, want int) error {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, buf.String())
	}
	return nil
}
