package jsonscan

import (
	"errors"
	"fmt"
	"io"
)

// Framer splits a watch stream into its events, each a JSON object,
// by counting brackets outside strings: one cheap pass, where the standard
// JSON framer runs encoding/json's scanner over every byte. Whatever the
// layout (one event a line, as the API server writes, or any other
// whitespace), a frame is exactly one top-level object; anything else at
// the top level is an error, as it is for the standard framer.
type Framer struct{}

func (Framer) NewFrameReader(r io.ReadCloser) io.ReadCloser {
	return &frameReader{r: r, buf: make([]byte, 0, 32*1024)}
}

func (Framer) NewFrameWriter(w io.Writer) io.Writer { return w }

// maxFrameBytes bounds one event, as the streaming decoder bounds what it
// accepts (etcd's own limit on an object is 1.5 MiB).
const maxFrameBytes = 16 * 1024 * 1024

// errFrameTooLarge is returned for an event above maxFrameBytes.
var errFrameTooLarge = errors.New("watch event larger than 16 MiB")

// frameReader returns one frame per Read, with the io.ErrShortBuffer
// protocol of the standard framers when the caller's buffer is too small.
type frameReader struct {
	r io.ReadCloser
	// buf[start:] holds bytes read and not yet returned.
	buf   []byte
	start int
	// remaining is the rest of a frame the last Read could not fit.
	remaining []byte
}

func (f *frameReader) Read(data []byte) (int, error) {
	if len(f.remaining) > 0 {
		n := copy(data, f.remaining)
		f.remaining = f.remaining[n:]
		if len(f.remaining) > 0 {
			return n, io.ErrShortBuffer
		}
		return n, nil
	}
	frame, err := f.next()
	if err != nil {
		return 0, err
	}
	n := copy(data, frame)
	if n < len(frame) {
		f.remaining = append([]byte(nil), frame[n:]...)
		return n, io.ErrShortBuffer
	}
	return n, nil
}

// next returns the next frame, which aliases buf until the next call.
func (f *frameReader) next() ([]byte, error) {
	depth, inString, escaped := 0, false, false
	i := f.start // the next byte to look at
	for {
		for ; i < len(f.buf); i++ {
			b := f.buf[i]
			if depth == 0 {
				// Between events: whitespace, or the next event's '{'.
				switch b {
				case ' ', '\t', '\r', '\n':
					f.start = i + 1
				case '{':
					depth = 1
				default:
					return nil, fmt.Errorf("watch stream: unexpected %q between events", b)
				}
				continue
			}
			if inString {
				switch {
				case escaped:
					escaped = false
				case b == '\\':
					escaped = true
				case b == '"':
					inString = false
				}
				continue
			}
			switch b {
			case '"':
				inString = true
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					frame := f.buf[f.start : i+1]
					f.start = i + 1
					return frame, nil
				}
			}
		}
		// Need more: keep the frame read so far at the buffer's start.
		i -= f.start
		n := copy(f.buf, f.buf[f.start:])
		f.buf, f.start = f.buf[:n], 0
		if len(f.buf) >= maxFrameBytes {
			return nil, errFrameTooLarge
		}
		if len(f.buf) == cap(f.buf) {
			f.buf = append(f.buf, make([]byte, cap(f.buf))...)[:n]
		}
		m, err := f.r.Read(f.buf[n:cap(f.buf)])
		f.buf = f.buf[:n+m]
		if m > 0 {
			continue
		}
		if err == io.EOF && n > 0 {
			return nil, io.ErrUnexpectedEOF
		}
		if err != nil {
			return nil, err
		}
	}
}

func (f *frameReader) Close() error { return f.r.Close() }
