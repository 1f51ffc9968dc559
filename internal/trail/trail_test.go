package trail

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
)

// logged writes one line with Log through klog's text format and returns it.
func logged(t *testing.T, event string, f Fields, previous []string) string {
	t.Helper()
	var b bytes.Buffer
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&b)))
	ctx := klog.NewContext(context.Background(), logr.Logger(logger))
	Log(ctx, event, f, previous, time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC))
	return b.String()
}

// Every key of the trail's interface is present on each line, with the
// values written as JSON (lists as arrays, hostNetwork as a JSON boolean),
// whatever the event.
func TestLogWritesEveryKey(t *testing.T) {
	f := Fields{PodUID: "u-1", NodeName: "node-1", PodIPs: []string{"fd00::5", "10.0.0.5"}, PodIPv4: "10.0.0.5", PodIPv6: "fd00::5", HostNetwork: true}
	for _, tc := range []struct {
		event    string
		previous []string
		want     []string
	}{
		{Assigned, nil, []string{`"PodToIp trail"`, `event="assigned"`, `podUID="u-1"`, `node="node-1"`, `podIPs=["fd00::5","10.0.0.5"]`, `podIPv4="10.0.0.5"`, `podIPv6="fd00::5"`, `hostNetwork=true`, `observed="2026-01-02T03:04:05.000000006Z"`}},
		{Changed, []string{"FD00::4"}, []string{`event="changed"`, `previousPodIPs=["fd00::4"]`, `hostNetwork=true`}},
		{Released, nil, []string{`event="released"`, `podIPs=["fd00::5","10.0.0.5"]`}},
	} {
		line := logged(t, tc.event, f, tc.previous)
		for _, w := range tc.want {
			if !strings.Contains(line, w) {
				t.Errorf("%s line %q lacks %s", tc.event, line, w)
			}
		}
		if tc.event != Changed && strings.Contains(line, "previousPodIPs") {
			t.Errorf("%s line %q has previousPodIPs", tc.event, line)
		}
	}
}

// A released mirror that holds its pod's own spelling is logged in
// canonical form, with its families, so one query finds every line of an
// address.
func TestLogReleasedIsCanonical(t *testing.T) {
	line := logged(t, Released, Fields{PodIPs: []string{"FD00:0::5", "010.0.0.5"}}, nil)
	for _, w := range []string{`podIPs=["fd00::5","10.0.0.5"]`, `podIPv4="10.0.0.5"`, `podIPv6="fd00::5"`, `hostNetwork=false`} {
		if !strings.Contains(line, w) {
			t.Errorf("line %q lacks %s", line, w)
		}
	}
}

// An empty address list is written as [], as JSON writes an empty list.
func TestLogEmptyListIsAnArray(t *testing.T) {
	line := logged(t, Assigned, Fields{}, nil)
	if want, _ := json.Marshal([]string{}); !strings.Contains(line, "podIPs="+string(want)) {
		t.Errorf("line %q does not write podIPs as []", line)
	}
}

// A line that lets go of addresses carries when each hold began, when
// known, so that with its observed time the hold is a closed interval; a
// line that gives nothing up carries none.
func TestLogHeldFrom(t *testing.T) {
	from := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	f := Fields{PodIPs: []string{"10.0.0.5"}, HeldFrom: map[string]time.Time{"10.0.0.5": from}}
	for _, event := range []string{Released, Changed} {
		if line := logged(t, event, f, []string{"10.0.0.5"}); !strings.Contains(line, `heldFrom={"10.0.0.5":"2026-01-02T03:00:00.000000000Z"}`) {
			t.Errorf("%s line %q lacks heldFrom", event, line)
		}
	}
	if line := logged(t, Assigned, f, nil); strings.Contains(line, "heldFrom") {
		t.Errorf("assigned line %q has heldFrom", line)
	}
	if line := logged(t, Released, Fields{PodIPs: []string{"10.0.0.5"}}, nil); strings.Contains(line, "heldFrom") {
		t.Errorf("a release the history does not know has heldFrom: %q", line)
	}
}
