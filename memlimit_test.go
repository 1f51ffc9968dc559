package main

import "testing"

func TestGoMemoryLimit(t *testing.T) {
	for name, tc := range map[string]struct {
		env     map[string]string
		want    int64
		wantErr bool
	}{
		"nothing set":           {nil, 0, false},
		"container limit":       {map[string]string{memoryLimitEnv: "419430400"}, 377487360, false},
		"GOMEMLIMIT wins":       {map[string]string{memoryLimitEnv: "419430400", "GOMEMLIMIT": "100MiB"}, 0, false},
		"not a number":          {map[string]string{memoryLimitEnv: "400Mi"}, 0, true},
		"zero":                  {map[string]string{memoryLimitEnv: "0"}, 0, true},
		"negative":              {map[string]string{memoryLimitEnv: "-1"}, 0, true},
		"GOMEMLIMIT only":       {map[string]string{"GOMEMLIMIT": "100MiB"}, 0, false},
		"empty container limit": {map[string]string{memoryLimitEnv: ""}, 0, false},
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
