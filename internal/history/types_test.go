package history

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// etcdRequestLimit is the largest request etcd accepts by default
// (--max-request-bytes), which bounds any object the API server stores.
const etcdRequestLimit = 3 * 512 * 1024

// largest returns the largest IPHistory the CRD accepts: the longest
// address and names, MaxHolds holds with every time set, and the longest
// Holder besides (which only open holds produce, so no real object has both).
func largest() *IPHistory {
	h, err := New("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")
	if err != nil {
		panic(err)
	}
	h.Labels = map[string]string{"app.kubernetes.io/managed-by": "podtoip-controller"}
	h.UID = types.UID(strings.Repeat("u", UIDLength))
	h.ResourceVersion = "18446744073709551615"
	h.CreationTimestamp = metav1.Now()
	fields := []byte(`{"f:address":{},"f:dropped":{},"f:holder":{},"f:holders":{},"f:holds":{},` +
		`"f:metadata":{"f:labels":{".":{},"f:app.kubernetes.io/managed-by":{}}},"f:overflow":{"f:from":{},"f:namespace":{},"f:to":{}},"f:recordedFrom":{},"f:since":{}}`)
	h.ManagedFields = []metav1.ManagedFieldsEntry{{
		Manager: "podtoip-controller", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "example.com/v1",
		Time: &h.CreationTimestamp, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: fields},
	}}
	t := NewTime(time.Date(2026, 12, 31, 23, 59, 59, 999*int(time.Millisecond), time.UTC))
	for i := range MaxHolds {
		h.Holders = append(h.Holders, Hold{
			Namespace:        strings.Repeat("n", MaxNamespaceLength),
			Pod:              strings.Repeat("p", MaxPodLength),
			PodUID:           types.UID(fmt.Sprintf("%08d-0000-4000-8000-000000000000", i)),
			Node:             strings.Repeat("d", MaxNodeLength),
			From:             t,
			To:               &t,
			EndedAfter:       &t,
			StartedBefore:    &t,
			TerminatingSince: &t,
		})
	}
	h.Dropped, h.RecordedFrom, h.Since, h.Holds = 1<<31-1, &t, &t, MaxHolds
	h.Overflow = &Overflow{From: t, To: &t, Namespace: strings.Repeat("n", MaxNamespaceLength)}
	holder := strings.Repeat("n", MaxNamespaceLength) + "/" + strings.Repeat("p", MaxPodLength)
	h.Holder = strings.Repeat(holder+HolderSeparator, MaxHolds-1) + holder
	return h
}

// TestLargestObject pins the claim beside MaxHolds: the largest object the
// CRD accepts stays far below what etcd accepts in one request, so a write
// never fails for size however the history fills up.
func TestLargestObject(t *testing.T) {
	h := largest()
	if len(h.Holder) != MaxHolderLength {
		t.Fatalf("the longest Holder has %d characters, MaxHolderLength is %d", len(h.Holder), MaxHolderLength)
	}
	data, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("largest IPHistory: %d bytes (%.1f KiB)", len(data), float64(len(data))/1024)
	if len(data) > etcdRequestLimit/20 {
		t.Errorf("the largest IPHistory is %d bytes, more than the twentieth of etcd's %d documented beside MaxHolds", len(data), etcdRequestLimit)
	}
}

// crdSchema returns the IPHistory CustomResourceDefinition from
// artifacts/crd.yaml, and the PodToIp one that must come first.
func crdSchema(t *testing.T) (iph, first map[string]any) {
	t.Helper()
	data, err := os.ReadFile("../../artifacts/crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := bytes.Split(data, []byte("\n---\n"))
	for i, doc := range docs {
		var crd map[string]any
		if err := yaml.UnmarshalStrict(doc, &crd); err != nil {
			t.Fatalf("artifacts/crd.yaml, document %d: %v", i, err)
		}
		if i == 0 {
			first = crd
		}
		if name, _ := get(crd, "metadata", "name").(string); name == CRDName {
			iph = crd
		}
	}
	if iph == nil {
		t.Fatalf("artifacts/crd.yaml has no %s", CRDName)
	}
	return iph, first
}

// get walks m by keys; an int key indexes a list.
func get(m any, keys ...any) any {
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			mm, _ := m.(map[string]any)
			m = mm[k]
		case int:
			l, _ := m.([]any)
			if k >= len(l) {
				return nil
			}
			m = l[k]
		}
	}
	return m
}

// TestCRDMatchesTheTypes keeps artifacts/crd.yaml and this package's
// names and bounds equal, so neither a writer nor the CRD refuses what the
// other allows.
func TestCRDMatchesTheTypes(t *testing.T) {
	crd, first := crdSchema(t)
	if name := get(first, "metadata", "name"); name != "podtoips.example.com" {
		t.Errorf("the first CRD in artifacts/crd.yaml is %v; the PodToIp CRD stays first", name)
	}
	v := get(crd, "spec", "versions", 0)
	s := get(v, "schema", "openAPIV3Schema", "properties")
	hold := get(s, "holders", "items", "properties")
	for _, tc := range []struct {
		what string
		got  any
		want any
	}{
		{"group", get(crd, "spec", "group"), GroupVersion.Group},
		{"version", get(v, "name"), GroupVersion.Version},
		{"scope", get(crd, "spec", "scope"), "Cluster"},
		{"plural", get(crd, "spec", "names", "plural"), Resource},
		{"kind", get(crd, "spec", "names", "kind"), Kind},
		{"listKind", get(crd, "spec", "names", "listKind"), ListKind},
		{"holders maxItems", get(s, "holders", "maxItems"), float64(MaxHolds)},
		{"holds maximum", get(s, "holds", "maximum"), float64(MaxHolds)},
		{"address maxLength", get(s, "address", "maxLength"), float64(MaxAddressLength)},
		{"holder maxLength", get(s, "holder", "maxLength"), float64(MaxHolderLength)},
		{"namespace maxLength", get(hold, "namespace", "maxLength"), float64(MaxNamespaceLength)},
		{"pod maxLength", get(hold, "pod", "maxLength"), float64(MaxPodLength)},
		{"node maxLength", get(hold, "node", "maxLength"), float64(MaxNodeLength)},
		{"podUID maxLength", get(hold, "podUID", "maxLength"), float64(UIDLength)},
	} {
		if tc.got != tc.want {
			t.Errorf("CRD %s = %v, want %v", tc.what, tc.got, tc.want)
		}
	}

	// The JSON fields of the types, all set in the largest object, are the
	// schema's properties.
	h := largest()
	if got, want := jsonKeys(t, h), propKeys(s); got != want {
		t.Errorf("IPHistory's JSON fields are %s; the CRD's properties %s", got, want)
	}
	if got, want := jsonKeys(t, h.Holders[0]), propKeys(hold); got != want {
		t.Errorf("Hold's JSON fields are %s; the CRD's properties %s", got, want)
	}
}

func jsonKeys(t *testing.T, v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return propKeys(m)
}

func propKeys(m any) string {
	var keys []string
	for k := range m.(map[string]any) {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return strings.Join(keys, ",")
}
