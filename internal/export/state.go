package export

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"
)

// State is the cursor of an incremental export, kept in a file between
// runs: how far the last run exported (its Window's Until), for which
// cluster and coverage scope. A run exports (Until, the coverage's end now]
// and saves the new end only once its files are complete, so a run that
// is killed exports its window again, to files of the same names.
type State struct {
	Version int       `json:"version"`
	Cluster string    `json:"cluster"`
	Scope   string    `json:"scope"`
	Until   time.Time `json:"until"`
}

// LoadState reads the state at path; a missing file is the first run
// (nil, nil). A file that is not a state of this version, or of another
// cluster or scope, is an error: exporting from it would skip or repeat
// holds.
func LoadState(path, cluster, scope string) (*State, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the export state %s: %w", path, err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("the export state %s is not a state file (%v): remove it to export everything again, or give the right file", path, err)
	}
	switch {
	case s.Version > Version:
		return nil, fmt.Errorf("the export state %s is of a newer version (%d; this kubectl-ptp writes %d): use a newer kubectl-ptp", path, s.Version, Version)
	case s.Version < 1 || s.Until.IsZero():
		return nil, fmt.Errorf("the export state %s has no version or no until: remove it to export everything again, or give the right file", path)
	case s.Cluster != cluster:
		return nil, fmt.Errorf("the export state %s is of cluster %q, not %q: give each cluster a state file of its own (--cluster-name names it)", path, s.Cluster, cluster)
	case s.Scope != scope:
		return nil, fmt.Errorf("the export state %s is of the history of %s, not of %s: give each scope a state file of its own", path, scopeName(s.Scope), scopeName(scope))
	}
	return &s, nil
}

// Save writes s to path: to a temporary file, synced, then renamed, so
// that the file always holds a whole state.
func (s *State) Save(path string) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*.tmp")
	if err != nil {
		return fmt.Errorf("saving the export state: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("saving the export state: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("saving the export state: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("saving the export state: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("saving the export state: %w", err)
	}
	return nil
}

func scopeName(scope string) string {
	if scope == "" {
		return "all namespaces"
	}
	return "namespace " + scope
}

// FileName is the name of a run's files (before the table and the
// format): the cluster and where its window begins, so that a run
// repeated after it was killed writes the same names, or, for a snapshot,
// where it ends.
func FileName(cluster string, w Window) string {
	cluster = strings.Map(func(r rune) rune {
		if r < 0x80 && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' || r == '_' || r == '-') {
			return r
		}
		return '_' // an EKS cluster's ARN has ':' and '/'
	}, cluster)
	switch {
	case w.After == nil:
		return cluster + "-upto-" + w.Until.UTC().Format(fileTime)
	case w.After.IsZero():
		return cluster + "-first"
	}
	return cluster + "-after-" + w.After.UTC().Format(fileTime)
}

const fileTime = "20060102T150405.000Z"
