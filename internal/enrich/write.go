package enrich

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"slices"
	"strings"
)

// writeColumns appends an answer's five columns, each after sep.
func (e *Enricher) writeColumns(sep byte, a *Answer) {
	if e.cl != nil {
		for _, c := range e.columns(a) {
			e.out.WriteByte(sep)
			e.out.WriteString(c)
		}
		return
	}
	if sep == ' ' && len(a.Holders) == 1 {
		e.out.WriteByte(' ')
		e.out.Write(e.ix.podText(a.Holders[0]))
		e.out.WriteByte(' ')
		e.out.WriteString(a.Match.String())
		return
	}
	if sep == ' ' && len(a.Holders) == 0 && a.Current == "" {
		// Most answers of a flow log: addresses outside the pods'.
		e.out.WriteString(" - - - - ")
		e.out.WriteString(a.Match.String())
		return
	}
	for col := range 4 {
		e.out.WriteByte(sep)
		e.out.WriteString(e.column(a, col))
	}
	e.out.WriteByte(sep)
	e.out.WriteString(a.Match.String())
}

// column is one of an answer's columns: namespace, pod, pod UID, node;
// several holders joined with ","; "-" where empty. A current label goes
// in the pod column.
func (e *Enricher) column(a *Answer, col int) string {
	switch {
	case len(a.Holders) == 0 && col == 1 && a.Current != "":
		return a.Current
	case len(a.Holders) == 0:
		return "-"
	case len(a.Holders) == 1:
		return e.holderColumn(a.Holders[0], col)
	}
	parts := make([]string, len(a.Holders))
	for i, id := range a.Holders {
		parts[i] = e.holderColumn(id, col)
	}
	return strings.Join(parts, ",")
}

// holderColumn is column col of holder id: namespace, pod, pod UID,
// node, or (several clusters) cluster.
func (e *Enricher) holderColumn(id uint32, col int) string {
	if e.cl == nil {
		return e.ix.column(id, col)
	}
	ix, local, cluster := e.cl.pod(id)
	if col == 4 {
		return cluster
	}
	return ix.column(local, col)
}

// columns are an answer's five columns as strings, six with a cluster's.
func (e *Enricher) columns(a *Answer) []string {
	if e.cl != nil {
		cluster := e.column(a, 4)
		if len(a.Holders) == 0 && a.Current != "" {
			cluster = e.cl.names[a.cluster]
		}
		return []string{e.column(a, 0), e.column(a, 1), e.column(a, 2), e.column(a, 3), cluster, a.Match.String()}
	}
	return []string{e.column(a, 0), e.column(a, 1), e.column(a, 2), e.column(a, 3), a.Match.String()}
}

// holder returns pod id, and its cluster with several.
func (e *Enricher) holder(id uint32) (Pod, string) {
	if e.cl == nil {
		return e.ix.Pod(id), ""
	}
	ix, local, cluster := e.cl.pod(id)
	return ix.Pod(local), cluster
}

// jsonHolder and jsonAnswer are an answer in a JSON record's podtoip
// object: the holder's fields, or a list under holders where several
// pods match.
type jsonHolder struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	PodUID    string `json:"podUID"`
	Node      string `json:"node,omitempty"`
	Cluster   string `json:"cluster,omitempty"`
}

type jsonAnswer struct {
	Namespace string       `json:"namespace,omitempty"`
	Pod       string       `json:"pod,omitempty"`
	PodUID    string       `json:"podUID,omitempty"`
	Node      string       `json:"node,omitempty"`
	Cluster   string       `json:"cluster,omitempty"`
	Holders   []jsonHolder `json:"holders,omitempty"`
	// Current is node/NAME or service/NS/NAME: the address's holder now,
	// not at the record's time.
	Current string `json:"current,omitempty"`
	Match   string `json:"match"`
}

// podtoip is the object added to a JSON record, keyed by address field;
// fields without an address are left out.
func (e *Enricher) podtoip(addrNames []string, answers []Answer) []byte {
	obj := make(map[string]jsonAnswer, len(answers))
	for i := range answers {
		a := &answers[i]
		if a.Match == Skipped {
			continue
		}
		ja := jsonAnswer{Current: a.Current, Match: a.Match.String()}
		if e.cl != nil && a.Current != "" {
			ja.Cluster = e.cl.names[a.cluster]
		}
		for _, id := range a.Holders {
			p, cluster := e.holder(id)
			ja.Holders = append(ja.Holders, jsonHolder{Namespace: p.Namespace, Pod: p.Name, PodUID: string(p.UID), Node: p.Node, Cluster: cluster})
		}
		if len(ja.Holders) == 1 {
			h := ja.Holders[0]
			ja.Namespace, ja.Pod, ja.PodUID, ja.Node, ja.Cluster, ja.Holders = h.Namespace, h.Pod, h.PodUID, h.Node, h.Cluster, nil
		}
		obj[addrNames[i]] = ja
	}
	b, _ := json.Marshal(obj) // strings and maps of them: cannot fail
	return b
}

// writeJSON writes a JSON object record with "podtoip" added as its last
// key, the rest of it byte for byte as read.
func (e *Enricher) writeJSON(raw []byte, addrNames []string, answers []Answer) {
	obj := bytes.TrimRight(raw, " \t\r")
	body := bytes.TrimRight(obj[:len(obj)-1], " \t\r\n")
	e.out.Write(body)
	if !bytes.HasSuffix(body, []byte{'{'}) {
		e.out.WriteByte(',')
	}
	e.out.WriteString(`"podtoip":`)
	e.out.Write(e.podtoip(addrNames, answers))
	e.out.WriteString("}\n")
}

// writeTable writes a record of named values (aws-vpc or csv read, or
// the fields of a JSON record) as -o asks: a JSON object or a CSV row,
// with a header row whenever the names change.
func (e *Enricher) writeTable(names, values, addrNames []string, answers []Answer) {
	if e.opts.Output == FormatJSONL {
		e.out.WriteByte('{')
		for i, n := range names {
			k, _ := json.Marshal(n)
			v, _ := json.Marshal(values[i])
			e.out.Write(k)
			e.out.WriteByte(':')
			e.out.Write(v)
			e.out.WriteByte(',')
		}
		e.out.WriteString(`"podtoip":`)
		e.out.Write(e.podtoip(addrNames, answers))
		e.out.WriteString("}\n")
		return
	}
	w := csv.NewWriter(e.out)
	if !slices.Equal(e.csvNames, names) {
		e.csvNames = slices.Clone(names)
		header := slices.Clone(names)
		for _, a := range addrNames {
			header = append(header, enrichedColumns(a, e.cl != nil)...)
		}
		w.Write(header)
	}
	row := slices.Clone(values)
	for i := range answers {
		row = append(row, e.columns(&answers[i])...)
	}
	w.Write(row)
	w.Flush()
}
