package e2e

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The documentation read against the tests that prove it. (Tests that read
// the documentation against the product, the deployment section and the
// alert rules say, are in the families of what they check.)

type faultRow struct {
	fault string   // how the row's fault cell starts
	tests []string // the tests that prove the row
}

// faultRows maps each row of the fault table of docs/operations.md, by the
// start of its fault cell, to the tests that prove it. The tests' names start with
// TestFault, so `go test -run '^TestFault'` (make test-faults) runs exactly
// the table.
var faultRows = []faultRow{
	{"heavy churn", []string{"TestFaultChurn"}},
	{"SIGKILLed 5 times during churn", []string{"TestFaultRestartCrashLoop"}},
	{"API server stopped and restarted", []string{"TestFaultRestartAPIServer"}},
	{"connection resets", []string{"TestFaultNetwork"}},
	{"watches expired", []string{"TestFaultNetworkExpiredWatches"}},
	{"another client rewrites", []string{"TestFaultChurnFighter"}},
	{"leader SIGKILLed", []string{"TestFaultRestartLeaderFailover"}},
	{"SIGTERM during heavy churn", []string{"TestFaultShutdownDuringChurn"}},
	{"SIGTERM with a backlog", []string{"TestFaultShutdownFirstSignalStopsTakingWork"}},
	{"a second SIGTERM", []string{"TestFaultShutdownSecondSignalExitsAtOnce"}},
	{"leader cut off", []string{"TestFaultShutdownLeaseLossEndsTheLeader"}},
	{"RBAC removed at runtime", []string{"TestFaultForbiddenRBACRemovedAtRuntime"}},
	{"namespace terminating", []string{"TestFaultForbiddenTerminatingNamespace"}},
	{"bad input", []string{"TestFaultBadInput", "TestFaultBadInputCRDMissing"}},
}

// TestDocsFaultTableMatchesTests: every row of the fault table of
// docs/operations.md has its tests, every TestFault test is a row's, so
// the table and `make test-faults` cannot drift apart, and each of them
// runs the checker.
func TestDocsFaultTableMatchesTests(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(cp.Root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	in := false
	for _, line := range strings.Split(string(readme), "\n") {
		switch {
		case strings.HasPrefix(line, "| fault | behaviour |"):
			in = true
		case in && strings.HasPrefix(line, "|---"):
		case in && strings.HasPrefix(line, "| "):
			rows = append(rows, strings.TrimSpace(strings.Split(line, "|")[1]))
		case in:
			in = false
		}
	}
	if len(rows) == 0 {
		t.Fatal(`README.md has no table with the header "| fault | behaviour |"`)
	}

	// The tests `go test -run TestFault` selects: test functions whose name
	// contains it (the pattern is not anchored).
	files, err := filepath.Glob(filepath.Join(cp.Root, "e2e", "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	var selected []string
	checked := map[string]bool{} // the test calls the checker
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") && strings.Contains(fn.Name.Name, "TestFault") {
				selected = append(selected, fn.Name.Name)
				ast.Inspect(fn.Body, func(n ast.Node) bool {
					// suite.WaitConverged(...), or on another control plane
					// suite.On(bare).WaitConverged(...).
					if call, ok := n.(*ast.CallExpr); ok {
						if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "WaitConverged" {
							checked[fn.Name.Name] = true
						}
					}
					return true
				})
			}
		}
	}

	var mapped []string
	for _, r := range faultRows {
		var matches []string
		for _, row := range rows {
			if strings.HasPrefix(row, r.fault) {
				matches = append(matches, row)
			}
		}
		if len(matches) != 1 {
			t.Errorf("%d README fault rows start with %q, want 1: %q", len(matches), r.fault, matches)
		}
		mapped = append(mapped, r.tests...)
	}
	for _, row := range rows {
		if !slices.ContainsFunc(faultRows, func(r faultRow) bool { return strings.HasPrefix(row, r.fault) }) {
			t.Errorf("README fault row %q has no test here", row)
		}
	}
	slices.Sort(selected)
	slices.Sort(mapped)
	for _, name := range mapped {
		if _, found := slices.BinarySearch(selected, name); !found {
			t.Errorf("%s proves a README fault row but there is no such test (or its name lacks the TestFault prefix)", name)
		}
	}
	for _, name := range selected {
		if _, found := slices.BinarySearch(mapped, name); !found {
			t.Errorf("%s is selected by -run TestFault but proves no row of the README's fault table", name)
		}
	}
	// The README: every scenario that runs the controller on pods ends
	// with the checker. With bad input the controller exits before it
	// reads a pod.
	for _, name := range selected {
		if !checked[name] && name != "TestFaultBadInput" {
			t.Errorf("%s never runs the checker (WaitConverged)", name)
		}
	}
	if len(mapped) != len(slices.Compact(slices.Clone(mapped))) {
		t.Errorf("a test is listed for two rows: %v", mapped)
	}
	t.Logf("%d README fault rows, %d TestFault tests", len(rows), len(selected))
}

// TestDocsLinks: every relative link in the repository's Markdown names a
// file that exists and, into a Markdown file, a heading it has (GitHub's
// anchors), so moving or trimming a document cannot leave a link dangling.
func TestDocsLinks(t *testing.T) {
	root := cp.Root
	out, err := exec.Command("git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard", "*.md").Output()
	if err != nil {
		t.Fatal(err)
	}
	fences := regexp.MustCompile("(?s)```.*?```")
	code := regexp.MustCompile("`[^`\n]*`")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	anchors := map[string]map[string]bool{}
	for _, f := range strings.Fields(string(out)) {
		path := filepath.Join(root, f)
		b, err := os.ReadFile(path)
		if os.IsNotExist(err) {
			continue // deleted in the work tree
		} else if err != nil {
			t.Fatal(err)
		}
		text := code.ReplaceAllString(fences.ReplaceAllString(string(b), ""), "")
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target, frag, _ := strings.Cut(m[1], "#")
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			dest := path
			if target != "" {
				dest = filepath.Join(filepath.Dir(path), target)
			}
			if _, err := os.Stat(dest); err != nil {
				t.Errorf("%s: link to %s: no such file", f, m[1])
				continue
			}
			if frag == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			if anchors[dest] == nil {
				anchors[dest] = headingAnchors(t, dest)
			}
			if !anchors[dest][frag] {
				t.Errorf("%s: link to %s: no such heading", f, m[1])
			}
		}
	}
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown file: lower case, punctuation dropped, spaces as hyphens, a
// repeated heading numbered.
func headingAnchors(t *testing.T, path string) map[string]bool {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
	seen, anchors := map[string]int{}, map[string]bool{}
	inFence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		a := strings.ReplaceAll(drop.ReplaceAllString(h, ""), " ", "-")
		if n := seen[a]; n > 0 {
			anchors[a+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}
