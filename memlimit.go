package main

import (
	"fmt"
	"strconv"
)

// memoryLimitEnv names the variable the Deployment fills with the
// container's memory limit in bytes, through the downward API
// (resourceFieldRef limits.memory, divisor 1).
const memoryLimitEnv = "PODTOIP_MEMORY_LIMIT"

// memoryLimitFraction is the share of the container's memory limit given
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
const memoryLimitFraction = 0.9

// goMemoryLimit returns the soft memory limit to give the Go runtime, from
// the environment: none (0) when GOMEMLIMIT is set (the runtime already
// applies it, and an operator's explicit setting wins) or when the
// container's limit is not given.
func goMemoryLimit(getenv func(string) string) (int64, error) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, nil
	}
	raw := getenv(memoryLimitEnv)
	if raw == "" {
		return 0, nil
	}
	limit, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || limit <= 0 {
		return 0, fmt.Errorf("%s=%q: want the container's memory limit as a positive number of bytes (resourceFieldRef limits.memory, divisor 1)", memoryLimitEnv, raw)
	}
	return int64(float64(limit) * memoryLimitFraction), nil
}

// defaultGCPercent is the garbage collector's pace (GOGC) unless the
// environment sets one. Almost all of the controller's heap is its caches,
// which live as long as the process, so the collector's usual headroom
// (GOGC=100: the heap may grow to twice the live data before a collection)
// is mostly room for nothing but garbage: at 10,000 pods it was 9 MiB of
// the 56 MiB resident. At 50 the heap grows by half the live data: a
// quarter less memory for a few per cent more CPU in the collector.
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
