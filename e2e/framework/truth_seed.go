package framework

// The seeds of TestHistoryTruth: random by default, fixed by a flag or the
// environment, and the regression seeds kept in a file.

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// TruthSeed is one seed to run, short or full.
type TruthSeed struct {
	Seed uint64
	Full bool
	// Note says where it comes from (a regression case's comment).
	Note string
}

// ReadTruthSeeds reads the regression seeds of path: one a line, "SEED
// short" or "SEED full", then an optional "# note"; blank lines and lines
// starting with '#' are ignored. A missing file has none.
func ReadTruthSeeds(path string) ([]TruthSeed, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []TruthSeed
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		note := ""
		if i := strings.Index(line, "#"); i >= 0 {
			line, note = strings.TrimSpace(line[:i]), strings.TrimSpace(line[i+1:])
		}
		fields := strings.Fields(line)
		if len(fields) != 2 || fields[1] != "short" && fields[1] != "full" {
			return nil, fmt.Errorf("%s:%d: want \"SEED short|full [# note]\", got %q", path, n, sc.Text())
		}
		seed, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, TruthSeed{Seed: seed, Full: fields[1] == "full", Note: note})
	}
	return out, sc.Err()
}
