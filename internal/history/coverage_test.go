package history

import (
	"bytes"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

func minute(min int) time.Time { return time.Date(2026, 11, 25, 14, min, 0, 0, time.UTC) }

func iv(from, to int) Interval {
	return Interval{From: NewTime(minute(from)), To: NewTime(minute(to))}
}

// TestExtend checks how a writer records what it proved: the same writer
// moving on extends its interval, a writer starting after a gap opens a
// new one, nothing is claimed beyond the whole seconds proven, intervals
// past the retention window go, and the number kept is bounded.
func TestExtend(t *testing.T) {
	for name, tc := range map[string]struct {
		have        []Interval
		from, to    time.Time
		before      time.Time
		want        []Interval
		wantChanged bool
	}{
		"first":            {nil, minute(0), minute(5), minute(-60), []Interval{iv(0, 5)}, true},
		"moving on":        {[]Interval{iv(0, 5)}, minute(0), minute(7), minute(-60), []Interval{iv(0, 7)}, true},
		"nothing new":      {[]Interval{iv(0, 7)}, minute(0), minute(7), minute(-60), []Interval{iv(0, 7)}, false},
		"never back":       {[]Interval{iv(0, 7)}, minute(0), minute(6), minute(-60), []Interval{iv(0, 7)}, false},
		"after a gap":      {[]Interval{iv(0, 7)}, minute(10), minute(12), minute(-60), []Interval{iv(0, 7), iv(10, 12)}, true},
		"expired interval": {[]Interval{iv(0, 7), iv(10, 12)}, minute(10), minute(20), minute(8), []Interval{iv(10, 20)}, true},
		"to before from":   {nil, minute(5), minute(4), minute(-60), nil, false},
		"partial milliseconds": {nil, minute(0).Add(300*time.Millisecond + 400*time.Microsecond), minute(1).Add(700*time.Millisecond + 600*time.Microsecond), minute(-60),
			[]Interval{{From: NewTime(minute(0).Add(301 * time.Millisecond)), To: NewTime(minute(1).Add(700 * time.Millisecond))}}, true},
	} {
		t.Run(name, func(t *testing.T) {
			c := &IPHistoryCoverage{Intervals: tc.have}
			changed := Extend(c, tc.from, tc.to, tc.before)
			if changed != tc.wantChanged || !equalIntervals(c.Intervals, tc.want) {
				t.Errorf("Extend = %v, %v; want %v, %v", changed, c.Intervals, tc.wantChanged, tc.want)
			}
		})
	}
}

func TestExtendKeepsAtMostMaxIntervals(t *testing.T) {
	c := &IPHistoryCoverage{}
	for i := range MaxIntervals + 3 {
		Extend(c, minute(2*i), minute(2*i).Add(30*time.Second), minute(-1))
	}
	if len(c.Intervals) != MaxIntervals || !c.Intervals[0].From.Time.Equal(minute(6)) {
		t.Errorf("kept %d intervals from %v, want %d from %v", len(c.Intervals), c.Intervals[0].From, MaxIntervals, minute(6))
	}
}

func TestCovers(t *testing.T) {
	c := &IPHistoryCoverage{Intervals: []Interval{iv(0, 5), iv(10, 12)}}
	for _, tc := range []struct {
		t    time.Time
		want bool
	}{
		{minute(-1), false}, {minute(0), true}, {minute(5), true}, {minute(5).Add(time.Second), false},
		{minute(11), true}, {minute(13), false},
	} {
		if got := Covers(c, tc.t); got != tc.want {
			t.Errorf("Covers(%v) = %v, want %v", tc.t, got, tc.want)
		}
	}
	if Covers(nil, minute(1)) {
		t.Error("no coverage covers a time")
	}
	if until, ok := CoveredUntil(c); !ok || !until.Equal(minute(12)) {
		t.Errorf("CoveredUntil = %v, %v", until, ok)
	}
	if CoverageName("") != "all" || CoverageName("shop") != "namespace.shop" {
		t.Errorf("names: %q, %q", CoverageName(""), CoverageName("shop"))
	}
}

// TestCoverageCRDMatchesTheType keeps the IPHistoryCoverage CRD's names,
// bound and properties equal to the type's.
func TestCoverageCRDMatchesTheType(t *testing.T) {
	data, err := os.ReadFile("../../artifacts/crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd map[string]any
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		var m map[string]any
		if err := yaml.UnmarshalStrict(doc, &m); err != nil {
			t.Fatal(err)
		}
		if get(m, "metadata", "name") == CoverageCRDName {
			crd = m
		}
	}
	if crd == nil {
		t.Fatalf("artifacts/crd.yaml has no %s", CoverageCRDName)
	}
	v := get(crd, "spec", "versions", 0)
	s := get(v, "schema", "openAPIV3Schema", "properties")
	for _, tc := range []struct {
		what      string
		got, want any
	}{
		{"group", get(crd, "spec", "group"), GroupVersion.Group},
		{"version", get(v, "name"), GroupVersion.Version},
		{"scope", get(crd, "spec", "scope"), "Cluster"},
		{"plural", get(crd, "spec", "names", "plural"), CoverageResource},
		{"kind", get(crd, "spec", "names", "kind"), CoverageKind},
		{"listKind", get(crd, "spec", "names", "listKind"), CoverageListKind},
		{"intervals maxItems", get(s, "intervals", "maxItems"), float64(MaxIntervals)},
	} {
		if tc.got != tc.want {
			t.Errorf("CRD %s = %v, want %v", tc.what, tc.got, tc.want)
		}
	}
	c := &IPHistoryCoverage{TypeMeta: metav1.TypeMeta{APIVersion: "v", Kind: "k"}, ObjectMeta: metav1.ObjectMeta{Name: "n"},
		Namespace: "ns", Writer: "w", Intervals: []Interval{iv(0, 1)}}
	if got, want := jsonKeys(t, c), propKeys(s); got != want {
		t.Errorf("IPHistoryCoverage's JSON fields are %s; the CRD's properties %s", got, want)
	}
	if got, want := jsonKeys(t, c.Intervals[0]), propKeys(get(s, "intervals", "items", "properties")); got != want {
		t.Errorf("Interval's JSON fields are %s; the CRD's properties %s", got, want)
	}
}

func equalIntervals(a, b []Interval) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].From.Equal(&b[i].From) || !a[i].To.Equal(&b[i].To) {
			return false
		}
	}
	return true
}
