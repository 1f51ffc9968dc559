package enrich

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"example.com/podtoip-controller/internal/history"
	"example.com/podtoip-controller/internal/jsonscan"
)

// decodeItem decodes one item of a saved history. IPHistories, nearly all
// of a saved history and most of the time it takes to read, are read
// field by field (scanItem); whatever that declines (another kind's
// fields, escapes, a time in another form, a key that matches a field
// only without regard to case) is decoded the standard way, which also
// words the errors.
func decodeItem(raw []byte, it *SavedItem) error {
	if scanItem(jsonscan.New(raw), raw, it) {
		return nil
	}
	*it = SavedItem{}
	return json.Unmarshal(raw, it)
}

// savedItemKeys and savedHoldKeys are the keys encoding/json reads into a
// SavedItem and a SavedHold: a key equal to one of them but for case is
// read by it, so scanItem declines it rather than skip it.
var (
	savedItemKeys = []string{"kind", "metadata", "address", "holders", "recordedFrom", "overflow", "namespace", "retention", "intervals", "status", "spec"}
	savedHoldKeys = []string{"namespace", "pod", "podUID", "node", "from", "to", "endedAfter", "startedBefore", "terminatingSince"}
)

// foldsTo reports whether key equals one of names without regard to case.
func foldsTo(key []byte, names []string) bool {
	for _, n := range names {
		if bytes.EqualFold(key, []byte(n)) {
			return true
		}
	}
	return false
}

// scanItem reads an item with an IPHistory's fields into it, as far as
// the index reads them (the kind, metadata.creationTimestamp, address,
// holders, recordedFrom); false on any other field of a SavedItem.
func scanItem(c *jsonscan.Cursor, raw []byte, it *SavedItem) bool {
	return c.Object(func(key []byte) (ok bool) {
		switch string(key) {
		case "kind":
			it.Kind, ok = c.Str()
		case "metadata":
			ok = scanMeta(c, raw, &it.Metadata)
		case "address":
			it.Address, ok = c.Str()
		case "holders":
			it.Holders, ok = scanHolds(c)
		case "recordedFrom":
			var t *time.Time
			t, ok = c.Time()
			if t != nil {
				it.RecordedFrom = &history.Time{Time: t.UTC()}
			}
		default:
			ok = !foldsTo(key, savedItemKeys) && c.Skip()
		}
		return ok
	}) && c.End()
}

// scanMeta reads the metadata of an object the controller wrote. The
// index reads only its creation time; the other fields it has are read
// for their types, as the standard way would check them, and any other
// field is declined.
func scanMeta(c *jsonscan.Cursor, raw []byte, meta *metav1.ObjectMeta) bool {
	if c.Null() {
		return true
	}
	return c.Object(func(key []byte) (ok bool) {
		switch string(key) {
		case "creationTimestamp":
			var t *time.Time
			if t, ok = c.Time(); ok && t != nil {
				meta.CreationTimestamp = *metaTime(t)
			}
		case "name", "namespace", "uid", "resourceVersion", "generateName", "selfLink":
			_, ok = c.Str()
		case "labels", "annotations":
			_, ok = c.StrMap()
		case "generation":
			from := c.Pos()
			ok = c.Skip() && isInt(bytes.TrimSpace(raw[from:c.Pos()]))
		}
		return ok
	})
}

// isInt reports whether b is an integer that an int64 holds.
func isInt(b []byte) bool {
	b = bytes.TrimPrefix(b, []byte{'-'})
	if len(b) == 0 || len(b) > 18 {
		return false
	}
	for _, d := range b {
		if d < '0' || d > '9' {
			return false
		}
	}
	return true
}

// scanHolds reads an IPHistory's holders; null reads as nil.
func scanHolds(c *jsonscan.Cursor) ([]SavedHold, bool) {
	if c.Null() {
		return nil, true
	}
	holds := []SavedHold{}
	ok := c.Array(func() bool {
		var h SavedHold
		ok := c.Object(func(key []byte) (ok bool) {
			var t *time.Time
			switch string(key) {
			case "namespace":
				h.Namespace, ok = c.Str()
			case "pod":
				h.Pod, ok = c.Str()
			case "podUID":
				var s string
				s, ok = c.Str()
				h.PodUID = types.UID(s)
			case "node":
				h.Node, ok = c.Str()
			case "from":
				// Never null: the standard way says what is wrong.
				t, ok = c.Time()
				if ok = ok && t != nil; ok {
					h.From = stamp{Time: *t}
				}
			case "to":
				t, ok = c.Time()
				h.To = stampOf(t)
			case "endedAfter":
				t, ok = c.Time()
				h.EndedAfter = stampOf(t)
			case "startedBefore":
				t, ok = c.Time()
				h.StartedBefore = stampOf(t)
			case "terminatingSince":
				t, ok = c.Time()
				h.TerminatingSince = stampOf(t)
			default:
				ok = !foldsTo(key, savedHoldKeys) && c.Skip()
			}
			return ok
		})
		holds = append(holds, h)
		return ok
	})
	return holds, ok
}

// metaTime is t as metav1.Time decodes it, in the local zone.
func metaTime(t *time.Time) *metav1.Time {
	if t == nil {
		return nil
	}
	return &metav1.Time{Time: t.Local()}
}

// stampOf is t as stamp decodes it.
func stampOf(t *time.Time) *stamp {
	if t == nil {
		return nil
	}
	return &stamp{Time: *t}
}

// errNotScanned is scanList declining a file before its first item:
// ReadSaved then reads it the standard way.
var errNotScanned = errors.New("not a list scanList reads")

// scanList calls each with the items of a List, as decodeList does, but
// frames them by counting brackets outside strings, one cheap pass where
// the standard decoder scans every item twice before it is decoded. An
// item's validity is its decoder's to check (decodeItem); the List's
// other values are checked as JSON. A file that is not an object with a
// key "items" whose value is an array is declined before any item.
func scanList(r *bufio.Reader, each func(*SavedItem)) error {
	s := &listScanner{r: r}
	listed := false
	fail := func(err error) error {
		if listed {
			return err
		}
		return errNotScanned
	}
	if b, err := s.ws(); err != nil || b != '{' {
		return errNotScanned
	}
	for {
		b, err := s.ws()
		if err != nil || b != '"' {
			return fail(syntaxError(b, err, "an object key"))
		}
		key, err := s.value(b)
		if err != nil {
			return fail(err)
		}
		name := string(key) // s.buf holds the next value
		if b, err = s.ws(); err != nil || b != ':' {
			return fail(syntaxError(b, err, "':' after an object key"))
		}
		if b, err = s.ws(); err != nil {
			return fail(syntaxError(b, err, "a value"))
		}
		if name == `"items"` && b == '[' {
			listed, s.items = true, 0
			if err := decodeItems(s.item, each); err != nil {
				return err
			}
		} else if v, err := s.value(b); err != nil || !json.Valid(v) {
			return fail(fmt.Errorf("the value of %s is not valid JSON (%v)", name, err))
		}
		switch b, err = s.ws(); {
		case err == nil && b == ',':
		case err == nil && b == '}' && listed:
			return nil
		default:
			return fail(syntaxError(b, err, "',' or '}' after an object value"))
		}
	}
}

// listScanner reads a List's values from r, one at a time.
type listScanner struct {
	r     *bufio.Reader
	buf   []byte
	items int // read so far
}

// ws returns the next byte after whitespace.
func (s *listScanner) ws() (byte, error) {
	for {
		b, err := s.r.ReadByte()
		if err != nil || b != ' ' && b != '\t' && b != '\n' && b != '\r' {
			return b, err
		}
	}
}

// item returns the next item of the items array, which is read up to
// its '[': a copy of its bytes; io.EOF after its ']'.
func (s *listScanner) item() ([]byte, error) {
	b, err := s.ws()
	if err == nil && b == ']' {
		return nil, io.EOF
	}
	if s.items > 0 {
		if err != nil || b != ',' {
			return nil, syntaxError(b, err, "',' or ']' after an item")
		}
		b, err = s.ws()
	}
	if err != nil {
		return nil, syntaxError(b, err, "an item")
	}
	s.items++
	v, err := s.value(b)
	return bytes.Clone(v), err
}

// value reads the value that begins with first: a string, an object or
// an array to its matching end, counting brackets outside strings; a
// number or literal to the next delimiter. s.buf holds it until the
// next call.
func (s *listScanner) value(first byte) ([]byte, error) {
	s.buf = append(s.buf[:0], first)
	depth, inString, escaped := 0, first == '"', false
	if first == '{' || first == '[' {
		depth = 1
	}
	if depth == 0 && !inString {
		for {
			p, err := s.r.Peek(1)
			if err != nil || bytes.IndexByte([]byte(",}] \t\r\n"), p[0]) >= 0 {
				return s.buf, nil
			}
			s.buf = append(s.buf, p[0])
			_, _ = s.r.ReadByte()
		}
	}
	for depth > 0 || inString {
		// What r has buffered, scanned in place: a call a byte would
		// cost more than the scan.
		chunk, err := s.r.Peek(max(s.r.Buffered(), 1))
		if len(chunk) == 0 {
			return nil, syntaxError(0, err, "the end of a value")
		}
		i := 0
		for ; i < len(chunk) && (depth > 0 || inString); i++ {
			b := chunk[i]
			switch {
			case escaped:
				escaped = false
			case inString:
				escaped, inString = b == '\\', b != '"'
			case b == '"':
				inString = true
			case b == '{' || b == '[':
				depth++
			case b == '}' || b == ']':
				depth--
			}
		}
		s.buf = append(s.buf, chunk[:i]...)
		_, _ = s.r.Discard(i)
	}
	return s.buf, nil
}

// syntaxError says what was expected where b (or err, at the end of the
// input) was found.
func syntaxError(b byte, err error, expected string) error {
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("unexpected end of JSON input: expected %s", expected)
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("invalid character %q: expected %s", b, expected)
}
