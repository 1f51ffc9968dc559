package history

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/types"
)

func TestRecordKeepsWhatTheNextWriteNeeds(t *testing.T) {
	v6, err := New("fd00::1:7")
	if err != nil {
		t.Fatal(err)
	}
	if s, err := RecordOf(v6).Skeleton("FD00:0::1:7"); err != nil || s.Name != "fd00--1-7" || s.Address != "fd00::1:7" {
		t.Errorf("skeleton of an IPv6 history = %+v, %v", s, err)
	}
	h := history(hold("a", "10:00", "10:05", "10:01"), hold("b", "10:05", "", ""))
	h.UID, h.ResourceVersion, h.Dropped, h.RecordedFrom = "0b3c1a4e-55aa-4c5e-9a53-7a0d7d3f7c11", "42", 3, mt("09:00")
	h.Holders[1].StartedBefore = mt("10:06")
	r := RecordOf(h)
	if r.Holds[0].Name != "" || r.Holds[1].Name != "b" || r.Holds[1].Namespace != "ns" {
		t.Errorf("names kept: %+v, want only the open hold's", r.Holds)
	}
	s, err := r.Skeleton(h.Address)
	if err != nil {
		t.Fatal(err)
	}
	if s.ResourceVersion != "42" || s.Dropped != 3 || !s.RecordedFrom.Equal(h.RecordedFrom) ||
		s.Holder != h.Holder || !s.Since.Equal(h.Since) || s.Holds != 2 || s.Address != h.Address {
		t.Errorf("skeleton %+v, want the identity and summaries of %+v", s, h)
	}
	for i := range h.Holders {
		if keyOf(s.Holders[i]) != keyOf(h.Holders[i]) || !s.Holders[i].To.Equal(h.Holders[i].To) {
			t.Errorf("skeleton hold %d = %+v, want %+v", i, s.Holders[i], h.Holders[i])
		}
	}
}

func TestPatchWithoutChangeOnlyChecksTheVersion(t *testing.T) {
	h := history(hold("a", "10:00", "", ""))
	h.ResourceVersion = "7"
	p, ok := Patch(h, h.DeepCopy())
	if want := `[{"op":"replace","path":"/metadata/resourceVersion","value":"7"}]`; !ok || string(p) != want {
		t.Errorf("Patch = %s, %v; want %s", p, ok, want)
	}
}

func TestPatchDeclinesHoldsItCannotTellApart(t *testing.T) {
	// A pod that let go of the address and took it again within a second.
	h := history(hold("a", "10:00", "10:00", ""), hold("a", "10:00", "", ""))
	if _, ok := Patch(h, h.DeepCopy()); ok {
		t.Error("Patch accepted two holds of one pod from the same second")
	}
}

// FuzzPatch applies the same operations to an object and to the skeleton
// of its Record, and checks that the patch computed from the skeletons,
// applied as the API server does, gives exactly the object the operations
// made: what the writer relies on to write a change without the object.
func FuzzPatch(f *testing.F) {
	f.Add([]byte{0, 1, 10, 1, 1, 20, 0, 2, 15, 2, 0, 30, 3, 0, 0})
	f.Add([]byte{0, 1, 200, 0, 2, 100, 1, 1, 50, 1, 2, 250, 2, 0, 120, 0, 3, 7})
	f.Add([]byte{0, 1, 1, 1, 1, 2, 0, 1, 3, 1, 1, 4, 0, 1, 5})
	f.Fuzz(func(t *testing.T, ops []byte) {
		h := history()
		h.UID, h.ResourceVersion = "u", "1"
		base := at("00:00")
		minute := func(b byte) time.Time { return base.Add(time.Duration(b) * time.Minute) }
		for len(ops) >= 3 {
			op, pod, when := ops[0]%6, types.UID(fmt.Sprint(ops[1]%80)), ops[2]
			ops = ops[3:]
			r := RecordOf(h)
			before, err := r.Skeleton(h.Address)
			if err != nil {
				t.Fatal(err)
			}
			after, prev := before.DeepCopy(), h.DeepCopy()
			for _, o := range []*IPHistory{h, after} {
				apply(o, op, pod, when, minute)
			}
			p, ok := Patch(before, after)
			if !ok {
				if _, unique := keys(h); unique {
					t.Fatalf("Patch declined a history whose holds are all told apart: %+v", h.Holders)
				}
				return
			}
			want, _ := json.Marshal(h)
			was, _ := json.Marshal(prev)
			patch, err := jsonpatch.DecodePatch(p)
			if err != nil {
				t.Fatalf("decoding %s: %v", p, err)
			}
			got, err := patch.Apply(was)
			if err != nil {
				t.Fatalf("applying %s: %v", p, err)
			}
			var g, w map[string]any
			_ = json.Unmarshal(got, &g)
			_ = json.Unmarshal(want, &w)
			if l, ok := g["holders"].([]any); ok && len(l) == 0 {
				delete(g, "holders") // no hold left: the writer deletes the object
			}
			if !reflect.DeepEqual(g, w) {
				t.Fatalf("patch %s\nmade %s\nwant %s", p, got, want)
			}
		}
	})
}

// apply makes one fuzzed change to o (FuzzOperations, FuzzPatch): an Open,
// some with StartedBefore; a Close, seen or with EndedAfter; a Prune; a
// Bound; an overflow that starts or ends.
func apply(o *IPHistory, op byte, pod types.UID, when byte, minute func(byte) time.Time) {
	switch op {
	case 0:
		hold := Hold{Namespace: "ns", Pod: "pod-" + string(pod), PodUID: pod, Node: "n", From: NewTime(minute(when))}
		if when%5 == 0 {
			sb := NewTime(minute(when + 1))
			hold.StartedBefore = &sb
		}
		Open(o, hold)
	case 1:
		after := minute(when / 2)
		if when%3 == 0 {
			Close(o, pod, minute(when), nil)
		} else {
			Close(o, pod, minute(when), &after)
		}
	case 2:
		Prune(o, minute(when))
	case 3:
		Bound(o)
	case 4:
		Overflowed(o, minute(when), []string{"", "a", "b"}[int(pod[0])%3])
	case 5:
		EndOverflow(o, minute(when), []string{"", "a", "b"}[int(pod[0])%3])
	}
}
