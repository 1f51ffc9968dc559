package main

import (
	"bytes"
	"encoding/json"
	"testing"
)

// The trail's value types write in klog's text format what encoding/json
// writes for the values they stand for.
func TestTrailValuesWriteJSON(t *testing.T) {
	for _, ips := range [][]string{nil, {}, {"10.244.0.5"}, {"fd00::5", "10.244.0.5"}, {"not <an> \"ip\"", "\xff", "é"}} {
		var b bytes.Buffer
		ipList(ips).WriteText(&b)
		want, _ := json.Marshal(ips)
		if ips == nil {
			want = []byte("[]")
		}
		if b.String() != string(want) {
			t.Errorf("ipList(%q) writes %s, want %s", ips, b.String(), want)
		}
	}
	for _, v := range []bool{true, false} {
		var b bytes.Buffer
		boolText(v).WriteText(&b)
		if want, _ := json.Marshal(v); b.String() != string(want) {
			t.Errorf("boolText(%v) writes %s, want %s", v, b.String(), want)
		}
	}
}
