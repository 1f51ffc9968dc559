package enrich

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	goruntime "runtime"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"example.com/podtoip-controller/internal/history"
)

// SavedItem is an item of a saved list (`kubectl get iphc,iph -o json`),
// decoded once whatever its kind: the fields of IPHistory,
// IPHistoryCoverage, Node and IPAddress that enrich reads.
type SavedItem struct {
	Kind     string            `json:"kind"`
	Metadata metav1.ObjectMeta `json:"metadata"`
	// IPHistory
	Address      string            `json:"address"`
	Holders      []SavedHold       `json:"holders"`
	RecordedFrom *history.Time     `json:"recordedFrom"`
	Overflow     *history.Overflow `json:"overflow"`
	// IPHistoryCoverage
	Namespace string             `json:"namespace"`
	Retention metav1.Duration    `json:"retention"`
	Intervals []history.Interval `json:"intervals"`
	// Node
	Status struct {
		Addresses []struct{ Type, Address string } `json:"addresses"`
	} `json:"status"`
	// IPAddress
	Spec struct {
		ParentRef struct{ Group, Resource, Namespace, Name string } `json:"parentRef"`
	} `json:"spec"`
}

// SavedHold is a history.Hold whose times are parsed in one step:
// metav1.Time decodes a JSON string and then parses it, and a saved
// history has three times for every hold.
type SavedHold struct {
	Namespace, Pod, Node          string
	PodUID                        types.UID `json:"podUID"`
	From                          stamp
	To, EndedAfter, StartedBefore *stamp
	TerminatingSince              *stamp `json:"terminatingSince"`
}

func (h *SavedHold) Hold() history.Hold {
	return history.Hold{Namespace: h.Namespace, Pod: h.Pod, PodUID: h.PodUID, Node: h.Node, From: history.Time(h.From),
		To: h.To.time(), EndedAfter: h.EndedAfter.time(), StartedBefore: h.StartedBefore.time(), TerminatingSince: h.TerminatingSince.time()}
}

// stamp is a time as the API writes it, RFC 3339.
type stamp history.Time

func (s *stamp) UnmarshalJSON(b []byte) error {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return fmt.Errorf("time %s is not an RFC 3339 string", b)
	}
	t, err := time.Parse(time.RFC3339, string(b[1:len(b)-1]))
	s.Time = t
	return err
}

func (s *stamp) time() *history.Time {
	if s == nil {
		return nil
	}
	t := history.Time(*s)
	return &t
}

// ReadSaved calls each with every item of a saved List, decoding one at a
// time, or with the one object the file holds. A List is framed by
// scanList; what it does not frame is read again from the start by
// decodeList.
func ReadSaved(f io.ReadSeeker, each func(*SavedItem)) error {
	r := bufio.NewReaderSize(f, 1<<20)
	if err := scanList(r, each); !errors.Is(err, errNotScanned) {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	r.Reset(f)
	return decodeList(r, each)
}

// decodeList is ReadSaved the standard way, token by token.
func decodeList(r io.Reader, each func(*SavedItem)) error {
	d := json.NewDecoder(r)
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return fmt.Errorf("not a JSON object (%v)", err)
	}
	var single map[string]json.RawMessage
	listed := false
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return err
		}
		if tok != "items" {
			var v json.RawMessage
			if err := d.Decode(&v); err != nil {
				return err
			}
			if single == nil {
				single = map[string]json.RawMessage{}
			}
			single[tok.(string)] = v
			continue
		}
		if tok, err := d.Token(); err != nil || tok != json.Delim('[') {
			return fmt.Errorf("items is not a list (%v)", err)
		}
		listed = true
		next := func() ([]byte, error) {
			if !d.More() {
				return nil, io.EOF
			}
			var raw json.RawMessage
			err := d.Decode(&raw)
			return raw, err
		}
		if err := decodeItems(next, each); err != nil {
			return err
		}
		if _, err := d.Token(); err != nil {
			return err
		}
	}
	if _, ok := single["kind"]; ok && !listed {
		raw, err := json.Marshal(single)
		if err != nil {
			return err
		}
		var it SavedItem
		if err := decodeItem(raw, &it); err != nil {
			return err
		}
		each(&it)
	}
	return nil
}

// itemBatch is a run of a list's items: read by one goroutine, decoded by
// another, handed on in order. The first item that cannot be read
// (readErr) or decoded (err) ends it: items holds those before it.
type itemBatch struct {
	raw          [][]byte
	items        []SavedItem
	readErr, err error
	done         chan struct{}
}

// decodeItems calls each with the items next returns, in order, up to
// the first that cannot be read (next's error; io.EOF after the last).
// Decoding an item into its type is most of the work of reading a saved
// history, and items depend on no other: one goroutine reads them, as
// many as there are cores decode them, in batches.
func decodeItems(next func() ([]byte, error), each func(*SavedItem)) error {
	const batchSize = 64
	workers := goruntime.GOMAXPROCS(0)
	work, order := make(chan *itemBatch, workers), make(chan *itemBatch, 2*workers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for b := range work {
				b.items = make([]SavedItem, 0, len(b.raw))
				for i := range b.raw {
					var it SavedItem
					if b.err = decodeItem(b.raw[i], &it); b.err != nil {
						break
					}
					b.items = append(b.items, it)
				}
				close(b.done)
			}
		})
	}
	defer wg.Wait()
	go func() {
		defer close(work)
		defer close(order)
		for last := false; !last; {
			b := &itemBatch{done: make(chan struct{})}
			for len(b.raw) < batchSize && !last {
				raw, err := next()
				switch {
				case errors.Is(err, io.EOF):
					last = true
				case err != nil:
					b.readErr, last = err, true
				default:
					b.raw = append(b.raw, raw)
				}
			}
			select {
			case order <- b:
			case <-stop:
				return
			}
			work <- b
		}
	}()
	defer close(stop)
	for b := range order {
		<-b.done
		for i := range b.items {
			each(&b.items[i])
		}
		if b.err != nil {
			return b.err
		}
		if b.readErr != nil {
			return b.readErr
		}
	}
	return nil
}
