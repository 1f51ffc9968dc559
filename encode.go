package main

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"unicode/utf8"
)

// encodeMirror writes obj as the JSON the standard encoder writes for it,
// byte for byte, without reflection: the body of every create and update
// the controller sends. It declines (ok false) objects with
// metadata the API server sets (creationTimestamp, generation,
// managedFields, the deletion fields, selfLink), which the controller never
// sends; the caller then encodes the standard way.
func encodeMirror(obj *PodToIp) (body []byte, ok bool) {
	meta := &obj.ObjectMeta
	if meta.SelfLink != "" || meta.Generation != 0 || !meta.CreationTimestamp.IsZero() || meta.DeletionTimestamp != nil ||
		meta.DeletionGracePeriodSeconds != nil || meta.ManagedFields != nil {
		return nil, false
	}
	b := make([]byte, 0, 512)
	b = append(b, `{"kind":"PodToIp","apiVersion":"`+GroupVersion.String()+`","metadata":{`...)
	b = appendField(b, "name", meta.Name, false)
	b = appendField(b, "generateName", meta.GenerateName, false)
	b = appendField(b, "namespace", meta.Namespace, false)
	b = appendField(b, "uid", string(meta.UID), false)
	b = appendField(b, "resourceVersion", meta.ResourceVersion, false)
	if len(meta.Labels) > 0 {
		b = append(appendMap(append(b, `"labels":`...), meta.Labels), ',')
	}
	if len(meta.Annotations) > 0 {
		b = append(appendMap(append(b, `"annotations":`...), meta.Annotations), ',')
	}
	if len(meta.OwnerReferences) > 0 {
		b = append(b, `"ownerReferences":[`...)
		for i, ref := range meta.OwnerReferences {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '{')
			b = appendField(b, "apiVersion", ref.APIVersion, true)
			b = appendField(b, "kind", ref.Kind, true)
			b = appendField(b, "name", ref.Name, true)
			b = append(b, `"uid":`...)
			b = appendString(b, string(ref.UID))
			b = appendBoolPtr(b, "controller", ref.Controller)
			b = appendBoolPtr(b, "blockOwnerDeletion", ref.BlockOwnerDeletion)
			b = append(b, '}')
		}
		b = append(b, "],"...)
	}
	if len(meta.Finalizers) > 0 {
		b = append(appendList(append(b, `"finalizers":`...), meta.Finalizers), ',')
	}
	b = append(bytes.TrimSuffix(b, []byte(",")), "},"...)
	b = appendField(b, "podName", obj.PodName, true)
	b = appendField(b, "podUID", string(obj.PodUID), true)
	b = appendField(b, "podAddress", obj.PodAddress, true)
	if len(obj.PodIPs) > 0 {
		b = append(appendList(append(b, `"podIPs":`...), obj.PodIPs), ',')
	}
	b = appendField(b, "podIPv4", obj.PodIPv4, false)
	b = appendField(b, "podIPv6", obj.PodIPv6, false)
	b = appendField(b, "nodeName", obj.NodeName, false)
	b = strconv.AppendBool(append(b, `"hostNetwork":`...), obj.HostNetwork)
	if obj.Terminating {
		b = append(b, `,"terminating":true`...)
	}
	b = strconv.AppendBool(append(b, `,"conflict":`...), obj.Conflict)
	if len(obj.ConflictsWith) > 0 {
		b = appendList(append(b, `,"conflictsWith":`...), obj.ConflictsWith)
	}
	return append(b, "}\n"...), true
}

// appendField appends "key":"value", followed by a comma; an empty value is
// left out unless always (the field has no omitempty).
func appendField(b []byte, key, value string, always bool) []byte {
	if value == "" && !always {
		return b
	}
	b = append(append(append(b, '"'), key...), `":`...)
	return append(appendString(b, value), ',')
}

// appendBoolPtr appends ,"key":true or false, unless v is nil.
func appendBoolPtr(b []byte, key string, v *bool) []byte {
	if v == nil {
		return b
	}
	return strconv.AppendBool(append(append(append(b, `,"`...), key...), `":`...), *v)
}

// appendList appends a JSON array of strings.
func appendList(b []byte, list []string) []byte {
	b = append(b, '[')
	for i, s := range list {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

// appendMap appends a JSON object of strings, keys sorted as encoding/json
// sorts them.
func appendMap(b []byte, m map[string]string) []byte {
	b = append(b, '{')
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(appendString(b, k), ':')
		b = appendString(b, m[k])
	}
	return append(b, '}')
}

// appendString appends s as encoding/json writes a string: between quotes
// as it is when nothing in it needs escaping (names, UIDs, addresses), else
// by encoding/json itself.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			enc, _ := json.Marshal(s)
			return append(b, enc...)
		}
	}
	return append(append(append(b, '"'), s...), '"')
}
