// Package enrich names the pod behind every address of a flow log, at the
// flow's own time: kubectl ptp enrich. It reads the history of addresses
// once (the IPHistories, their coverage, the trail; from the cluster or a
// saved list, ReadSaved) into an Index, then
// streams records through it: memory grows with the history, never with
// the input.
//
// An Index answers for a window of time with who-had's rules
// (history.WhoHad, history.HandedOver) applied to each instant of it; a
// test holds the two together. The formats (aws-vpc, gcp-vpc, jsonl, csv)
// keep every record in its own shape and order, and pass a record they
// cannot read through untouched. docs/history.md documents the command.
package enrich
