// Package jsonscan reads the JSON the API server writes, field by field,
// without reflection and without building values the caller does not ask
// for. It serves the mirror informer's watch, which reads one event per
// mirror written: the standard path reads each event three times over
// (framing, envelope, object) and decodes every field by reflection.
package jsonscan

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// Cursor reads the JSON the API server writes, field by field, without
// reflection and without building values the caller does not ask for: a
// skipped value is only checked to be valid JSON. It accepts what
// encoding/json accepts, except strings with escape sequences, which
// it declines (ok false) instead of unescaping: the caller then decodes the
// whole document the standard way. Names, UIDs, addresses and resource
// versions never need escapes, so the common case stays on this path.
//
// Every method returns false on anything it does not accept, and leaves the
// cursor where it stopped; callers give up at the first false.
type Cursor struct {
	data []byte
	i    int
}

// New returns a Cursor at the start of data.
func New(data []byte) *Cursor { return &Cursor{data: data} }

// NewAt returns a Cursor at offset i of data.
func NewAt(data []byte, i int) *Cursor { return &Cursor{data: data, i: i} }

// Pos returns the offset of the next byte to read.
func (c *Cursor) Pos() int { return c.i }

// ws skips whitespace.
func (c *Cursor) ws() {
	for c.i < len(c.data) {
		switch c.data[c.i] {
		case ' ', '\t', '\n', '\r':
			c.i++
		default:
			return
		}
	}
}

// Peek returns the next byte after whitespace, or 0 at the end.
func (c *Cursor) Peek() byte {
	c.ws()
	if c.i < len(c.data) {
		return c.data[c.i]
	}
	return 0
}

// Consume reads b after whitespace.
func (c *Cursor) Consume(b byte) bool {
	if c.Peek() != b {
		return false
	}
	c.i++
	return true
}

// literal reads one of true, false and null after whitespace.
func (c *Cursor) literal(word string) bool {
	c.ws()
	if len(c.data)-c.i < len(word) || string(c.data[c.i:c.i+len(word)]) != word {
		return false
	}
	c.i += len(word)
	return true
}

// Null reads null if it comes next and reports whether it did.
func (c *Cursor) Null() bool {
	return c.Peek() == 'n' && c.literal("null")
}

// RawString reads a string without escapes and returns its bytes, which
// alias the input.
func (c *Cursor) RawString() ([]byte, bool) {
	if !c.Consume('"') {
		return nil, false
	}
	start := c.i
	ascii := true
	for c.i < len(c.data) {
		b := c.data[c.i]
		switch {
		case b == '"':
			s := c.data[start:c.i]
			c.i++
			// encoding/json replaces invalid UTF-8; leave that to it.
			return s, ascii || utf8.Valid(s)
		case b == '\\' || b < 0x20:
			return nil, false
		case b >= utf8.RuneSelf:
			ascii = false
		}
		c.i++
	}
	return nil, false
}

// Str reads a string (see RawString); null reads as "".
func (c *Cursor) Str() (string, bool) {
	if c.Null() {
		return "", true
	}
	s, ok := c.RawString()
	return string(s), ok
}

// Bool reads true or false; null reads as false.
func (c *Cursor) Bool() (bool, bool) {
	switch c.Peek() {
	case 't':
		return true, c.literal("true")
	case 'f':
		return false, c.literal("false")
	case 'n':
		return false, c.literal("null")
	}
	return false, false
}

// Int reads an integer that fits an int64 (no fraction, no exponent);
// null reads as 0.
func (c *Cursor) Int() (int64, bool) {
	if c.Null() {
		return 0, true
	}
	c.ws()
	start := c.i
	if !c.skipNumber() {
		return 0, false
	}
	n, err := strconv.ParseInt(string(c.data[start:c.i]), 10, 64)
	return n, err == nil
}

// BoolPtr reads true or false as a pointer; null reads as nil.
func (c *Cursor) BoolPtr() (*bool, bool) {
	if c.Null() {
		return nil, true
	}
	b, ok := c.Bool()
	return &b, ok
}

// Object reads an object, calling field for each key with the cursor at
// its value; field must read the value. A key seen twice is declined
// (encoding/json would merge or overwrite, depending on the type).
func (c *Cursor) Object(field func(key []byte) bool) bool {
	if !c.Consume('{') {
		return false
	}
	if c.Consume('}') {
		return true
	}
	var seenBuf [24][]byte
	seen := seenBuf[:0]
	for {
		key, ok := c.RawString()
		if !ok || !c.Consume(':') {
			return false
		}
		for _, k := range seen {
			if string(k) == string(key) {
				return false
			}
		}
		seen = append(seen, key)
		if !field(key) {
			return false
		}
		if c.Consume(',') {
			continue
		}
		return c.Consume('}')
	}
}

// Array reads an array, calling elem with the cursor at each element;
// elem must read it.
func (c *Cursor) Array(elem func() bool) bool {
	if !c.Consume('[') {
		return false
	}
	if c.Consume(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if c.Consume(',') {
			continue
		}
		return c.Consume(']')
	}
}

// Time reads an RFC 3339 time as time.Parse gives it; null reads as nil.
// Any other form is declined.
func (c *Cursor) Time() (*time.Time, bool) {
	if c.Null() {
		return nil, true
	}
	s, ok := c.RawString()
	if !ok {
		return nil, false
	}
	t, err := time.Parse(time.RFC3339, string(s))
	return &t, err == nil
}

// StrList reads an array of strings; null reads as nil, [] as an empty
// list, as encoding/json decodes them.
func (c *Cursor) StrList() ([]string, bool) {
	if c.Null() {
		return nil, true
	}
	out := []string{}
	ok := c.Array(func() bool {
		s, ok := c.RawString()
		out = append(out, string(s))
		return ok
	})
	return out, ok
}

// StrMap reads an object of strings; null reads as nil.
func (c *Cursor) StrMap() (map[string]string, bool) {
	if c.Null() {
		return nil, true
	}
	out := map[string]string{}
	ok := c.Object(func(key []byte) bool {
		v, ok := c.RawString()
		out[string(key)] = string(v)
		return ok
	})
	return out, ok
}

// Skip reads any value, checking only that it is valid JSON. Escapes in
// skipped strings are fine: nothing is unescaped.
func (c *Cursor) Skip() bool {
	return c.skipDepth(0)
}

// maxSkipDepth bounds the nesting skip follows, as encoding/json bounds its
// own (10,000); deeper input is declined.
const maxSkipDepth = 10000

func (c *Cursor) skipDepth(depth int) bool {
	if depth >= maxSkipDepth {
		return false
	}
	switch c.Peek() {
	case '{':
		// Keys are skipped like any string: escapes and repeats are fine in
		// what is not decoded.
		c.i++
		if c.Consume('}') {
			return true
		}
		for {
			if c.Peek() != '"' || !c.skipString() || !c.Consume(':') || !c.skipDepth(depth+1) {
				return false
			}
			if !c.Consume(',') {
				return c.Consume('}')
			}
		}
	case '[':
		return c.Array(func() bool { return c.skipDepth(depth + 1) })
	case '"':
		return c.skipString()
	case 't':
		return c.literal("true")
	case 'f':
		return c.literal("false")
	case 'n':
		return c.literal("null")
	default:
		return c.skipNumber()
	}
}

// skipString reads a string, escapes included, checking it is valid.
func (c *Cursor) skipString() bool {
	if !c.Consume('"') {
		return false
	}
	for c.i < len(c.data) {
		b := c.data[c.i]
		c.i++
		switch {
		case b == '"':
			return true
		case b < 0x20:
			return false
		case b == '\\':
			if c.i >= len(c.data) {
				return false
			}
			e := c.data[c.i]
			c.i++
			switch e {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(c.data)-c.i < 4 {
					return false
				}
				for _, h := range c.data[c.i : c.i+4] {
					if !isHex(h) {
						return false
					}
				}
				c.i += 4
			default:
				return false
			}
		}
	}
	return false
}

func isHex(b byte) bool {
	return '0' <= b && b <= '9' || 'a' <= b && b <= 'f' || 'A' <= b && b <= 'F'
}

// skipNumber reads a number as JSON's grammar defines it.
func (c *Cursor) skipNumber() bool {
	c.ws()
	d := c.data
	i := c.i
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		i = digits(d, i)
	default:
		return false
	}
	if i < len(d) && d[i] == '.' {
		if i = digits(d, i+1); d[i-1] == '.' {
			return false // no digit after the point
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		start := i
		if i = digits(d, i); i == start {
			return false
		}
	}
	c.i = i
	return true
}

// digits returns the index after the run of decimal digits at d[i:].
func digits(d []byte, i int) int {
	for i < len(d) && '0' <= d[i] && d[i] <= '9' {
		i++
	}
	return i
}

// End reports whether only whitespace is left.
func (c *Cursor) End() bool {
	c.ws()
	return c.i == len(c.data)
}
