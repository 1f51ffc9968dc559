package access

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

const rbacFile = "../../artifacts/rbac.yaml"

// TestOperationsRBACTableListsEveryRule checks docs/operations.md's table
// of the controller's RBAC against artifacts/rbac.yaml: every rule of the
// controller's ClusterRole and leader-election Role has a row naming its
// resources, with exactly its verbs (what is in parentheses is
// explanation) and its resourceNames, so that an operator reviewing the
// grant reads what is granted, no more and no less.
func TestOperationsRBACTableListsEveryRule(t *testing.T) {
	b, err := os.ReadFile(operationsFile)
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "## RBAC the controller holds, and why\n")
	if !ok {
		t.Fatalf("%s has no section \"RBAC the controller holds, and why\"", operationsFile)
	}
	type row struct{ resources, verbs string }
	var rows []row
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| `") {
			if len(rows) > 0 {
				break
			}
			continue
		}
		cells := strings.Split(line, " | ")
		if len(cells) < 3 {
			t.Fatalf("a row of the RBAC table has %d cells, want 3: %s", len(cells), line)
		}
		rows = append(rows, row{cells[0], cells[1]})
	}
	if len(rows) == 0 {
		t.Fatalf("%s's section on RBAC has no table", operationsFile)
	}
	parens := regexp.MustCompile(`\([^)]*\)`)
	verbWords := regexp.MustCompile(`\b(get|list|watch|create|update|patch|delete|deletecollection|\*)\b`)
	granted := 0
	for _, doc := range yamlDocs(t, rbacFile) {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Rules []rbacv1.PolicyRule `json:"rules"`
		}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatalf("%s: %v", rbacFile, err)
		}
		if (obj.Kind != "ClusterRole" || obj.Metadata.Name != "podtoip-controller") &&
			(obj.Kind != "Role" || obj.Metadata.Name != "podtoip-controller-leader-election") {
			continue
		}
		for _, rule := range obj.Rules {
			for _, res := range rule.Resources {
				granted++
				var found *row
				for i, r := range rows {
					// A row names the resource, with its group unless it is
					// the core group's.
					if strings.Contains(r.resources, "`"+res+"`") || strings.Contains(r.resources, "`"+res+".") {
						found = &rows[i]
						break
					}
				}
				if found == nil {
					t.Errorf("%s grants %v on %s, which %s's RBAC table has no row for", rbacFile, rule.Verbs, res, operationsFile)
					continue
				}
				doc := verbWords.FindAllString(parens.ReplaceAllString(found.verbs, ""), -1)
				for _, v := range rule.Verbs {
					if !slices.Contains(doc, v) {
						t.Errorf("%s grants %s on %s; %s's RBAC table says %q", rbacFile, v, res, operationsFile, found.verbs)
					}
				}
				for _, n := range rule.ResourceNames {
					if !strings.Contains(found.verbs, "`"+n+"`") {
						t.Errorf("%s grants %s only on %s; %s's RBAC table says %q", rbacFile, res, n, operationsFile, found.verbs)
					}
				}
				// Verbs the row lists that no rule on res grants.
				var all []string
				for _, r := range obj.Rules {
					if slices.Contains(r.Resources, res) {
						all = append(all, r.Verbs...)
					}
				}
				for _, v := range doc {
					if !slices.Contains(all, v) {
						t.Errorf("%s's RBAC table says %s on %s, which %s does not grant: %q", operationsFile, v, res, rbacFile, found.verbs)
					}
				}
			}
		}
	}
	if granted == 0 {
		t.Fatalf("%s holds no rule of the ClusterRole podtoip-controller or the Role podtoip-controller-leader-election", rbacFile)
	}
}
