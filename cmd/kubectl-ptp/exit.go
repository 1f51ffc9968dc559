package main

import (
	"errors"
	"fmt"
)

// Exit codes, documented in the root command's help: scripts branch on them.
const (
	exitFound    = 0 // an answer was printed
	exitNotFound = 1 // asked and answered: nobody, no history, no conflict
	exitUsage    = 2 // a bad address, time, flag or argument
	exitAPI      = 3 // the cluster could not be asked
	// exitNotCovered is nobody found where the history cannot vouch for
	// the time: unlike exit 1, someone may have held the address unseen.
	exitNotCovered = 4
	// exitCheckFailed is check's: a check failed, which its line explains.
	exitCheckFailed = 5
)

const exitCodesHelp = `Exit codes:
  0  found: the answer is printed
  1  not found: nobody holds or held the address (who-had: at a time the
     history vouches for), it has no history, or no address is held twice
  2  usage error: a bad address, time, flag or argument
  3  API error: the cluster could not be asked (unreachable, credentials
     refused, access forbidden, the CRDs not installed)
  4  not covered: nobody was found, but the history cannot vouch for the
     time asked about (who-had): a pod may have held the address unseen
  5  check failed: a check of the installation printed fail (check)`

// exitError is an error with the exit code it ends the command with.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError marks err as a mistake in the command line (exit 2).
func usageError(err error) error { return &exitError{code: exitUsage, err: err} }

// usageErrorf is usageError of a formatted error.
func usageErrorf(format string, args ...any) error {
	return usageError(fmt.Errorf(format, args...))
}

// notFound is the answer "nobody" (exit 1): msg is printed as it is, not
// as an error.
func notFound(msg string) error {
	return &exitError{code: exitNotFound, err: errors.New(msg)}
}

// notCovered is the answer "nobody that the history saw" (exit 4): msg,
// which says why it cannot vouch for more, is printed as it is.
func notCovered(msg string) error {
	return &exitError{code: exitNotCovered, err: errors.New(msg)}
}

// checkFailed is check's verdict that a check failed (exit 5): msg, which
// names them, is printed as it is.
func checkFailed(msg string) error {
	return &exitError{code: exitCheckFailed, err: errors.New(msg)}
}

// apiError marks err as a failure to ask the cluster (exit 3).
func apiError(err error) error { return &exitError{code: exitAPI, err: err} }

// exitCode returns the exit code of a command's error. An error that no
// command classified comes from the command line parser itself (an unknown
// command, flag or argument count), so it is a usage error.
func exitCode(err error) int {
	if err == nil {
		return exitFound
	}
	if e, ok := errors.AsType[*exitError](err); ok {
		return e.code
	}
	return exitUsage
}
