package history

import (
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// at returns 2026-05-01 at the clock time hh:mm[:ss[.fff]] in UTC.
func at(clock string) time.Time {
	for _, layout := range []string{"15:04", "15:04:05", "15:04:05.000"} {
		if t, err := time.Parse(layout, clock); err == nil {
			return time.Date(2026, 5, 1, t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
		}
	}
	panic("bad clock " + clock)
}

func mt(clock string) *Time {
	t := NewTime(at(clock))
	return &t
}

// hold returns pod's hold from from to to ("" while it lasts), with
// EndedAfter when endedAfter is not "".
func hold(pod, from, to, endedAfter string) Hold {
	h := Hold{Namespace: "ns", Pod: pod, PodUID: uid(pod), Node: "node-1", From: *mt(from)}
	if to != "" {
		h.To = mt(to)
	}
	if endedAfter != "" {
		h.EndedAfter = mt(endedAfter)
	}
	return h
}

func uid(pod string) types.UID { return types.UID("uid-" + pod) }

// history returns a history of 10.244.1.7 with holds, its summary fields
// refreshed.
func history(holds ...Hold) *IPHistory {
	h, err := New("10.244.1.7")
	if err != nil {
		panic(err)
	}
	h.Holders = holds
	Refresh(h)
	return h
}

func pods(h *IPHistory) []string {
	var out []string
	for _, x := range h.Holders {
		end := "open"
		if x.To != nil {
			end = x.To.UTC().Format("15:04:05")
		}
		out = append(out, x.Pod+" "+x.From.UTC().Format("15:04:05")+"-"+end)
	}
	return out
}

func TestNew(t *testing.T) {
	h, err := New("FD00:0:0::1:0007")
	if err != nil || h.Name != "fd00--1-7" || h.Address != "fd00::1:7" || h.Kind != "IPHistory" || h.APIVersion != "example.com/v1" {
		t.Errorf("New = %+v, %v", h, err)
	}
	if _, err := New("fe80::1%eth0"); err == nil {
		t.Error("New accepted an address with a zone")
	}
}

func TestOpen(t *testing.T) {
	for _, tc := range []struct {
		name    string
		before  []Hold
		open    Hold
		changed bool
		want    []string
	}{
		{"first hold", nil, hold("a", "10:00", "", ""), true, []string{"a 10:00:00-open"}},
		{"the same pod again", []Hold{hold("a", "10:00", "", "")}, hold("a", "10:05", "", ""), false, []string{"a 10:00:00-open"}},
		{"after its own closed hold", []Hold{hold("a", "10:00", "10:05", "")}, hold("a", "10:06", "", ""),
			true, []string{"a 10:00:00-10:05:00", "a 10:06:00-open"}},
		{"kept in order of start", []Hold{hold("a", "10:00", "10:05", ""), hold("c", "10:20", "", "")}, hold("b", "10:10", "", ""),
			true, []string{"a 10:00:00-10:05:00", "b 10:10:00-open", "c 10:20:00-open"}},
		{"after equal starts", []Hold{hold("a", "10:00", "", "")}, hold("b", "10:00", "", ""),
			true, []string{"a 10:00:00-open", "b 10:00:00-open"}},
		{"start rounded down, end and uncertainty ignored", nil, hold("a", "10:00:07.900", "10:30", "10:20"),
			true, []string{"a 10:00:07-open"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := history(tc.before...)
			if got := Open(h, tc.open); got != tc.changed {
				t.Errorf("Open = %v, want %v", got, tc.changed)
			}
			if got := pods(h); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("holds = %q, want %q", got, tc.want)
			}
			if h.Holders[len(h.Holders)-1].EndedAfter != nil || int(h.Holds) != len(h.Holders) {
				t.Errorf("holds %+v, Holds %d", h.Holders, h.Holds)
			}
		})
	}
}

func TestOpenDropsTheEarliestEndedBeyondTheBound(t *testing.T) {
	h := history()
	start := at("00:00")
	for i := range MaxHolds {
		from := start.Add(time.Duration(i) * time.Minute)
		Open(h, Hold{Namespace: "ns", Pod: fmt.Sprint("p", i), PodUID: types.UID(fmt.Sprint(i)), From: NewTime(from)})
		// Pod 1 lets go last, so pod 2's is the second hold to end.
		end := from.Add(30 * time.Second)
		if i == 1 {
			end = start.Add(time.Hour)
		}
		Close(h, types.UID(fmt.Sprint(i)), end, nil)
	}
	if len(h.Holders) != MaxHolds || h.Dropped != 0 || h.RecordedFrom != nil {
		t.Fatalf("%d holds, %d dropped, recorded from %v; want %d, 0, unset", len(h.Holders), h.Dropped, h.RecordedFrom, MaxHolds)
	}
	for i, want := range []string{"p0", "p2"} {
		if !Open(h, Hold{Namespace: "ns", Pod: "new", PodUID: types.UID(fmt.Sprint("new", i)), From: NewTime(start.Add(2 * time.Hour))}) {
			t.Fatal("Open did not add a hold to a full history")
		}
		for _, x := range h.Holders {
			if x.Pod == want {
				t.Errorf("%s's hold, the earliest ended, was kept", want)
			}
		}
	}
	wantFrom := start.Add(2*time.Minute + 30*time.Second)
	if len(h.Holders) != MaxHolds || h.Dropped != 2 || !h.RecordedFrom.Time.Equal(wantFrom) || h.Holds != MaxHolds {
		t.Errorf("%d holds (Holds %d), %d dropped, recorded from %v; want %d, 2, %v", len(h.Holders), h.Holds, h.Dropped, h.RecordedFrom, MaxHolds, wantFrom)
	}
	if h.Holders[0].Pod != "p1" {
		t.Errorf("the first hold is %s's, want p1's, which ended late", h.Holders[0].Pod)
	}
}

func TestOpenAddsNoHoldBeyondMaxOpen(t *testing.T) {
	h := history()
	for i := range MaxHolds {
		if !Open(h, Hold{Namespace: "ns", Pod: fmt.Sprint("p", i), PodUID: types.UID(fmt.Sprint(i)), From: *mt("10:00")}) {
			t.Fatalf("Open %d did not add", i)
		}
	}
	late := Hold{Namespace: "ns", Pod: "late", PodUID: "late", From: *mt("10:01")}
	if Open(h, late) || len(h.Holders) != MaxHolds || h.Dropped != 0 {
		t.Fatalf("Open added a hold beyond %d open ones: %d holds, %d dropped", MaxHolds, len(h.Holders), h.Dropped)
	}
	Close(h, "0", at("10:02"), nil)
	if !Open(h, late) || h.Holders[len(h.Holders)-1].Pod != "late" || len(h.Holders) != MaxHolds || h.Dropped != 1 {
		t.Errorf("Open after a hold ended: %d holds, last %s, %d dropped", len(h.Holders), h.Holders[len(h.Holders)-1].Pod, h.Dropped)
	}
}

func TestClose(t *testing.T) {
	for _, tc := range []struct {
		name       string
		before     []Hold
		pod        string
		at         string
		endedAfter string
		changed    bool
		want       Hold
	}{
		{"observed end, kept to the millisecond", []Hold{hold("a", "10:00", "", "")}, "a", "10:05:00.100", "", true, hold("a", "10:00", "10:05:00.100", "")},
		{"observed end, rounded up to the millisecond", []Hold{hold("a", "10:00", "", "")}, "a", "10:05:00.1002", "", true, hold("a", "10:00", "10:05:00.101", "")},
		{"on a whole second", []Hold{hold("a", "10:00", "", "")}, "a", "10:05", "", true, hold("a", "10:00", "10:05", "")},
		{"unobserved end", []Hold{hold("a", "10:00", "", "")}, "a", "10:05", "10:03:30.900", true, hold("a", "10:00", "10:05", "10:03:30.900")},
		{"unobserved end, rounded down to the millisecond", []Hold{hold("a", "10:00", "", "")}, "a", "10:05", "10:03:30.9009", true, hold("a", "10:00", "10:05", "10:03:30.900")},
		{"endedAfter before the start", []Hold{hold("a", "10:00", "", "")}, "a", "10:05", "09:00", true, hold("a", "10:00", "10:05", "10:00")},
		{"endedAfter at the end", []Hold{hold("a", "10:00", "", "")}, "a", "10:05", "10:05", true, hold("a", "10:00", "10:05", "")},
		{"endedAfter after the end", []Hold{hold("a", "10:00", "", "")}, "a", "10:05", "10:06", true, hold("a", "10:00", "10:05", "")},
		{"end before the start", []Hold{hold("a", "10:00", "", "")}, "a", "09:59", "", true, hold("a", "10:00", "10:00", "")},
		{"not held", []Hold{hold("a", "10:00", "", "")}, "b", "10:05", "", false, hold("a", "10:00", "", "")},
		{"closed already", []Hold{hold("a", "10:00", "10:01", "")}, "a", "10:05", "", false, hold("a", "10:00", "10:01", "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := history(tc.before...)
			var endedAfter *time.Time
			if tc.endedAfter != "" {
				e := at(tc.endedAfter)
				endedAfter = &e
			}
			if got := Close(h, uid(tc.pod), at(tc.at), endedAfter); got != tc.changed {
				t.Errorf("Close = %v, want %v", got, tc.changed)
			}
			if !reflect.DeepEqual(h.Holders[0], tc.want) {
				t.Errorf("hold = %+v\nwant   %+v", h.Holders[0], tc.want)
			}
			if (h.Holder == "") != (h.Holders[0].To != nil) {
				t.Errorf("Holder = %q after Close", h.Holder)
			}
		})
	}
}

func TestClosesTheOpenHoldOfThePod(t *testing.T) {
	h := history(hold("a", "09:00", "09:10", ""), hold("b", "09:30", "", ""), hold("a", "10:00", "", ""))
	Close(h, uid("a"), at("10:30"), nil)
	if got, want := pods(h), []string{"a 09:00:00-09:10:00", "b 09:30:00-open", "a 10:00:00-10:30:00"}; !reflect.DeepEqual(got, want) {
		t.Errorf("holds = %q, want %q", got, want)
	}
	if h.Holder != "ns/b" || !h.Since.Time.Equal(at("09:30")) {
		t.Errorf("Holder %q since %v; want ns/b since 09:30", h.Holder, h.Since)
	}
}

func TestPrune(t *testing.T) {
	for _, tc := range []struct {
		name           string
		before         []Hold
		cutoff         string
		changed, empty bool
		want           []string
		recordedFrom   string
	}{
		{"nothing old", []Hold{hold("a", "10:00", "11:00", "")}, "10:30", false, false, []string{"a 10:00:00-11:00:00"}, ""},
		{"ended exactly at the cutoff is kept", []Hold{hold("a", "10:00", "11:00", "")}, "11:00", false, false, []string{"a 10:00:00-11:00:00"}, ""},
		{"ended before", []Hold{hold("a", "09:00", "09:30", ""), hold("b", "10:00", "11:00", "")}, "10:30", true, false,
			[]string{"b 10:00:00-11:00:00"}, "09:30"},
		{"open holds stay however old", []Hold{hold("a", "01:00", "", ""), hold("b", "02:00", "03:00", "")}, "12:00", true, false,
			[]string{"a 01:00:00-open"}, "03:00"},
		{"all gone", []Hold{hold("a", "01:00", "02:00", ""), hold("b", "02:00", "03:00", "")}, "12:00", true, true, nil, "03:00"},
		{"already empty", nil, "12:00", false, true, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := history(tc.before...)
			changed, empty := Prune(h, at(tc.cutoff))
			if changed != tc.changed || empty != tc.empty {
				t.Errorf("Prune = %v, %v; want %v, %v", changed, empty, tc.changed, tc.empty)
			}
			if got := pods(h); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("holds = %q, want %q", got, tc.want)
			}
			if tc.recordedFrom == "" && h.RecordedFrom != nil || tc.recordedFrom != "" && !h.RecordedFrom.Equal(mt(tc.recordedFrom)) {
				t.Errorf("RecordedFrom = %v, want %q", h.RecordedFrom, tc.recordedFrom)
			}
			if int(h.Holds) != len(h.Holders) {
				t.Errorf("Holds = %d with %d holds", h.Holds, len(h.Holders))
			}
		})
	}
}

func TestPruneKeepsTheLatestRecordedFrom(t *testing.T) {
	h := history(hold("a", "08:00", "09:00", ""), hold("b", "10:00", "11:00", ""))
	h.RecordedFrom = mt("09:30")
	Prune(h, at("10:00"))
	if !h.RecordedFrom.Equal(mt("09:30")) {
		t.Errorf("RecordedFrom = %v, want 09:30: it never goes back", h.RecordedFrom)
	}
}

func TestBound(t *testing.T) {
	var holds []Hold
	for i := range MaxHolds + 3 {
		from := at("00:00").Add(time.Duration(i) * time.Minute)
		x := Hold{Namespace: "ns", Pod: fmt.Sprint("p", i), PodUID: types.UID(fmt.Sprint(i)), From: NewTime(from)}
		if i%2 == 0 {
			to := NewTime(from.Add(time.Duration(MaxHolds+4-i) * time.Hour)) // the later started, the earlier ended
			x.To = &to
		}
		holds = append(holds, x)
	}
	h := history(holds...)
	if !Bound(h) || len(h.Holders) != MaxHolds || h.Dropped != 3 || h.Holds != MaxHolds {
		t.Fatalf("Bound: %d holds, %d dropped, Holds %d", len(h.Holders), h.Dropped, h.Holds)
	}
	for _, x := range h.Holders {
		if x.Pod == "p62" || x.Pod == "p64" || x.Pod == "p66" {
			t.Errorf("%s's hold was kept; it ended first", x.Pod)
		}
	}
	if Bound(h) {
		t.Error("Bound changed a bounded history")
	}

	// More open holds than the bound, which Open never makes: the oldest go.
	holds = nil
	for i := range MaxHolds + 1 {
		holds = append(holds, Hold{Namespace: "ns", Pod: fmt.Sprint("p", i), PodUID: types.UID(fmt.Sprint(i)), From: *mt("10:00")})
	}
	h = history(holds...)
	if !Bound(h) || len(h.Holders) != MaxHolds || h.Holders[0].Pod != "p1" || h.RecordedFrom != nil {
		t.Errorf("Bound of open holds: %d holds, first %s, recorded from %v", len(h.Holders), h.Holders[0].Pod, h.RecordedFrom)
	}
}

// TestBoundCountsDroppedUpToItsMaximum checks that Dropped stops at the
// largest int32 rather than wrap to a negative count.
func TestBoundCountsDroppedUpToItsMaximum(t *testing.T) {
	var holds []Hold
	for i := range MaxHolds + 1 {
		to := mt("11:00")
		holds = append(holds, Hold{Namespace: "ns", Pod: fmt.Sprint("p", i), PodUID: types.UID(fmt.Sprint(i)), From: *mt("10:00"), To: to})
	}
	h := history(holds...)
	h.Dropped = math.MaxInt32
	if !Bound(h) || h.Dropped != math.MaxInt32 {
		t.Errorf("Dropped = %d after one more hold dropped, want it kept at %d", h.Dropped, int32(math.MaxInt32))
	}
}

func TestRefresh(t *testing.T) {
	h := &IPHistory{Holders: []Hold{hold("a", "09:00", "09:10", ""), hold("b", "09:30", "", ""), hold("c", "09:20", "", "")}}
	if !Refresh(h) {
		t.Fatal("Refresh of an unsummarized history changed nothing")
	}
	if h.Holder != "ns/b, ns/c" || !h.Since.Equal(mt("09:30")) || h.Holds != 3 {
		t.Errorf("Holder %q, Since %v, Holds %d; want ns/b, ns/c, 09:30, 3", h.Holder, h.Since, h.Holds)
	}
	if Refresh(h) {
		t.Error("Refresh changed a summarized history")
	}
	// Equal times in another location are equal: an object decoded from
	// the API holds its times in local time.
	h.Since = &Time{Time: h.Since.In(time.FixedZone("x", 3600))}
	if Refresh(h) {
		t.Error("Refresh changed Since for the same instant in another zone")
	}
	h.Holders = nil
	if !Refresh(h) || h.Holder != "" || h.Since != nil || h.Holds != 0 {
		t.Errorf("Refresh of no holds: Holder %q, Since %v, Holds %d", h.Holder, h.Since, h.Holds)
	}
}

// FuzzOperations applies Open, Close, Prune and Bound in any order, with
// any times, and checks what every writer relies on after each: holds in
// order of From, at most MaxHolds, at most one open hold per pod, no hold
// ending before it starts, EndedAfter within [From, To), RecordedFrom
// never going back, and summaries that Refresh would not change.
func FuzzOperations(f *testing.F) {
	f.Add([]byte{0, 1, 10, 1, 1, 20, 0, 2, 15, 2, 0, 30, 3, 0, 0})
	f.Add([]byte{0, 1, 200, 0, 2, 100, 1, 1, 50, 1, 2, 250, 2, 0, 120})
	f.Fuzz(func(t *testing.T, ops []byte) {
		h := history()
		base := at("00:00")
		minute := func(b byte) time.Time { return base.Add(time.Duration(b) * time.Minute) }
		var recordedFrom *Time
		for len(ops) >= 3 {
			op, pod, when := ops[0]%6, types.UID(fmt.Sprint(ops[1]%80)), ops[2]
			ops = ops[3:]
			apply(h, op, pod, when, minute)
			if len(h.Holders) > MaxHolds {
				t.Fatalf("%d holds", len(h.Holders))
			}
			if o := h.Overflow; o != nil && o.To != nil && o.To.Before(&o.From) {
				t.Fatalf("the overflow ends (%v) before it starts (%v)", o.To, o.From)
			}
			open := map[types.UID]bool{}
			for i, x := range h.Holders {
				if i > 0 && x.From.Before(&h.Holders[i-1].From) {
					t.Fatalf("hold %d starts before hold %d", i, i-1)
				}
				if x.To == nil {
					if open[x.PodUID] {
						t.Fatalf("pod %s has two open holds", x.PodUID)
					}
					open[x.PodUID] = true
				} else if x.To.Before(&x.From) {
					t.Fatalf("hold %d ends before it starts", i)
				}
				if x.EndedAfter != nil && (x.To == nil || x.EndedAfter.Before(&x.From) || !x.EndedAfter.Before(x.To)) {
					t.Fatalf("hold %d has EndedAfter %v outside [%v, %v)", i, x.EndedAfter, x.From, x.To)
				}
			}
			if recordedFrom != nil && (h.RecordedFrom == nil || h.RecordedFrom.Before(recordedFrom)) {
				t.Fatalf("RecordedFrom went back from %v to %v", recordedFrom, h.RecordedFrom)
			}
			recordedFrom = h.RecordedFrom.DeepCopy()
			if Refresh(h) {
				t.Fatalf("the summaries were stale after op %d", op)
			}
		}
	})
}

// TestOverflowScope: an overflow recorded by a controller of one
// namespace is ended by it or by one of all namespaces, never by another
// namespace's; one that two namespaces' controllers recorded is ended by
// one of all namespaces only.
func TestOverflowScope(t *testing.T) {
	base := at("10:00")
	h := history()
	if !Overflowed(h, base, "a") || EndOverflow(h, base.Add(time.Minute), "b") || h.Overflow.To != nil {
		t.Fatalf("namespace b ended namespace a's overflow: %+v", h.Overflow)
	}
	if !EndOverflow(h, base.Add(time.Minute), "a") || h.Overflow.To == nil {
		t.Fatalf("namespace a did not end its own overflow: %+v", h.Overflow)
	}
	Overflowed(h, base.Add(2*time.Minute), "a")
	if h.Overflow.To != nil || !h.Overflow.From.Time.Equal(base) || h.Overflow.Namespace != "a" {
		t.Fatalf("reopened: %+v, want from %v, lasting, namespace a", h.Overflow, base)
	}
	Overflowed(h, base.Add(3*time.Minute), "b")
	if h.Overflow.Namespace != "" || EndOverflow(h, base.Add(4*time.Minute), "a") || EndOverflow(h, base.Add(4*time.Minute), "b") {
		t.Fatalf("two namespaces' overflow: %+v, want it kept for a controller of all namespaces", h.Overflow)
	}
	if !EndOverflow(h, base.Add(4*time.Minute), "") {
		t.Fatalf("a controller of all namespaces did not end it: %+v", h.Overflow)
	}
}
