package jsonscan

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzCursorMatchesEncodingJSON checks the cursor against encoding/json on
// arbitrary input: Skip accepts exactly what json.Valid accepts, one value
// of JSON's grammar within the nesting bound (a number beyond float64's
// range, such as 1e700, is valid JSON: encoding/json skips it in a field it
// does not decode, as Skip does), and a string, a list of strings and a map of strings
// read as encoding/json reads them, or are declined: a string with an
// escape sequence is always declined (the caller then decodes the standard
// way), never kept raw.
func FuzzCursorMatchesEncodingJSON(f *testing.F) {
	for _, s := range []string{`"a"`, `"a\u003cb"`, `"\u00e9"`, `"é"`, `"a\"b"`, `"\n"`, `"a\/b"`, `["x","y"]`, `["a\u0041"]`, `{"k":"v","k2":"v2"}`,
		`{"k":"v","k":"w"}`, `{"a\u0062":"c"}`, `null`, `[]`, `{}`, `-0.5e+7`, `01`, `1.`, `[1,2,{"a":[true,false,null]}]`, "\"\xff\"", `"` + "\x01" + `"`, `1e700`, `{"x":-1e700}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		valid := json.Valid(data)
		c := New(data)
		if skipped := c.Skip() && c.End(); skipped != valid {
			t.Fatalf("Skip+End = %v, encoding/json valid = %v: %q", skipped, valid, data)
		}

		c = New(data)
		if s, ok := c.Str(); ok && c.End() {
			var want *string
			if err := json.Unmarshal(data, &want); err != nil {
				t.Fatalf("Str read %q from %q, which encoding/json refuses: %v", s, data, err)
			}
			if want == nil && s != "" || want != nil && *want != s {
				t.Fatalf("Str = %q, encoding/json = %v, from %q", s, want, data)
			}
			if slices.Contains(data, '\\') {
				t.Fatalf("Str kept an escape sequence raw: %q from %q", s, data)
			}
			if !utf8.ValidString(s) {
				t.Fatalf("Str kept invalid UTF-8: %q", s)
			}
		}

		c = New(data)
		if l, ok := c.StrList(); ok && c.End() {
			var want []string
			if err := json.Unmarshal(data, &want); err != nil || !slices.Equal(l, want) || (l == nil) != (want == nil) {
				t.Fatalf("StrList = %#v, encoding/json = %#v (%v), from %q", l, want, err, data)
			}
		}

		c = New(data)
		if m, ok := c.StrMap(); ok && c.End() {
			var want map[string]string
			if err := json.Unmarshal(data, &want); err != nil || len(m) != len(want) || (m == nil) != (want == nil) {
				t.Fatalf("StrMap = %#v, encoding/json = %#v (%v), from %q", m, want, err, data)
			}
			for k, v := range m {
				if want[k] != v {
					t.Fatalf("StrMap[%q] = %q, encoding/json %q, from %q", k, v, want[k], data)
				}
			}
		}
	})
}

// Strings with escapes are declined, whatever the escape: the caller must
// decode them the standard way (a kept \u003c would write "a<b" back as
// "a\u003cb", corrupted).
func TestStrDeclinesEscapes(t *testing.T) {
	for _, s := range []string{`"a\u003cb"`, `"a\"b"`, `"a\\b"`, `"a\/b"`, `"\n"`, `"\t"`} {
		if got, ok := New([]byte(s)).Str(); ok {
			t.Errorf("Str(%s) = %q, want declined", s, got)
		}
	}
	if got, ok := New([]byte(`"a<b é"`)).Str(); !ok || got != "a<b é" {
		t.Errorf("Str of a plain string = %q, %v", got, ok)
	}
}

// A key given twice is declined: encoding/json would keep the last, and a
// reader of only some keys could keep another.
func TestObjectDeclinesRepeatedKeys(t *testing.T) {
	ok := New([]byte(`{"a":"1","b":"2","a":"3"}`)).Object(func([]byte) bool { return true })
	if ok {
		t.Error("an object with a repeated key was accepted")
	}
}

// Skip accepts exactly what encoding/json accepts as one value, at the
// edges of the grammar: hex digits of escapes and every part of a number.
func TestSkipAtTheEdgesOfTheGrammar(t *testing.T) {
	for _, s := range []string{
		`"\u0000"`, `"\u9999"`, `"\uaAfF"`, `"\uFfAa"`, `"\u/000"`, `"\u:000"`, `"\u@000"`, `"\uG000"`, "\"\\u`000\"", `"\ug000"`, `"\u00"`,
		`"\b\f\n\r\t\"\\\/"`, `"\x"`, "\"\x1f\"", `"a`,
		`0`, `-0`, `9`, `19`, `90`, `1.0`, `1.09`, `1e5`, `1E+5`, `1e-5`, `1e09`, `0.0e0`, `1.`, `.5`, `-`, `1e`, `1e+`, `00`, `-01`, `+1`, `1.e1`, `0x1`,
		`[0,9]`, `{"a":-9.9e-9}`,
	} {
		var v any
		want := json.Unmarshal([]byte(s), &v) == nil
		c := New([]byte(s))
		if got := c.Skip() && c.End(); got != want {
			t.Errorf("Skip(%s) = %v, encoding/json accepts it: %v", s, got, want)
		}
	}
}

// Skip declines what encoding/json declines at the end of the input or
// past its nesting limit: truncated values, bare literals cut short, an
// empty input, and nesting deeper than 10,000.
func TestSkipTruncatedAndDeep(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, s := range []string{"", " ", "[", "[1", "[1,", `{"a"`, `{"a":`, `{"a":1`, `{"a":1,`, "tru", "nul", "fals", "[tru", `{"a":nul`,
		`"a b"`, `"\u12`, `"\u12"`, `"abc`, deep(100), deep(9999), deep(10000), deep(10001)} {
		var v any
		want := json.Unmarshal([]byte(s), &v) == nil
		c := New([]byte(s))
		if got := c.Skip() && c.End(); got != want {
			t.Errorf("Skip(%.40q) = %v, encoding/json accepts it: %v", s, got, want)
		}
	}
}

// The readers decode null as the zero value, leave the cursor after what
// they read, and accept an object whose keys are all distinct.
func TestReadersContract(t *testing.T) {
	if s, ok := New([]byte(`null`)).Str(); !ok || s != "" {
		t.Errorf("Str(null) = %q, %v", s, ok)
	}
	if l, ok := New([]byte(`null`)).StrList(); !ok || l != nil {
		t.Errorf("StrList(null) = %#v, %v", l, ok)
	}
	if m, ok := New([]byte(`null`)).StrMap(); !ok || m != nil {
		t.Errorf("StrMap(null) = %#v, %v", m, ok)
	}
	if b, ok := New([]byte(`null`)).BoolPtr(); !ok || b != nil {
		t.Errorf("BoolPtr(null) = %v, %v", b, ok)
	}
	for in, want := range map[string]int64{`null`: 0, ` 42 `: 42, `-7`: -7, `9223372036854775807`: 1<<63 - 1} {
		if n, ok := New([]byte(in)).Int(); !ok || n != want {
			t.Errorf("Int(%s) = %d, %v; want %d", in, n, ok, want)
		}
	}
	for _, in := range []string{`1.5`, `1e3`, `"1"`, `9223372036854775808`, `-`} {
		if n, ok := New([]byte(in)).Int(); ok {
			t.Errorf("Int(%s) = %d, accepted; want declined", in, n)
		}
	}
	c := New([]byte(`"abc" `))
	if s, ok := c.Str(); !ok || s != "abc" || !c.End() {
		t.Errorf("Str then End on a plain string: %q, %v, pos %d", s, ok, c.Pos())
	}
	if _, ok := New([]byte(`"abc`)).Str(); ok {
		t.Error("an unterminated string was read")
	}
	c = New([]byte(`{"a":"1","b":"2","c":"3"}`))
	seen := 0
	if !c.Object(func([]byte) bool { seen++; _, ok := c.Str(); return ok }) || seen != 3 {
		t.Errorf("an object with distinct keys was declined after %d keys", seen)
	}
}
