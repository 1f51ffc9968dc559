package process

import (
	"math"
	"runtime/debug"
	"testing"
)

func TestGoMemoryLimit(t *testing.T) {
	for name, tc := range map[string]struct {
		env     map[string]string
		want    int64
		wantErr bool
	}{
		"nothing set":           {nil, 0, false},
		"container limit":       {map[string]string{MemoryLimitEnv: "419430400"}, 377487360, false},
		"GOMEMLIMIT wins":       {map[string]string{MemoryLimitEnv: "419430400", "GOMEMLIMIT": "100MiB"}, 0, false},
		"not a number":          {map[string]string{MemoryLimitEnv: "400Mi"}, 0, true},
		"zero":                  {map[string]string{MemoryLimitEnv: "0"}, 0, true},
		"negative":              {map[string]string{MemoryLimitEnv: "-1"}, 0, true},
		"GOMEMLIMIT only":       {map[string]string{"GOMEMLIMIT": "100MiB"}, 0, false},
		"empty container limit": {map[string]string{MemoryLimitEnv: ""}, 0, false},
	} {
		got, err := goMemoryLimit(func(k string) string { return tc.env[k] })
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("%s: goMemoryLimit = %d, %v; want %d, error %v", name, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestGCPercent(t *testing.T) {
	for env, want := range map[string]int{"": defaultGCPercent, "100": 0, "off": 0} {
		if got := gcPercent(func(k string) string {
			if k == "GOGC" {
				return env
			}
			return ""
		}); got != want {
			t.Errorf("GOGC=%q: gcPercent = %d, want %d", env, got, want)
		}
	}
}

// TestApplyMemorySettings checks that an invalid container limit is
// reported and that an operator's GOMEMLIMIT means no limit is set here.
func TestApplyMemorySettings(t *testing.T) {
	if _, err := ApplyMemorySettings(func(k string) string {
		return map[string]string{MemoryLimitEnv: "400Mi"}[k]
	}); err == nil {
		t.Error("ApplyMemorySettings accepted a limit that is not a number of bytes")
	}
	env := map[string]string{MemoryLimitEnv: "419430400", "GOMEMLIMIT": "100MiB", "GOGC": "100"}
	if limit, err := ApplyMemorySettings(func(k string) string { return env[k] }); limit != 0 || err != nil {
		t.Errorf("ApplyMemorySettings with GOMEMLIMIT and GOGC set = %d, %v; want 0, nil", limit, err)
	}
}

// TestApplyMemorySettingsSetsTheRuntime checks what the runtime is left
// with: the collector paced at GOGC=50 unless the operator set GOGC, and
// the memory limit at 90 % of the container's.
func TestApplyMemorySettingsSetsTheRuntime(t *testing.T) {
	prevGC := debug.SetGCPercent(100)
	prevLimit := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetGCPercent(prevGC); debug.SetMemoryLimit(prevLimit) })

	if _, err := ApplyMemorySettings(func(k string) string {
		return map[string]string{MemoryLimitEnv: "419430400"}[k]
	}); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetGCPercent(100); got != 50 {
		t.Errorf("GOGC unset: the collector runs at %d %%, want 50", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 419430400*9/10 {
		t.Errorf("memory limit %d, want 90 %% of 419430400", got)
	}
	if _, err := ApplyMemorySettings(func(k string) string { return map[string]string{"GOGC": "100"}[k] }); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC=100 set by the operator: the collector runs at %d %%, want it left at 100", got)
	}
}
