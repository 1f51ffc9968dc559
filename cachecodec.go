package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The PodToIp informer reads one watch event per mirror written, so at a
// cold start the controller decodes as many events as it creates mirrors,
// and a restart streams every mirror through the same path. The standard
// path reads each event three times over (the stream framer runs
// encoding/json's scanner over it, the envelope is decoded, then the
// object, managedFields and all, by reflection), which was a fifth of the
// controller's CPU at cold start.
//
// The cache's watch reads it once: objectFramer finds where each event ends
// by counting brackets, splitWatchEvent takes the envelope apart without
// decoding it, and decodeCachedMirror reads the object's fields straight
// into a PodToIp, skipping what the cache does not keep (see mirrorInfo).
// Anything it does not recognise (a Status in an ERROR event, a string with
// escapes, a key given twice) goes to the standard decoder, so the result
// is the same, only cheaper in the common case. Only the informer uses
// this; Client's own Watch returns whole objects.

// cacheCodec decodes watch envelopes and PodToIps in one pass each (see
// above), and everything else as fastCodec does.
type cacheCodec struct {
	fastCodec
}

func (c cacheCodec) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	switch into := into.(type) {
	case *metav1.WatchEvent:
		if typ, obj, ok := splitWatchEvent(data); ok {
			*into = metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: obj}}
			gvk := metav1.SchemeGroupVersion.WithKind("WatchEvent")
			return into, &gvk, nil
		}
	case nil:
		if m, ok := decodeCachedMirror(data); ok {
			gvk := GroupVersion.WithKind("PodToIp")
			return m, &gvk, nil
		}
	}
	return c.fastCodec.Decode(data, defaults, into)
}

// splitWatchEvent takes apart an event as the API server writes it,
// {"type":"T","object":{...}}, returning the type and the object's bytes
// (which alias data). Any other shape is left to the standard decoder.
func splitWatchEvent(data []byte) (typ string, obj []byte, ok bool) {
	const head, mid = `{"type":`, `,"object":`
	if !bytes.HasPrefix(data, []byte(head)) {
		return "", nil, false
	}
	c := jsonCursor{data: data, i: len(head)}
	t, ok := c.rawString()
	if !ok || !bytes.HasPrefix(data[c.i:], []byte(mid)) {
		return "", nil, false
	}
	c.i += len(mid)
	// The object runs to the envelope's closing brace; check it is one
	// whole object and nothing follows it.
	if c.peek() != '{' {
		return "", nil, false
	}
	start := c.i
	if !c.skip() {
		return "", nil, false
	}
	obj = data[start:c.i]
	if !c.consume('}') || !c.end() {
		return "", nil, false
	}
	return string(t), obj, true
}

// decodeCachedMirror reads a PodToIp with the fields the cache keeps
// (toMirrorInfo): identity, resourceVersion, labels, annotations,
// finalizers, generateName, owner references and every field of the
// mirror. Other metadata (managedFields, creationTimestamp, generation,
// the deletion fields) is skipped, checked only to be valid JSON. It
// declines (ok false) anything but a PodToIp of this group's version, and
// any input jsonCursor declines.
func decodeCachedMirror(data []byte) (m *PodToIp, ok bool) {
	if !bytes.HasPrefix(data, podToIpPrefix) {
		return nil, false
	}
	m = &PodToIp{}
	c := &jsonCursor{data: data}
	var apiVersion, kind string
	ok = c.object(func(key []byte) (ok bool) {
		switch string(key) {
		case "apiVersion":
			apiVersion, ok = c.str()
		case "kind":
			kind, ok = c.str()
		case "metadata":
			ok = c.null() || decodeMirrorMeta(c, &m.ObjectMeta)
		case "podName":
			m.PodName, ok = c.str()
		case "podUID":
			m.PodUID, ok = c.uid()
		case "podAddress":
			m.PodAddress, ok = c.str()
		case "podIPs":
			m.PodIPs, ok = c.strList()
		case "podIPv4":
			m.PodIPv4, ok = c.str()
		case "podIPv6":
			m.PodIPv6, ok = c.str()
		case "nodeName":
			m.NodeName, ok = c.str()
		case "hostNetwork":
			m.HostNetwork, ok = c.boolean()
		case "conflict":
			m.Conflict, ok = c.boolean()
		case "conflictsWith":
			m.ConflictsWith, ok = c.strList()
		default:
			ok = c.skip()
		}
		return ok
	})
	if !ok || !c.end() || apiVersion != GroupVersion.String() || kind != "PodToIp" {
		return nil, false
	}
	return m, true
}

// decodeMirrorMeta reads the metadata the cache keeps into meta.
func decodeMirrorMeta(c *jsonCursor, meta *metav1.ObjectMeta) bool {
	return c.object(func(key []byte) (ok bool) {
		switch string(key) {
		case "name":
			meta.Name, ok = c.str()
		case "namespace":
			meta.Namespace, ok = c.str()
		case "generateName":
			meta.GenerateName, ok = c.str()
		case "uid":
			meta.UID, ok = c.uid()
		case "resourceVersion":
			meta.ResourceVersion, ok = c.str()
		case "labels":
			meta.Labels, ok = c.strMap()
		case "annotations":
			meta.Annotations, ok = c.strMap()
		case "finalizers":
			meta.Finalizers, ok = c.strList()
		case "ownerReferences":
			meta.OwnerReferences, ok = decodeOwnerRefs(c)
		default:
			ok = c.skip()
		}
		return ok
	})
}

// decodeOwnerRefs reads metadata.ownerReferences; null reads as nil.
func decodeOwnerRefs(c *jsonCursor) ([]metav1.OwnerReference, bool) {
	if c.null() {
		return nil, true
	}
	refs := []metav1.OwnerReference{}
	ok := c.array(func() bool {
		var ref metav1.OwnerReference
		ok := c.null() || c.object(func(key []byte) (ok bool) {
			switch string(key) {
			case "apiVersion":
				ref.APIVersion, ok = c.str()
			case "kind":
				ref.Kind, ok = c.str()
			case "name":
				ref.Name, ok = c.str()
			case "uid":
				ref.UID, ok = c.uid()
			case "controller":
				ref.Controller, ok = c.boolPtr()
			case "blockOwnerDeletion":
				ref.BlockOwnerDeletion, ok = c.boolPtr()
			default:
				ok = c.skip()
			}
			return ok
		})
		refs = append(refs, ref)
		return ok
	})
	return refs, ok
}

// objectFramer splits a watch stream into its events, each a JSON object,
// by counting brackets outside strings: one cheap pass, where the standard
// JSON framer runs encoding/json's scanner over every byte. Whatever the
// layout (one event a line, as the API server writes, or any other
// whitespace), a frame is exactly one top-level object; anything else at
// the top level is an error, as it is for the standard framer.
type objectFramer struct{}

func (objectFramer) NewFrameReader(r io.ReadCloser) io.ReadCloser {
	return &objectFrameReader{r: r, buf: make([]byte, 0, 32*1024)}
}

func (objectFramer) NewFrameWriter(w io.Writer) io.Writer { return w }

// maxFrameBytes bounds one event, as the streaming decoder bounds what it
// accepts (etcd's own limit on an object is 1.5 MiB).
const maxFrameBytes = 16 * 1024 * 1024

// errFrameTooLarge is returned for an event above maxFrameBytes.
var errFrameTooLarge = errors.New("watch event larger than 16 MiB")

// objectFrameReader returns one frame per Read, with the io.ErrShortBuffer
// protocol of the standard framers when the caller's buffer is too small.
type objectFrameReader struct {
	r io.ReadCloser
	// buf[start:] holds bytes read and not yet returned.
	buf   []byte
	start int
	// remaining is the rest of a frame the last Read could not fit.
	remaining []byte
}

func (f *objectFrameReader) Read(data []byte) (int, error) {
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
func (f *objectFrameReader) next() ([]byte, error) {
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

func (f *objectFrameReader) Close() error { return f.r.Close() }
