package main

import (
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sjson "sigs.k8s.io/json"

	"example.com/podtoip-controller/internal/jsonscan"
)

// A mirror's managedFields say which field manager last set each of its
// fields. The controller writes under fieldManager; an entry of any other
// manager that owns a field of the mirror other than metadata means that
// someone else changed what the mirror says. Such a mirror is not history:
// the controller rewrites it from the pod, and the trail must not present
// what it found (previous addresses, the identity of a released holder)
// as a hold (docs/trail.md, "reverted"). Users' labels, annotations and
// finalizers are metadata and do not count.

// decodeEditors reads metadata.managedFields as the API server writes it,
// keeping only the entries of other managers that own a mirror field, and
// of those only the manager, operation and time: their fieldsV1 is read
// and dropped. The controller's own entry, the one every mirror has, costs
// a scan and no allocation.
func decodeEditors(c *jsonscan.Cursor) ([]metav1.ManagedFieldsEntry, bool) {
	if c.Null() {
		return nil, true
	}
	var out []metav1.ManagedFieldsEntry
	ok := c.Array(func() bool {
		var manager, operation, at []byte
		owns := false
		ok := c.Object(func(key []byte) (ok bool) {
			switch string(key) {
			case "manager":
				manager, ok = c.RawString()
			case "operation":
				operation, ok = c.RawString()
			case "time":
				at, ok = c.RawString()
			case "fieldsV1":
				owns, ok = ownsMirrorField(c)
			default:
				ok = c.Skip()
			}
			return ok
		})
		if ok && owns && string(manager) != fieldManager {
			e := metav1.ManagedFieldsEntry{Manager: string(manager), Operation: metav1.ManagedFieldsOperationType(operation)}
			if t, err := time.Parse(time.RFC3339, string(at)); err == nil {
				e.Time = &metav1.Time{Time: t.Local()}
			}
			out = append(out, e)
		}
		return ok
	})
	return out, ok
}

// ownsMirrorField reads a fieldsV1 set and reports whether it names a
// top-level field other than metadata.
func ownsMirrorField(c *jsonscan.Cursor) (owns, ok bool) {
	if c.Null() {
		return false, true
	}
	ok = c.Object(func(key []byte) bool {
		if string(key) != "f:metadata" {
			owns = true
		}
		return c.Skip()
	})
	return owns, ok
}

// editorsOf names the other managers that own a field of the mirror, sorted
// and comma-separated, or "" when every field is the controller's. It reads
// entries both as decodeEditors keeps them (no fieldsV1: already filtered)
// and as decoded in full.
func editorsOf(entries []metav1.ManagedFieldsEntry) string {
	var names []string
	for _, e := range entries {
		if e.Manager == fieldManager || slices.Contains(names, e.Manager) {
			continue
		}
		if e.FieldsV1 != nil {
			owns, ok := ownsMirrorField(jsonscan.New(e.FieldsV1.Raw))
			if !ok || !owns {
				continue
			}
		}
		names = append(names, e.Manager)
	}
	slices.Sort(names)
	return strings.Join(names, ",")
}

// editorEntries is metadata.managedFields in a list the cache decodes:
// decodeEditors' entries.
type editorEntries []metav1.ManagedFieldsEntry

func (e *editorEntries) UnmarshalJSON(data []byte) error {
	c := jsonscan.New(data)
	entries, ok := decodeEditors(c)
	if !ok || !c.End() {
		var full []metav1.ManagedFieldsEntry
		if err := sjson.UnmarshalCaseSensitivePreserveInts(data, &full); err != nil {
			return err
		}
		entries = full
	}
	*e = entries
	return nil
}
