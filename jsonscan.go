package main

import (
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/types"
)

// jsonCursor reads the JSON the API server writes, field by field, without
// reflection and without building values the caller does not ask for: a
// skipped value is only checked to be valid JSON. It accepts what
// encoding/json accepts, except strings with escape sequences, which
// it declines (ok false) instead of unescaping: the caller then decodes the
// whole document the standard way. Names, UIDs, addresses and resource
// versions never need escapes, so the common case stays on this path.
//
// Every method returns false on anything it does not accept, and leaves the
// cursor where it stopped; callers give up at the first false.
type jsonCursor struct {
	data []byte
	i    int
}

// ws skips whitespace.
func (c *jsonCursor) ws() {
	for c.i < len(c.data) {
		switch c.data[c.i] {
		case ' ', '\t', '\n', '\r':
			c.i++
		default:
			return
		}
	}
}

// peek returns the next byte after whitespace, or 0 at the end.
func (c *jsonCursor) peek() byte {
	c.ws()
	if c.i < len(c.data) {
		return c.data[c.i]
	}
	return 0
}

// consume reads b after whitespace.
func (c *jsonCursor) consume(b byte) bool {
	if c.peek() != b {
		return false
	}
	c.i++
	return true
}

// literal reads one of true, false and null after whitespace.
func (c *jsonCursor) literal(word string) bool {
	c.ws()
	if len(c.data)-c.i < len(word) || string(c.data[c.i:c.i+len(word)]) != word {
		return false
	}
	c.i += len(word)
	return true
}

// null reads null if it comes next and reports whether it did.
func (c *jsonCursor) null() bool {
	return c.peek() == 'n' && c.literal("null")
}

// rawString reads a string without escapes and returns its bytes, which
// alias the input.
func (c *jsonCursor) rawString() ([]byte, bool) {
	if !c.consume('"') {
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

// str reads a string (see rawString); null reads as "".
func (c *jsonCursor) str() (string, bool) {
	if c.null() {
		return "", true
	}
	s, ok := c.rawString()
	return string(s), ok
}

// uid reads a string as a UID (see str).
func (c *jsonCursor) uid() (types.UID, bool) {
	s, ok := c.str()
	return types.UID(s), ok
}

// boolean reads true or false; null reads as false.
func (c *jsonCursor) boolean() (bool, bool) {
	switch c.peek() {
	case 't':
		return true, c.literal("true")
	case 'f':
		return false, c.literal("false")
	case 'n':
		return false, c.literal("null")
	}
	return false, false
}

// boolPtr reads true or false as a pointer; null reads as nil.
func (c *jsonCursor) boolPtr() (*bool, bool) {
	if c.null() {
		return nil, true
	}
	b, ok := c.boolean()
	return &b, ok
}

// object reads an object, calling field for each key with the cursor at
// its value; field must read the value. A key seen twice is declined
// (encoding/json would merge or overwrite, depending on the type).
func (c *jsonCursor) object(field func(key []byte) bool) bool {
	if !c.consume('{') {
		return false
	}
	if c.consume('}') {
		return true
	}
	var seenBuf [24][]byte
	seen := seenBuf[:0]
	for {
		key, ok := c.rawString()
		if !ok || !c.consume(':') {
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
		if c.consume(',') {
			continue
		}
		return c.consume('}')
	}
}

// array reads an array, calling elem with the cursor at each element;
// elem must read it.
func (c *jsonCursor) array(elem func() bool) bool {
	if !c.consume('[') {
		return false
	}
	if c.consume(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if c.consume(',') {
			continue
		}
		return c.consume(']')
	}
}

// strList reads an array of strings; null reads as nil, [] as an empty
// list, as encoding/json decodes them.
func (c *jsonCursor) strList() ([]string, bool) {
	if c.null() {
		return nil, true
	}
	out := []string{}
	ok := c.array(func() bool {
		s, ok := c.rawString()
		out = append(out, string(s))
		return ok
	})
	return out, ok
}

// strMap reads an object of strings; null reads as nil.
func (c *jsonCursor) strMap() (map[string]string, bool) {
	if c.null() {
		return nil, true
	}
	out := map[string]string{}
	ok := c.object(func(key []byte) bool {
		v, ok := c.rawString()
		out[string(key)] = string(v)
		return ok
	})
	return out, ok
}

// skip reads any value, checking only that it is valid JSON. Escapes in
// skipped strings are fine: nothing is unescaped.
func (c *jsonCursor) skip() bool {
	return c.skipDepth(0)
}

// maxSkipDepth bounds the nesting skip follows, as encoding/json bounds its
// own (10,000); deeper input is declined.
const maxSkipDepth = 10000

func (c *jsonCursor) skipDepth(depth int) bool {
	if depth > maxSkipDepth {
		return false
	}
	switch c.peek() {
	case '{':
		// Keys are skipped like any string: escapes and repeats are fine in
		// what is not decoded.
		c.i++
		if c.consume('}') {
			return true
		}
		for {
			if c.peek() != '"' || !c.skipString() || !c.consume(':') || !c.skipDepth(depth+1) {
				return false
			}
			if !c.consume(',') {
				return c.consume('}')
			}
		}
	case '[':
		return c.array(func() bool { return c.skipDepth(depth + 1) })
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
func (c *jsonCursor) skipString() bool {
	if !c.consume('"') {
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
func (c *jsonCursor) skipNumber() bool {
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

// end reports whether only whitespace is left.
func (c *jsonCursor) end() bool {
	c.ws()
	return c.i == len(c.data)
}
