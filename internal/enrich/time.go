package enrich

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// msThreshold tells Unix milliseconds from seconds: 1e11 seconds is in the
// year 5138, 1e11 milliseconds in 1973, before any flow log.
const msThreshold = 1e11

// parseTime reads a record's time, in Unix nanoseconds: RFC 3339, or Unix
// seconds or milliseconds (told apart by size), with a fraction or not.
func parseTime(s string) (int64, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UnixNano(), nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is neither RFC 3339 nor Unix seconds or milliseconds", s)
	}
	unit := int64(1e9)
	if math.Abs(f) >= msThreshold {
		f, unit = f/1e3, 1e6
	}
	if math.Abs(f) > math.MaxInt64/1e9 {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n * unit, nil // exact, without float rounding
	}
	return int64(math.Round(f * 1e9)), nil
}
