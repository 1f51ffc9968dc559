package jsonscan

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/framer"
)

// chunkReader returns its data a few bytes per Read, as a network stream
// may: an event is split across reads anywhere.
type chunkReader struct {
	data []byte
	size int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.size)], r.data)
	r.data = r.data[n:]
	return n, nil
}

// readFrames reads every frame of stream with a framer, the stream
// arriving chunk bytes per read, through buffers of bufSize to exercise the
// short-buffer protocol.
func readFrames(fr runtime.Framer, stream []byte, chunk, bufSize int) (frames []string, err error) {
	r := fr.NewFrameReader(io.NopCloser(&chunkReader{data: stream, size: chunk}))
	buf := make([]byte, bufSize)
	var frame []byte
	for {
		n, err := r.Read(buf)
		frame = append(frame, buf[:n]...)
		switch {
		case errors.Is(err, io.ErrShortBuffer):
			continue
		case err != nil:
			return frames, err
		}
		frames = append(frames, string(frame))
		frame = nil
	}
}

// jsonFramer is apimachinery's JSON framer, the one Framer replaces.
type jsonFramer struct{}

func (jsonFramer) NewFrameReader(r io.ReadCloser) io.ReadCloser { return framer.NewJSONFramedReader(r) }
func (jsonFramer) NewFrameWriter(w io.Writer) io.Writer         { return w }

// On any stream, arriving in reads split at any byte position and read
// through any buffer size, Framer returns the frames apimachinery's JSON
// framer returns, and ends at EOF only where it does; where the standard
// framer returns a value that is not an object, Framer stops there with an
// error.
func FuzzFramer(f *testing.F) {
	f.Add([]byte(`{"type":"ADDED","object":{"a":"}{\"]"}}`+"\n"+`{"type":"BOOKMARK","object":{}}`+"\n"), uint8(1), uint16(7))
	f.Add([]byte(" {}\n\t{\"a\":[{},[]]}  {\"b\":\"\\\\\"}"), uint8(3), uint16(1))
	f.Add([]byte(`{"a":1}{"b":`), uint8(2), uint16(64))
	f.Add([]byte(`{"a":1} 5 {"b":2}`), uint8(5), uint16(64))
	f.Add([]byte(`{"a":"\u007d"}`), uint8(1), uint16(2))
	f.Fuzz(func(t *testing.T, stream []byte, chunk uint8, bufSize uint16) {
		c, b := int(chunk%16)+1, int(bufSize%4096)+1
		want, wantErr := readFrames(jsonFramer{}, stream, len(stream)+1, 1<<20)
		got, gotErr := readFrames(Framer{}, stream, c, b)
		// On a well-formed stream of objects the two agree. Where the
		// standard framer returns a value that is not an object, Framer
		// stops there with an error; where it fails on malformed JSON,
		// Framer, which only counts brackets, may return the malformed
		// text as a frame, which then fails to decode and ends the watch.
		switch {
		case wantErr == io.EOF && len(got) == len(want) && gotErr == io.EOF:
		case wantErr == io.EOF && len(got) < len(want) && gotErr != io.EOF:
		case wantErr != io.EOF && len(got) <= len(want):
		case wantErr != io.EOF && len(got) > len(want) && !json.Valid([]byte(got[len(want)])):
		default:
			t.Fatalf("frames %q (%v), want %q (%v), reads of %d, buffer %d", got, gotErr, want, wantErr, c, b)
		}
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] && !bytes.Equal(bytes.TrimSpace([]byte(got[i])), bytes.TrimSpace([]byte(want[i]))) {
				t.Fatalf("frame %d = %q, want %q", i, got[i], want[i])
			}
		}
	})
}

// A stream of events split at every byte position, one read apart, gives
// the same events: an event is never cut where a read ends.
func TestFramerSplitAtEveryByte(t *testing.T) {
	stream := `{"type":"ADDED","object":{"a":"}{\"]","b":[1,{"c":null}]}}` + "\n" + `{"type":"BOOKMARK","object":{}}` + "\n"
	want, _ := readFrames(jsonFramer{}, []byte(stream), len(stream), 1<<10)
	for chunk := 1; chunk <= len(stream); chunk++ {
		got, err := readFrames(Framer{}, []byte(stream), chunk, 1<<10)
		if err != io.EOF || len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("reads of %d bytes: %q (%v), want %q", chunk, got, err, want)
		}
	}
}

// A stream that ends inside an event ends with io.ErrUnexpectedEOF after
// the whole events; one that ends between events, with io.EOF.
func TestFramerEnds(t *testing.T) {
	got, err := readFrames(Framer{}, []byte(`{"a":1} {"b"`), 3, 64)
	if len(got) != 1 || err != io.ErrUnexpectedEOF {
		t.Errorf("cut inside an event: %q, %v; want one frame and io.ErrUnexpectedEOF", got, err)
	}
	got, err = readFrames(Framer{}, []byte("{\"a\":1}\n"), 3, 64)
	if len(got) != 1 || err != io.EOF {
		t.Errorf("ended between events: %q, %v; want one frame and io.EOF", got, err)
	}
}
