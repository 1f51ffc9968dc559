// Command ptpsql runs docs/sql/duckdb.sql with DuckDB on the files of
// `kubectl ptp export -o parquet` and a VPC Flow Logs file, and prints
// each row of its answer as a JSON object of its columns: what a user of
// DuckDB gets, for the end-to-end tests to compare with `kubectl ptp
// enrich` (which they build without cgo, so they run this instead).
//
//	ptpsql -sql docs/sql/duckdb.sql -exports DIR -flows FILE [-namespace NS] [-skew 1s]
package main

import (
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	_ "github.com/duckdb/duckdb-go/v2"
)

func main() {
	script := flag.String("sql", "docs/sql/duckdb.sql", "The DuckDB script.")
	exports := flag.String("exports", "", "The directory of the exported Parquet files.")
	flows := flag.String("flows", "", "The VPC Flow Logs file (or glob).")
	namespace := flag.String("namespace", "", "enrich -n: the namespace asked about; empty for all.")
	skew := flag.Duration("skew", time.Second, "enrich --skew.")
	flag.Parse()
	if *exports == "" || *flows == "" {
		fmt.Fprintln(os.Stderr, "ptpsql: -exports and -flows are required")
		os.Exit(2)
	}
	if err := run(*script, *exports, *flows, *namespace, *skew); err != nil {
		fmt.Fprintln(os.Stderr, "ptpsql:", err)
		os.Exit(1)
	}
}

func run(path, exports, flows, namespace string, skew time.Duration) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	script := string(b)
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	for name, value := range map[string]string{
		"ptp_holds":     quote(filepath.Join(exports, "holds-*.parquet")),
		"ptp_coverage":  quote(filepath.Join(exports, "coverage-*.parquet")),
		"ptp_gaps":      quote(filepath.Join(exports, "gaps-*.parquet")),
		"ptp_flows":     quote(flows),
		"ptp_namespace": quote(namespace),
		"ptp_skew":      fmt.Sprintf("INTERVAL %d MILLISECOND", skew.Milliseconds()),
	} {
		re := regexp.MustCompile(`(?m)^SET VARIABLE ` + name + `\s*=.*;$`)
		if !re.MatchString(script) {
			return fmt.Errorf("%s sets no %s", path, name)
		}
		script = re.ReplaceAllLiteralString(script, "SET VARIABLE "+name+" = "+value+";")
	}
	db, err := sql.Open("duckdb", "")
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // the script's temporary tables live on one connection
	if _, err := db.Exec("SET threads = 1"); err != nil {
		return err
	}
	rows, err := db.Query(script)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer rows.Close()
	names, err := rows.Columns()
	if err != nil {
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	for rows.Next() {
		vals := make([]sql.NullString, len(names))
		ptrs := make([]any, len(names))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return err
		}
		row := make(map[string]any, len(names))
		for i, n := range names {
			if vals[i].Valid {
				row[n] = vals[i].String
			} else {
				row[n] = nil
			}
		}
		if err := enc.Encode(row); err != nil {
			return err
		}
	}
	return rows.Err()
}
