package slim

import (
	"strings"
	"testing"
	"unsafe"

	"k8s.io/apimachinery/pkg/types"
)

// A UID gives back exactly the UID it was made of, and two UIDs are equal
// exactly when their text is, whatever the text.
func FuzzUID(f *testing.F) {
	for _, s := range []string{"", "uid-1", "0b7c1f5e-52d4-4c1e-9a43-3f1f1d2a6c11", "0B7C1F5E-52D4-4C1E-9A43-3F1F1D2A6C11",
		"00000000-0000-0000-0000-000000000000", "0b7c1f5e-52d4-4c1e-9a43-3f1f1d2a6c1", "0b7c1f5e+52d4-4c1e-9a43-3f1f1d2a6c11"} {
		f.Add(s, "0b7c1f5e-52d4-4c1e-9a43-3f1f1d2a6c11")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ua, ub := ToUID(types.UID(a)), ToUID(types.UID(b))
		if ua.UID() != types.UID(a) || ub.UID() != types.UID(b) {
			t.Fatalf("ToUID(%q).UID() = %q, ToUID(%q).UID() = %q", a, ua.UID(), b, ub.UID())
		}
		if (ua == ub) != (a == b) || ua.Is(types.UID(b)) != (a == b) || !ua.Is(types.UID(a)) {
			t.Fatalf("UIDs of %q and %q: == %v, Is %v", a, b, ua == ub, ua.Is(types.UID(b)))
		}
	})
}

// A UUID as the API server writes it is kept in its bytes, not as text.
func TestUIDKeepsUUIDsAsBytes(t *testing.T) {
	u := ToUID("0b7c1f5e-52d4-4c1e-9a43-3f1f1d2a6c11")
	if u.text != (UID{}).text || u.uuid == ([16]byte{}) {
		t.Errorf("a UUID was kept as text: %+v", u)
	}
}

// sameString reports whether a and b share their bytes: the point of
// interning is that the cache keeps one copy.
func sameString(a, b string) bool {
	return len(a) == len(b) && unsafe.StringData(a) == unsafe.StringData(b)
}

func TestInternKeepsOneCopy(t *testing.T) {
	a, b := strings.Clone("node-7"), strings.Clone("node-7")
	if sameString(a, b) {
		t.Fatal("strings.Clone shared its result; the test cannot tell interned strings apart")
	}
	ia, ib := Intern(a), Intern(b)
	if ia != "node-7" || ib != "node-7" {
		t.Fatalf("Intern changed the value: %q, %q", ia, ib)
	}
	if !sameString(ia, ib) {
		t.Error("two equal strings interned to two copies")
	}
	if got := Intern(""); got != "" {
		t.Errorf("Intern(\"\") = %q", got)
	}
}

// A UUID is never the empty UID.
func TestUUIDIsNotEmpty(t *testing.T) {
	if ToUID("0b7c1f5e-52d4-4c1e-9a43-3f1f1d2a6c11").Is("") {
		t.Error("a UUID is the empty UID")
	}
	if !ToUID("").Is("") {
		t.Error("the empty UID is not itself")
	}
}
