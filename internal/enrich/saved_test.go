package enrich

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// scanSeeds are items as the API server and kubectl write them, and the
// forms the field-by-field reader must decline or get right.
var scanSeeds = []string{
	`{"kind":"IPHistory","apiVersion":"example.com/v1","metadata":{"name":"10.244.0.7","uid":"u1","resourceVersion":"9","generation":1,"creationTimestamp":"2026-11-26T11:00:00Z","labels":{"app.kubernetes.io/managed-by":"podtoip-controller"}},"address":"10.244.0.7","holds":2,"recordedFrom":"2026-11-26T11:30:00Z",
	 "holders":[{"namespace":"a","pod":"web","podUID":"u-web","node":"n1","from":"2026-11-26T12:00:00Z","to":"2026-11-26T13:00:00Z","endedAfter":"2026-11-26T12:59:00Z"},{"namespace":"b","pod":"api","podUID":"u-api","from":"2026-11-26T13:00:00Z","startedBefore":"2026-11-26T13:00:05Z"}]}`,
	`{"kind":"IPHistory","metadata":{"name":"10.244.0.8"},"address":"10.244.0.8","holders":[],"overflow":{"from":"2026-11-26T12:00:00Z"}}`,
	`{"kind":"IPHistoryCoverage","metadata":{"name":"all"},"retention":"24h0m0s","intervals":[{"from":"2026-11-26T12:00:00Z","to":"2026-11-26T20:00:00Z"}]}`,
	`{"kind":"Node","metadata":{"name":"n1"},"status":{"addresses":[{"type":"InternalIP","address":"192.168.0.1"}]}}`,
	`{"kind":"IPHistory","address":"10.244.0.9","holders":null,"recordedFrom":null,"metadata":null}`,
	`{"Kind":"IPHistory","address":"10.244.0.9"}`,
	`{"kind":"IPHistory","address":"10.244.0.9","holders":[{"Pod":"web","from":"2026-11-26T12:00:00Z"}]}`,
	`{"kind":"IPHistory","address":"10.244.0.9","holders":[{"pod":"web","from":null}]}`,
	`{"kind":"IPHistory","address":"10.244.0.9","holders":[{"pod":"w\u0065b","from":"2026-11-26T12:00:00Z"}]}`,
	`{"kind":"IPHistory","address":"10.244.0.9","holders":[{"pod":"web","from":"2026-11-26T12:00:00+01:00"}]}`,
	`{"kind":"IPHistory","address":"10.244.0.9","holders":[{"pod":"web","from":"yesterday"}]}`,
	`{"kind":"IPHistory","metadata":{"generation":1.5}}`,
	`{"kind":"IPHistory","metadata":{"labels":{"a":5}}}`,
	`{"kind":"IPHistory","kind":"Node"}`,
	`{"kind":"IPHistory","address":5}`,
	`null`,
	`[]`,
	`{"kind":"IPHistory"} {}`,
}

// FuzzDecodeItemMatchesStandard: whatever decodeItem reads field by field
// is what encoding/json reads, in every field the index uses, and it
// fails where encoding/json fails.
func FuzzDecodeItemMatchesStandard(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var got, want SavedItem
		gotErr := decodeItem(raw, &got)
		wantErr := json.Unmarshal(raw, &want)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("%s: decodeItem error %v, encoding/json %v", raw, gotErr, wantErr)
		}
		if gotErr != nil {
			return
		}
		// The index reads the creation time of the metadata, nothing else.
		if !got.Metadata.CreationTimestamp.Equal(&want.Metadata.CreationTimestamp) {
			t.Fatalf("%s: creationTimestamp %v, encoding/json %v", raw, got.Metadata.CreationTimestamp, want.Metadata.CreationTimestamp)
		}
		got.Metadata = want.Metadata
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\ndecodeItem   %+v\nencoding/json %+v", raw, got, want)
		}
	})
}

// TestScanListMatchesDecodeList: a List framed by counting brackets gives
// the items the standard decoder gives, or the same failure at the same
// item; what it does not frame it declines before any item.
func TestScanListMatchesDecodeList(t *testing.T) {
	items := strings.Join(scanSeeds[:5], ",\n")
	for _, tc := range []struct {
		name, file string
		declined   bool
		// strict: scanList fails where decodeList reads every item and
		// does not see that the List's end is missing.
		strict bool
	}{
		{"compact", `{"apiVersion":"v1","kind":"List","items":[` + items + `],"metadata":{"resourceVersion":""}}`, false, false},
		{"indented", "{\n    \"apiVersion\": \"v1\",\n    \"items\": [\n" + items + "\n    ],\n    \"kind\": \"List\"\n}\n", false, false},
		{"items last", `{"kind":"List","metadata":{"a":[1,{"b":"]}"}]},"items":[` + items + `]}`, false, false},
		{"strings with brackets", `{"items":[{"kind":"IPHistory","address":"a]}\"{","holders":[]}]}`, false, false},
		{"empty", `{"items":[]}`, false, false},
		{"two lists", `{"items":[` + scanSeeds[0] + `],"items":[` + scanSeeds[1] + `]}`, false, false},
		{"escaped key", `{"it\u0065ms":[` + items + `]}`, true, false},
		{"items not a list", `{"items":null}`, true, false},
		{"one object", scanSeeds[0], true, false},
		{"not an object", `[1,2]`, true, false},
		{"bad item", `{"items":[` + scanSeeds[0] + `,{"kind":"IPHistory","holders":5}]}`, false, false},
		{"missing comma", `{"items":[` + scanSeeds[0] + ` ` + scanSeeds[1] + `]}`, false, false},
		{"truncated item", `{"items":[` + scanSeeds[0] + `,{"kind":"IPHistory",`, false, false},
		{"truncated list", `{"items":[` + scanSeeds[0] + `]`, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var scanned, decoded []string
			record := func(to *[]string) func(*SavedItem) {
				return func(it *SavedItem) { *to = append(*to, fmt.Sprintf("%s %s %d", it.Kind, it.Address, len(it.Holders))) }
			}
			scanErr := scanList(bufioReader(tc.file), record(&scanned))
			decodeErr := decodeList(strings.NewReader(tc.file), record(&decoded))
			if declined := errors.Is(scanErr, errNotScanned); declined != tc.declined || declined && len(scanned) > 0 {
				t.Fatalf("scanList: %v after %d items, want declined %v", scanErr, len(scanned), tc.declined)
			}
			if tc.declined {
				return
			}
			if (scanErr == nil) != (decodeErr == nil && !tc.strict) || !reflect.DeepEqual(scanned, decoded) {
				t.Errorf("scanList: %q, %v\ndecodeList: %q, %v", scanned, scanErr, decoded, decodeErr)
			}
		})
	}
}

// TestEachItemReadsWhatScanListDeclines: a file scanList declines is read
// again from its start, the standard way.
func TestEachItemReadsWhatScanListDeclines(t *testing.T) {
	for _, file := range []string{`{"it\u0065ms":[` + scanSeeds[0] + `]}`, scanSeeds[0]} {
		var n int
		if err := ReadSaved(bytes.NewReader([]byte(file)), func(*SavedItem) { n++ }); err != nil || n != 1 {
			t.Errorf("%.40s…: %d items, %v; want 1", file, n, err)
		}
	}
}

func bufioReader(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }
