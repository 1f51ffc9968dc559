package history

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestAt(t *testing.T) {
	h := history(
		hold("a", "09:00", "10:00", ""),
		hold("b", "10:00", "11:00", "10:30"), // ended unobserved between 10:30 and 11:00
		hold("c", "10:45", "", ""),           // joined while b may still have held it
	)
	for _, tc := range []struct {
		at   string
		want []string // pod, and "?" when uncertain
	}{
		{"08:59:59", nil},
		{"09:00", []string{"a"}},
		{"09:59:59", []string{"a"}},
		{"10:00", []string{"b"}}, // a's To is exclusive
		{"10:29:59", []string{"b"}},
		{"10:30", []string{"b?"}},
		{"10:45", []string{"b?", "c"}},
		{"10:59:59", []string{"b?", "c"}},
		{"11:00", []string{"c"}},
		{"23:00", []string{"c"}},
	} {
		var got []string
		for _, m := range At(h, at(tc.at)) {
			p := m.Pod
			if m.Uncertain {
				p += "?"
			}
			got = append(got, p)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("At(%s) = %q, want %q", tc.at, got, tc.want)
		}
	}
	if got := At(history(), at("10:00")); got != nil {
		t.Errorf("At of an empty history = %v", got)
	}
}

func TestOpenHoldsAndHoldOf(t *testing.T) {
	h := history(hold("a", "09:00", "10:00", ""), hold("b", "10:00", "", ""), hold("a", "10:30", "", ""))
	var got []string
	for _, x := range OpenHolds(h) {
		got = append(got, x.Pod+" "+x.From.UTC().Format("15:04"))
	}
	if want := []string{"b 10:00", "a 10:30"}; !reflect.DeepEqual(got, want) {
		t.Errorf("OpenHolds = %q, want %q", got, want)
	}
	if x, ok := HoldOf(h, uid("a")); !ok || !x.From.Equal(mt("10:30")) {
		t.Errorf("HoldOf(a) = %+v, %v; want its open hold from 10:30", x, ok)
	}
	if _, ok := HoldOf(h, uid("z")); ok {
		t.Error("HoldOf found a hold of a pod that has none")
	}
	if OpenHolds(history(hold("a", "09:00", "10:00", ""))) != nil {
		t.Error("OpenHolds of closed holds is not empty")
	}
}

func TestConflict(t *testing.T) {
	for _, tc := range []struct {
		name  string
		holds []Hold
		since string
	}{
		{"nobody", nil, ""},
		{"one holder", []Hold{hold("a", "09:00", "", "")}, ""},
		{"one after the other", []Hold{hold("a", "09:00", "10:00", ""), hold("b", "10:00", "", "")}, ""},
		{"two at once", []Hold{hold("a", "09:00", "", ""), hold("b", "10:00", "", "")}, "10:00"},
		{"three, out of order", []Hold{hold("c", "11:00", "", ""), hold("a", "09:00", "", ""), hold("b", "10:00", "", "")}, "10:00"},
	} {
		since, ok := Conflict(history(tc.holds...))
		if ok != (tc.since != "") || ok && !since.Equal(at(tc.since)) {
			t.Errorf("%s: Conflict = %v, %v; want %q", tc.name, since, ok, tc.since)
		}
	}
}

func TestRecordStart(t *testing.T) {
	if _, ok := RecordStart(history()); ok {
		t.Error("RecordStart of an empty history is set")
	}
	h := history(hold("b", "10:00", "", ""), hold("a", "09:00", "09:30", ""))
	if start, ok := RecordStart(h); !ok || !start.Equal(at("09:00")) {
		t.Errorf("RecordStart = %v, %v; want the oldest start, 09:00", start, ok)
	}
	if start, _ := RecordStart(history(hold("a", "09:00", "09:30", ""), hold("b", "10:00", "", ""))); !start.Equal(at("09:00")) {
		t.Errorf("RecordStart = %v, want the first hold's start, 09:00", start)
	}
	h.RecordedFrom = mt("08:00")
	if start, _ := RecordStart(h); !start.Equal(at("08:00")) {
		t.Errorf("RecordStart = %v, want RecordedFrom, 08:00", start)
	}
	var zero time.Time
	if start, _ := RecordStart(history()); start != zero {
		t.Errorf("RecordStart of an empty history = %v", start)
	}
}

// TestAtStartNotObserved checks a hold whose start was not observed: a time
// between From and StartedBefore is an uncertain match, a later one a
// certain match.
func TestAtStartNotObserved(t *testing.T) {
	h, _ := New("10.0.0.1")
	t0 := time.Date(2026, 11, 25, 14, 0, 0, 0, time.UTC)
	found := metav1.NewTime(t0.Add(10 * time.Minute))
	Open(h, Hold{Namespace: "ns", Pod: "a", PodUID: "u1", From: metav1.NewTime(t0), StartedBefore: &found})
	if m := At(h, t0.Add(5*time.Minute)); len(m) != 1 || !m[0].Uncertain {
		t.Errorf("At(before it was found) = %+v, want one uncertain match", m)
	}
	if m := At(h, t0.Add(15*time.Minute)); len(m) != 1 || m[0].Uncertain {
		t.Errorf("At(after it was found) = %+v, want one certain match", m)
	}
	// A StartedBefore not after From says nothing and is dropped.
	g, _ := New("10.0.0.2")
	Open(g, Hold{Namespace: "ns", Pod: "a", PodUID: "u1", From: found, StartedBefore: &found})
	if g.Holders[0].StartedBefore != nil {
		t.Errorf("StartedBefore = From kept: %+v", g.Holders[0])
	}
}
