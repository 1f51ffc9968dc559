package process

import (
	"fmt"
	"runtime/debug"
	"strconv"
)

// MemoryLimitEnv names the variable the Deployment fills with the
// container's memory limit in bytes, through the downward API
// (resourceFieldRef limits.memory, divisor 1).
const MemoryLimitEnv = "PODTOIP_MEMORY_LIMIT"

// MemoryLimitFraction is the share of the container's memory limit given
// to the Go runtime as its soft limit (debug.SetMemoryLimit). Below it the
// garbage collector runs at its usual pace (GOGC); near it, it collects more
// often instead of letting the heap double, so a controller whose caches
// grow with the cluster is slowed down rather than killed by the kernel.
// The other tenth is for what the runtime does not count: the binary's code
// pages, which the kernel charges to the container too, and memory freed by
// the collector but not yet returned. GOMEMLIMIT itself is not set from the
// limit by the manifest: the downward API can only give the whole limit (or
// a whole number of a divisor's units, with no unit suffix for Go to read),
// which would leave no room for either.
const MemoryLimitFraction = 0.9

// ApplyMemorySettings gives the Go runtime its soft memory limit (a share of
// the container's, see MemoryLimitFraction) and its GC pace
// (defaultGCPercent), each unless the environment already sets it. It
// returns the limit it set, 0 if none, and sets nothing on an invalid
// container limit.
func ApplyMemorySettings(getenv func(string) string) (int64, error) {
	limit, err := goMemoryLimit(getenv)
	if err != nil {
		return 0, err
	}
	if limit > 0 {
		debug.SetMemoryLimit(limit)
	}
	if pct := gcPercent(getenv); pct > 0 {
		debug.SetGCPercent(pct)
	}
	return limit, nil
}

// goMemoryLimit returns the soft memory limit to give the Go runtime, from
// the environment: none (0) when GOMEMLIMIT is set (the runtime already
// applies it, and an operator's explicit setting wins) or when the
// container's limit is not given.
func goMemoryLimit(getenv func(string) string) (int64, error) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, nil
	}
	raw := getenv(MemoryLimitEnv)
	if raw == "" {
		return 0, nil
	}
	limit, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || limit <= 0 {
		return 0, fmt.Errorf("%s=%q: want the container's memory limit as a positive number of bytes (resourceFieldRef limits.memory, divisor 1)", MemoryLimitEnv, raw)
	}
	return int64(float64(limit) * MemoryLimitFraction), nil
}

// defaultGCPercent is the garbage collector's pace (GOGC) unless the
// environment sets one. Almost all of the controller's heap is its caches,
// which live as long as the process, so the collector's usual headroom
// (GOGC=100: the heap may grow to twice the live data before a collection)
// is mostly room for nothing but garbage. At 50 the heap grows by half the
// live data, trading a little collector CPU for memory (docs/performance.md
// has the figures).
const defaultGCPercent = 50

// gcPercent returns the GOGC to set, or 0 when GOGC is set in the
// environment (the runtime already applies it: an operator's explicit
// setting wins).
func gcPercent(getenv func(string) string) int {
	if getenv("GOGC") != "" {
		return 0
	}
	return defaultGCPercent
}
