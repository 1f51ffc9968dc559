package kubeclient

import (
	"os"
	"testing"
)

// TestDefaultHTTP2HealthCheck: the binary turns client-go's HTTP/2 health
// check down from 30 s + 15 s to 10 s + 5 s when the environment says
// nothing, so a silently dead connection is dropped in about 15 s, and
// leaves whatever an operator set alone (including an empty value, which
// client-go reads as "off").
func TestDefaultHTTP2HealthCheck(t *testing.T) {
	const (
		readIdle = "HTTP2_READ_IDLE_TIMEOUT_SECONDS"
		ping     = "HTTP2_PING_TIMEOUT_SECONDS"
	)
	want := map[string]string{readIdle: "10", ping: "5"}
	if len(http2HealthCheck) != len(want) {
		t.Fatalf("http2HealthCheck = %v, want exactly %v", http2HealthCheck, want)
	}

	tests := []struct {
		name string
		set  map[string]string // the operator's environment; unset otherwise
		want map[string]string
	}{
		{name: "unset", want: want},
		{name: "both set", set: map[string]string{readIdle: "30", ping: "15"}, want: map[string]string{readIdle: "30", ping: "15"}},
		{name: "one set", set: map[string]string{ping: "2"}, want: map[string]string{readIdle: "10", ping: "2"}},
		{name: "set empty", set: map[string]string{readIdle: "", ping: ""}, want: map[string]string{readIdle: "", ping: ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k := range want {
				// Setenv restores the test process's value afterwards.
				t.Setenv(k, "")
				if v, ok := tc.set[k]; ok {
					t.Setenv(k, v)
				} else if err := os.Unsetenv(k); err != nil {
					t.Fatal(err)
				}
			}
			DefaultHTTP2HealthCheck()
			for k, v := range tc.want {
				got, ok := os.LookupEnv(k)
				if !ok || got != v {
					t.Errorf("%s = %q (set: %v), want %q", k, got, ok, v)
				}
			}
		})
	}
}
