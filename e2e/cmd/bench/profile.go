package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/google/pprof/profile"
	"k8s.io/client-go/kubernetes"
)

// profiler collects the controller's Go profiles and kube-apiserver's, for
// -profile-dir: CPU profiles of the whole cold start and of the churn, and
// a heap profile after convergence; and kube-apiserver's CPU profiles of the
// raw loops, the cold start, the churn and the deletion, to compare what
// the same writes cost it. The controller serves its profiles only when
// started with --profiling-bind-address (off by default), which
// startBinaryAs adds to the measured build when -profile-dir is set.
type profiler struct {
	dir  string
	n    int
	addr string // host:port the controller serves /debug/pprof/ on
}

// newProfiler picks a free loopback port for the controller's profiles.
func newProfiler(dir string, n int) (*profiler, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	_ = l.Close()
	return &profiler{dir: dir, n: n, addr: addr}, nil
}

// cpuChunk is the length of each CPU profile request. net/http/pprof
// profiles for a fixed time, and the cold start's length is not known in
// advance, so the profile is taken in chunks until the cold start is over,
// then merged.
const cpuChunk = 2 * time.Second

// startCPU profiles the controller's CPU in chunks until stop is called;
// stop returns once the last chunk is in and writes the merged profile,
// named after phase.
func (p *profiler) startCPU(ctx context.Context, phase string) (stop func() error) {
	return p.chunked(ctx, fmt.Sprintf("cpu-%s-%d.pb.gz", phase, p.n), func(ctx context.Context) ([]byte, error) {
		return p.get(ctx, "profile?seconds="+strconv.Itoa(cpuChunkSeconds))
	})
}

// startServerCPU is startCPU for kube-apiserver (which serves its profiles
// to the admin), into name: where the API server's CPU goes shows what the
// controller asks of it.
func (p *profiler) startServerCPU(ctx context.Context, kube kubernetes.Interface, name string) (stop func() error) {
	return p.chunked(ctx, fmt.Sprintf("apiserver-cpu-%s-%d.pb.gz", name, p.n), func(ctx context.Context) ([]byte, error) {
		return kube.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(cpuChunkSeconds)).DoRaw(ctx)
	})
}

// cpuChunkSeconds is cpuChunk as the profile endpoints' parameter.
const cpuChunkSeconds = int(cpuChunk / time.Second)

// chunked takes CPU profiles of cpuChunk each through chunk until stop is
// called, and writes them merged into name.
func (p *profiler) chunked(ctx context.Context, name string, chunk func(context.Context) ([]byte, error)) (stop func() error) {
	done := make(chan struct{})
	result := make(chan error, 1)
	go func() {
		var chunks []*profile.Profile
		var firstErr error
		for {
			select {
			case <-done:
				if len(chunks) == 0 {
					result <- fmt.Errorf("no CPU profile collected for %s: %v", name, firstErr)
					return
				}
				merged, err := profile.Merge(chunks)
				if err != nil {
					result <- err
					return
				}
				result <- p.write(name, merged)
				return
			default:
			}
			b, err := chunk(ctx)
			if err != nil {
				// The process may not listen yet; try again shortly.
				if firstErr == nil {
					firstErr = err
				}
				time.Sleep(50 * time.Millisecond)
				continue
			}
			prof, err := profile.ParseData(b)
			if err != nil {
				result <- fmt.Errorf("parsing a CPU profile for %s: %w", name, err)
				return
			}
			chunks = append(chunks, prof)
		}
	}()
	return func() error {
		close(done)
		return <-result
	}
}

// heap writes the controller's heap profile, after a garbage collection.
func (p *profiler) heap(ctx context.Context) error {
	b, err := p.get(ctx, "heap?gc=1")
	if err != nil {
		return err
	}
	prof, err := profile.ParseData(b)
	if err != nil {
		return fmt.Errorf("parsing the heap profile: %w", err)
	}
	return p.write(fmt.Sprintf("heap-cold-%d.pb.gz", p.n), prof)
}

func (p *profiler) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+"/debug/pprof/"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /debug/pprof/%s: %s: %s", path, resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}

func (p *profiler) write(name string, prof *profile.Profile) error {
	path := filepath.Join(p.dir, name)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := prof.Write(f); err != nil {
		f.Close()
		return err
	}
	step("Profile written to %s", path)
	return f.Close()
}
