package access

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// The shipped files, from this package's directory.
const (
	crdFile        = "../../artifacts/crd.yaml"
	policyFile     = "../../artifacts/policy.yaml"
	operationsFile = "../../docs/operations.md"
)

// yamlDocs splits a file of YAML documents, in order.
func yamlDocs(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("reading %s: %v", path, err)
		}
		if len(bytes.TrimSpace(doc)) > 0 {
			docs = append(docs, doc)
		}
	}
}

// shippedPolicy returns the ValidatingAdmissionPolicy name of
// artifacts/policy.yaml.
func shippedPolicy(t *testing.T, name string) *admissionv1.ValidatingAdmissionPolicy {
	t.Helper()
	for _, doc := range yamlDocs(t, policyFile) {
		var p admissionv1.ValidatingAdmissionPolicy
		if err := yaml.UnmarshalStrict(doc, &p); err != nil {
			t.Fatalf("%s: %v", policyFile, err)
		}
		if p.Kind == "ValidatingAdmissionPolicy" && p.Name == name {
			return &p
		}
	}
	t.Fatalf("%s holds no ValidatingAdmissionPolicy %s", policyFile, name)
	return nil
}

// TestAnswerFieldsAreTheCRDs checks AnswerFields against the PodToIp
// schema of artifacts/crd.yaml: a field added to the CRD must be added to
// AnswerFields, and so to the policy and the fingerprint, which their
// tests hold to it.
func TestAnswerFieldsAreTheCRDs(t *testing.T) {
	type crd struct {
		Kind string `json:"kind"`
		Spec struct {
			Names    struct{ Kind string } `json:"names"`
			Versions []struct {
				Name   string `json:"name"`
				Schema struct {
					OpenAPIV3Schema struct {
						Properties map[string]any `json:"properties"`
					} `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	found := false
	for _, doc := range yamlDocs(t, crdFile) {
		var c crd
		if err := yaml.Unmarshal(doc, &c); err != nil {
			t.Fatalf("%s: %v", crdFile, err)
		}
		if c.Kind != "CustomResourceDefinition" || c.Spec.Names.Kind != "PodToIp" {
			continue
		}
		found = true
		for _, v := range c.Spec.Versions {
			props := v.Schema.OpenAPIV3Schema.Properties
			for _, meta := range []string{"apiVersion", "kind", "metadata"} {
				delete(props, meta)
			}
			if got, want := slices.Sorted(maps.Keys(props)), slices.Sorted(slices.Values(AnswerFields)); !slices.Equal(got, want) {
				t.Errorf("the PodToIp schema %s of %s has the fields %v, AnswerFields lists %v: every field of the schema is an answer "+
					"and must be on the list (internal/access/fields.go), in the policy and in the fingerprint", v.Name, crdFile, got, want)
			}
		}
	}
	if !found {
		t.Fatalf("%s holds no CustomResourceDefinition of kind PodToIp", crdFile)
	}
}

// TestPolicyComparesEveryAnswerField checks that the shipped policy
// refuses a change of each of AnswerFields by anyone but the controller,
// and names each in its message: its comparison is exactly the one built
// from the list, so a field is neither left out nor compared in a way that
// lets a change through.
func TestPolicyComparesEveryAnswerField(t *testing.T) {
	p := shippedPolicy(t, "podtoip-controller")
	var same []string
	for _, f := range AnswerFields {
		same = append(same, "object.?"+f+" == oldObject.?"+f)
	}
	want := `request.operation == "CREATE" || (` + strings.Join(same, " && ") + ")"
	var found *admissionv1.Validation
	for i, v := range p.Spec.Validations {
		if strings.Contains(v.Expression, "oldObject.?podName") {
			found = &p.Spec.Validations[i]
		}
	}
	if found == nil {
		t.Fatalf("the policy podtoip-controller of %s has no validation comparing the answer fields; want one with the expression\n%s", policyFile, want)
	}
	if got := oneLine(found.Expression); got != want {
		t.Errorf("the policy's comparison of the answer fields is\n%s\nwant, from AnswerFields,\n%s", got, want)
	}
	if list := "(" + strings.Join(AnswerFields, ", ") + ")"; !strings.Contains(oneLine(found.Message), list) {
		t.Errorf("the policy's message does not name the answer fields %s: %q", list, found.Message)
	}
	if found.Reason == nil || *found.Reason != "Forbidden" {
		t.Errorf("the policy's comparison of the answer fields has reason %v, want Forbidden", found.Reason)
	}
}

// TestOperationsNamesEveryAnswerField checks that docs/operations.md says
// what the policy guards: its list of the fields no one else may change,
// and the threat table's row of namespace users, name each of
// AnswerFields.
func TestOperationsNamesEveryAnswerField(t *testing.T) {
	b, err := os.ReadFile(operationsFile)
	if err != nil {
		t.Fatal(err)
	}
	doc := oneLine(string(b))
	var quoted []string
	for _, f := range AnswerFields {
		quoted = append(quoted, "`"+f+"`")
	}
	list := "changing " + strings.Join(quoted[:len(quoted)-1], ", ") + " or " + quoted[len(quoted)-1]
	if !strings.Contains(doc, list) {
		t.Errorf("%s's section on the admission policy does not say %q", operationsFile, list)
	}
	const row = "| a namespace's users with write access to PodToIps |"
	i := strings.Index(string(b), row)
	if i < 0 {
		t.Fatalf("%s's threat table has no row %q", operationsFile, row)
	}
	line, _, _ := strings.Cut(string(b)[i:], "\n")
	for _, f := range quoted {
		if !strings.Contains(line, f) {
			t.Errorf("%s's threat table row %q does not name %s among what the policy refuses", operationsFile, row, f)
		}
	}
}
