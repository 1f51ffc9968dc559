// Package slim owns the building blocks of the controller's slim cache
// records: a UID kept in its 16 bytes, interned strings, and the part of
// metav1.Object a record does not keep.
//
// The informers' caches hold one record per pod and per PodToIp for the life
// of the process, so what a record costs is paid per pod. These pieces keep
// the records small and let client-go key them without allocating.
package slim

import (
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// UID is a UID as the caches keep it. The API server gives every object a
// random UUID, written as 36 characters of lower-case hex and dashes: as a
// string, a header and a separate allocation per UID, and the caches hold
// three per pod (the pod's, the mirror's, the mirror's podUID). UID keeps
// such a UID in its 16 bytes, and any other UID (one written by hand, as
// tests do) as interned text. Two UIDs are == exactly when their text is
// equal.
type UID struct {
	uuid [16]byte
	text unique.Handle[string]
}

// ToUID returns s as a UID.
func ToUID(s types.UID) UID {
	if b, ok := parseUUID(string(s)); ok {
		return UID{uuid: b}
	}
	if s == "" {
		return UID{}
	}
	return UID{text: unique.Make(string(s))}
}

// UID returns the UID as text.
func (u UID) UID() types.UID {
	if u.text != (unique.Handle[string]{}) {
		return types.UID(u.text.Value())
	}
	if u.uuid == ([16]byte{}) {
		return ""
	}
	const hexDigits = "0123456789abcdef"
	var b [36]byte
	j := 0
	for i, x := range u.uuid {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b[j] = '-'
			j++
		}
		b[j], b[j+1] = hexDigits[x>>4], hexDigits[x&0xf]
		j += 2
	}
	return types.UID(b[:])
}

// Is reports whether u is the UID s, without allocating.
func (u UID) Is(s types.UID) bool {
	if b, ok := parseUUID(string(s)); ok {
		return u.text == (unique.Handle[string]{}) && u.uuid == b
	}
	if u.text == (unique.Handle[string]{}) {
		return s == "" && u.uuid == ([16]byte{})
	}
	return u.text.Value() == string(s)
}

// parseUUID reads a UUID in the form the API server writes (lower-case),
// except the all-zero one, which would read as no UID.
func parseUUID(s string) (b [16]byte, ok bool) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return b, false
	}
	j := 0
	for i := 0; i < 36; {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i++
			continue
		}
		hi, ok1 := fromHex(s[i])
		lo, ok2 := fromHex(s[i+1])
		if !ok1 || !ok2 {
			return b, false
		}
		b[j] = hi<<4 | lo
		i, j = i+2, j+1
	}
	return b, b != [16]byte{}
}

// fromHex reads a lower-case hex digit.
func fromHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// Intern returns the canonical copy of a string that many cached objects
// repeat (a namespace, a node name), so the cache keeps one copy instead
// of one per object.
func Intern(s string) string {
	if s == "" {
		return s
	}
	return unique.Make(s).Value()
}

// Meta completes metav1.Object for a cache record that defines the getters
// of what it keeps (name, namespace, UID, resourceVersion). client-go's
// stores key every object through metav1.Object, several times per event;
// a record that only offered GetObjectMeta would build a throwaway
// ObjectMeta each time. The rest of the metadata is not kept: its getters
// return zero values and its setters do nothing, since nothing modifies a
// cached object.
type Meta struct{}

func (Meta) SetName(string)                                {}
func (Meta) SetNamespace(string)                           {}
func (Meta) GetGenerateName() string                       { return "" }
func (Meta) SetGenerateName(string)                        {}
func (Meta) SetUID(types.UID)                              {}
func (Meta) SetResourceVersion(string)                     {}
func (Meta) GetGeneration() int64                          { return 0 }
func (Meta) SetGeneration(int64)                           {}
func (Meta) GetSelfLink() string                           { return "" }
func (Meta) SetSelfLink(string)                            {}
func (Meta) GetCreationTimestamp() metav1.Time             { return metav1.Time{} }
func (Meta) SetCreationTimestamp(metav1.Time)              {}
func (Meta) GetDeletionTimestamp() *metav1.Time            { return nil }
func (Meta) SetDeletionTimestamp(*metav1.Time)             {}
func (Meta) GetDeletionGracePeriodSeconds() *int64         { return nil }
func (Meta) SetDeletionGracePeriodSeconds(*int64)          {}
func (Meta) GetLabels() map[string]string                  { return nil }
func (Meta) SetLabels(map[string]string)                   {}
func (Meta) GetAnnotations() map[string]string             { return nil }
func (Meta) SetAnnotations(map[string]string)              {}
func (Meta) GetFinalizers() []string                       { return nil }
func (Meta) SetFinalizers([]string)                        {}
func (Meta) GetOwnerReferences() []metav1.OwnerReference   { return nil }
func (Meta) SetOwnerReferences([]metav1.OwnerReference)    {}
func (Meta) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }
func (Meta) SetManagedFields([]metav1.ManagedFieldsEntry)  {}
