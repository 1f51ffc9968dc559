-- Attribute the addresses of AWS VPC Flow Logs to pods, in DuckDB (1.3 or
-- later), from the files of `kubectl ptp export -o parquet`: for every
-- record and each of its address fields F (srcaddr, dstaddr, pkt-srcaddr,
-- pkt-dstaddr, where the format has them) the five columns F-namespace,
-- F-pod, F-pod-uid, F-node and F-match that
--
--     kubectl ptp enrich --history-file EXPORT_DIR --skew 1s [-n NS] FLOWS
--
-- appends, with the same answers (docs/sql/README.md says what is equal
-- and where; hack/sqlcheck compares the two record by record).
--
-- Run it with the DuckDB CLI (duckdb < docs/sql/duckdb.sql) after setting
-- the parameters below; the last statement's rows are the answer.

-- ---------------------------------------------------------------------
-- Parameters
-- ---------------------------------------------------------------------

-- The exported tables: every file of one cluster's export (snapshots or
-- the hourly files of `export --state`; an archive of many runs is one
-- history).
SET VARIABLE ptp_holds    = 'exports/holds-*.parquet';
SET VARIABLE ptp_coverage = 'exports/coverage-*.parquet';
SET VARIABLE ptp_gaps     = 'exports/gaps-*.parquet';
-- The flow logs: VPC Flow Logs text files as delivered to S3 (gzip read
-- transparently), each beginning with its header line.
SET VARIABLE ptp_flows    = 'flowlogs/*.log.gz';
-- enrich --skew: how far the flow's clock and the controller's may
-- disagree. Each record's window is widened by it on both sides.
SET VARIABLE ptp_skew = INTERVAL 1 SECOND;
-- enrich -n: '' for the pods of every namespace, or one namespace's.
SET VARIABLE ptp_namespace = '';
-- The cluster column to read; NULL reads every row (files of one cluster).
SET VARIABLE ptp_cluster = NULL::VARCHAR;

-- ---------------------------------------------------------------------
-- Addresses
-- ---------------------------------------------------------------------

-- An address is matched by its value, not its spelling: enrich parses
-- both sides (netip), so 2001:DB8:0::1, 2001:db8::1 and the IPv4-mapped
-- ::ffff:10.0.0.1 (= 10.0.0.1) must meet. IPv6 becomes its 32 hex
-- digits, an IPv4-mapped one its IPv4, an IPv4 its octets without
-- leading zeros (enrich reads 010 as 10). What does not parse is kept as
-- is: it matches no exported address, as it matches none in enrich.
CREATE OR REPLACE TEMP MACRO ptp_ip6_groups(s) AS (
    CASE WHEN s LIKE '%::%' THEN list_concat(
             CASE WHEN split_part(s, '::', 1) = '' THEN []::VARCHAR[] ELSE string_split(split_part(s, '::', 1), ':') END,
             list_transform(range(8 - (CASE WHEN split_part(s, '::', 1) = '' THEN 0 ELSE len(string_split(split_part(s, '::', 1), ':')) END)
                                    - (CASE WHEN split_part(s, '::', 2) = '' THEN 0 ELSE len(string_split(split_part(s, '::', 2), ':')) END)),
                            lambda i: '0'),
             CASE WHEN split_part(s, '::', 2) = '' THEN []::VARCHAR[] ELSE string_split(split_part(s, '::', 2), ':') END)
         ELSE string_split(s, ':') END);

-- The trailing dotted quad of ::ffff:1.2.3.4 as two hex groups.
CREATE OR REPLACE TEMP MACRO ptp_ip6_dotted(s) AS (
    CASE WHEN regexp_full_match(s, '.*:[0-9]{1,3}(\.[0-9]{1,3}){3}')
         THEN regexp_extract(s, '^(.*:)[0-9.]+$', 1) || format('{:x}:{:x}',
                  CAST(split_part(regexp_extract(s, '([0-9.]+)$', 1), '.', 1) AS INTEGER) * 256 + CAST(split_part(regexp_extract(s, '([0-9.]+)$', 1), '.', 2) AS INTEGER),
                  CAST(split_part(regexp_extract(s, '([0-9.]+)$', 1), '.', 3) AS INTEGER) * 256 + CAST(split_part(regexp_extract(s, '([0-9.]+)$', 1), '.', 4) AS INTEGER))
         ELSE s END);

CREATE OR REPLACE TEMP MACRO ptp_ip6_hex(a) AS (
    CASE WHEN len(ptp_ip6_groups(ptp_ip6_dotted(lower(split_part(a, '%', 1))))) = 8
          AND list_bool_and(list_transform(ptp_ip6_groups(ptp_ip6_dotted(lower(split_part(a, '%', 1)))),
                                           lambda g: regexp_full_match(g, '[0-9a-f]{1,4}')))
         THEN array_to_string(list_transform(ptp_ip6_groups(ptp_ip6_dotted(lower(split_part(a, '%', 1)))),
                                             lambda g: lpad(g, 4, '0')), '')
    END);

CREATE OR REPLACE TEMP MACRO ptp_ip4(a) AS (
    CASE WHEN regexp_full_match(a, '[0-9]{1,3}(\.[0-9]{1,3}){3}')
          AND list_bool_and(list_transform(string_split(a, '.'), lambda o: CAST(o AS INTEGER) <= 255))
         THEN array_to_string(list_transform(string_split(a, '.'), lambda o: CAST(CAST(o AS INTEGER) AS VARCHAR)), '.')
    END);

CREATE OR REPLACE TEMP MACRO ptp_ip(a) AS (
    CASE WHEN a IS NULL THEN NULL
         WHEN ptp_ip4(a) IS NOT NULL THEN ptp_ip4(a)
         WHEN ptp_ip6_hex(a) LIKE '00000000000000000000ffff%' THEN
              array_to_string(list_transform(range(4),
                  lambda i: CAST(CAST(('0x' || substr(ptp_ip6_hex(a), 25 + 2 * i, 2)) AS INTEGER) AS VARCHAR)), '.')
         WHEN ptp_ip6_hex(a) IS NOT NULL THEN ptp_ip6_hex(a)
         ELSE a END);

-- Times are compared as Unix nanoseconds, as enrich compares them: the
-- exported times are milliseconds, a record's seconds, the skew anything.
CREATE OR REPLACE TEMP MACRO ptp_ns(t) AS epoch_ms(t) * 1000000;
-- An end that is not there (a hold that lasts, no endedAfter): later
-- than any time, and never used in arithmetic.
CREATE OR REPLACE TEMP MACRO ptp_never() AS 9223372036854775807;

-- ---------------------------------------------------------------------
-- The history, as enrich reads an export
-- ---------------------------------------------------------------------

-- Every hold row of the cluster. The namespace is not filtered here: an
-- open gap is void only through a hold of its pod that enrich keeps,
-- which the join below asks for itself. filename and file_row_number
-- keep the order enrich reads the rows in: it breaks ties between holds
-- that start in the same millisecond, and names a pod as its first row
-- does.
CREATE OR REPLACE TEMP TABLE ptp_hold AS
SELECT ptp_ip(address)                                   AS ip,
       namespace, pod, podUID                            AS pod_uid, node,
       ptp_ns("from")                                    AS from_ns,
       COALESCE(ptp_ns("to"), ptp_never())               AS to_ns,
       "to" IS NULL                                      AS lasts,
       COALESCE(ptp_ns(startedBefore), -ptp_never())     AS started_before_ns,
       -- enrich: uncertain from terminatingSince on, as from endedAfter.
       LEAST(COALESCE(ptp_ns(endedAfter), ptp_never()),
             COALESCE(ptp_ns(terminatingSince), ptp_never())) AS ended_after_ns,
       filename, file_row_number
FROM read_parquet(getvariable('ptp_holds'), filename = true, file_row_number = true)
WHERE getvariable('ptp_cluster') IS NULL OR cluster = getvariable('ptp_cluster');

-- The holds enrich keeps: those of the namespace asked about.
CREATE OR REPLACE TEMP VIEW ptp_kept AS
SELECT * FROM ptp_hold
WHERE getvariable('ptp_namespace') = '' OR namespace = getvariable('ptp_namespace');

-- A pod is printed as the first row that named it (enrich keys pods by
-- UID and keeps the text it read first), "-" for what is empty.
CREATE OR REPLACE TEMP TABLE ptp_pod AS
SELECT pod_uid,
       arg_min(CASE WHEN namespace = '' THEN '-' ELSE left(namespace, 253) END, (filename, file_row_number)) AS namespace,
       arg_min(CASE WHEN pod = '' THEN '-' ELSE left(pod, 253) END, (filename, file_row_number))             AS pod,
       arg_min(CASE WHEN pod_uid = '' THEN '-' ELSE left(pod_uid, 253) END, (filename, file_row_number))     AS uid,
       arg_min(CASE WHEN COALESCE(node, '') = '' THEN '-' ELSE left(node, 253) END, (filename, file_row_number)) AS node
FROM ptp_kept
GROUP BY pod_uid;

-- The covered time. enrich joins a scope's rows that overlap or lie a
-- millisecond apart into one interval: an hourly run's rows begin a
-- millisecond after the last run's end, and the history vouched for the
-- instants between. Only the coverage of all namespaces vouches for a
-- question about all of them; a namespace's vouches for that namespace
-- only (-n), as in who-had.
CREATE OR REPLACE TEMP TABLE ptp_coverage_row AS
SELECT scope, ptp_ns("from") AS from_ns, ptp_ns(until) AS until_ns
FROM read_parquet(getvariable('ptp_coverage'))
WHERE (getvariable('ptp_cluster') IS NULL OR cluster = getvariable('ptp_cluster'))
  AND (scope = '' OR scope = getvariable('ptp_namespace'))
  AND "from" <= until;

-- How far the history is proven: a hold that lasts is certain up to
-- there only (its pod may have let go since, unseen). NULL when nothing
-- vouches: a hold that lasts is then never certain.
CREATE OR REPLACE TEMP TABLE ptp_covered_until AS
SELECT max(until_ns) AS until_ns FROM ptp_coverage_row;

-- The scopes' intervals make one set of covered instants: enrich walks a
-- window instant by instant through either scope's intervals, so two
-- intervals continue each other only if they overlap or touch (the next
-- starts at most a nanosecond after the last ends), across scopes.
CREATE OR REPLACE TEMP TABLE ptp_covered AS
WITH joined AS (   -- within a scope: a millisecond apart is one
    SELECT scope, from_ns, until_ns,
           sum(CASE WHEN from_ns <= prev + 1000000 THEN 0 ELSE 1 END)
               OVER (PARTITION BY scope ORDER BY from_ns, until_ns ROWS UNBOUNDED PRECEDING) AS island
    FROM (SELECT *, max(until_ns) OVER (PARTITION BY scope ORDER BY from_ns, until_ns
                                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev
          FROM ptp_coverage_row)
), per_scope AS (
    SELECT scope, min(from_ns) AS from_ns, max(until_ns) AS until_ns FROM joined GROUP BY scope, island
), across AS (     -- across scopes: only what touches is one
    SELECT from_ns, until_ns,
           sum(CASE WHEN from_ns <= prev + 1 THEN 0 ELSE 1 END)
               OVER (ORDER BY from_ns, until_ns ROWS UNBOUNDED PRECEDING) AS island
    FROM (SELECT *, max(until_ns) OVER (ORDER BY from_ns, until_ns
                                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev
          FROM per_scope)
)
SELECT min(from_ns) AS from_ns, max(until_ns) AS until_ns FROM across GROUP BY island;

-- Where an address's holds are not complete, [from, until): an overflow,
-- the time before its IPHistory answers for, and an incremental run's
-- open gap of a hold it could not write yet. An open gap is void once a
-- hold of its pod (one enrich keeps) spans it: a later run wrote that
-- hold when it ended. A gap that is empty (from = until) holds no instant.
CREATE OR REPLACE TEMP TABLE ptp_gap AS
SELECT g.ip, g.from_ns, g.until_ns
FROM (SELECT ptp_ip(address) AS ip, reason, podUID AS pod_uid, ptp_ns("from") AS from_ns,
             COALESCE(ptp_ns(until), ptp_never()) AS until_ns, until IS NULL AS lasts
      FROM read_parquet(getvariable('ptp_gaps'), union_by_name = true)
      WHERE (getvariable('ptp_cluster') IS NULL OR cluster = getvariable('ptp_cluster'))
        -- An open gap of another namespace's pod: that hold is not asked about.
        AND (reason <> 'open' OR getvariable('ptp_namespace') = '' OR namespace = getvariable('ptp_namespace'))) AS g
WHERE g.from_ns < g.until_ns
  AND NOT (g.reason = 'open' AND EXISTS (
        SELECT 1 FROM ptp_kept AS h
        WHERE h.ip = g.ip AND h.pod_uid = g.pod_uid AND NOT h.lasts
          AND h.from_ns <= g.from_ns AND NOT g.lasts AND h.to_ns >= g.until_ns));

-- ---------------------------------------------------------------------
-- The flow records
-- ---------------------------------------------------------------------

-- One row per record, numbered: the answers are joined back to it. The
-- text is read as text: enrich tells a "-" from a time it cannot read.
CREATE OR REPLACE TEMP TABLE ptp_flow AS
SELECT row_number() OVER () AS ptp_rec, *
FROM read_csv(getvariable('ptp_flows'), delim = ' ', header = true, all_varchar = true,
              union_by_name = true, quote = '', escape = '');
-- For flow logs delivered as Parquet, whose columns are named with "_"
-- and where a missing value is NULL, read them as the text would be:
--   SELECT row_number() OVER () AS ptp_rec,
--          * EXCLUDE ("start", "end", log_status, pkt_srcaddr, pkt_dstaddr),
--          COALESCE(CAST("start" AS VARCHAR), '-') AS "start",
--          COALESCE(CAST("end" AS VARCHAR), '-') AS "end",
--          log_status AS "log-status", pkt_srcaddr AS "pkt-srcaddr", pkt_dstaddr AS "pkt-dstaddr"
--   FROM read_parquet('flowlogs/*.parquet')
-- (leave out pkt_srcaddr and pkt_dstaddr if the format has none).

-- A record's window, [start, max(start, end)] in nanoseconds, as enrich
-- reads it: NODATA and SKIPDATA records, and those whose start and end
-- are both "-", have no address to look up ("-" in every column); any
-- other time that is not Unix seconds makes the record unparsed (enrich
-- passes it through without columns: NULL here).
CREATE OR REPLACE TEMP TABLE ptp_field_read AS
WITH rec AS (
    SELECT ptp_rec,
           COALESCE("log-status" IN ('NODATA', 'SKIPDATA'), false)
               OR COALESCE(start = '-' AND "end" = '-', false)               AS skipped,
           CASE WHEN regexp_full_match(start, '[0-9]{1,11}') THEN CAST(start AS BIGINT) * 1000000000 END AS start_ns,
           CASE WHEN regexp_full_match("end", '[0-9]{1,11}') THEN CAST("end" AS BIGINT) * 1000000000 END AS end_ns,
           COLUMNS('^(srcaddr|dstaddr|pkt-srcaddr|pkt-dstaddr)$')
    FROM ptp_flow
), addr AS (
    -- One row per address field; a NULL address is kept, as "-".
    SELECT * FROM rec
    UNPIVOT INCLUDE NULLS (address FOR field IN (COLUMNS('^(srcaddr|dstaddr|pkt-srcaddr|pkt-dstaddr)$')))
)
SELECT ptp_rec, field, address,
       CASE WHEN skipped THEN 'skipped'
            WHEN start_ns IS NULL OR end_ns IS NULL THEN 'unparsed'
            WHEN COALESCE(address, '') IN ('', '-') THEN 'skipped'
            ELSE 'lookup' END                                                AS what,
       -- F, T: the record's window; S the skew; [wf, wt] the window
       -- widened by it, over which holders are looked for.
       start_ns                                                              AS f,
       GREATEST(start_ns, end_ns)                                            AS t,
       epoch_us(TIMESTAMP '1970-01-01' + getvariable('ptp_skew')) * 1000     AS s,
       start_ns - epoch_us(TIMESTAMP '1970-01-01' + getvariable('ptp_skew')) * 1000 AS wf,
       GREATEST(start_ns, end_ns) + epoch_us(TIMESTAMP '1970-01-01' + getvariable('ptp_skew')) * 1000 AS wt
FROM addr;

-- Each spelling of an address is parsed once: a flow log repeats few
-- addresses many times.
CREATE OR REPLACE TEMP TABLE ptp_field AS
SELECT q.*, a.ip
FROM ptp_field_read AS q
LEFT JOIN (SELECT address, ptp_ip(address) AS ip
           FROM (SELECT DISTINCT address FROM ptp_field_read WHERE address IS NOT NULL)) AS a USING (address);

-- ---------------------------------------------------------------------
-- The answers
-- ---------------------------------------------------------------------

-- The holds that meet the widened window [wf, wt]: a hold [from, to)
-- holds at t when from <= t < to. For each, the part of the window where
-- who-had would call it certain begins at the latest of wf, from and
-- startedBefore (certain_from), and ends at wt, before to, before
-- endedAfter or terminatingSince, and, for a hold that lasts, at how far
-- the history is proven. The hold is uncertain when that part is not all
-- it meets of the window:
--   - the window meets the band its start lies in (from..startedBefore);
--   - the window reaches the band its end lies in (endedAfter..to), or
--     the pod's termination;
--   - it lasts beyond how far the history is proven, or nothing vouches;
-- or when the window, shifted within the skew, could miss it: its
-- certain part begins after the record's end minus the skew, or it ended
-- by the record's start plus the skew. A pod that let go of the address
-- just before a record's start held it during the record only if the
-- flow's clock ran ahead, which nothing shows. (An end band that begins
-- by the record's start plus the skew, which enrich also asks about, is
-- caught by the second rule or the last one.)
CREATE OR REPLACE TEMP TABLE ptp_found AS
SELECT q.ptp_rec, q.field, h.pod_uid, h.from_ns, h.to_ns, h.lasts, h.ended_after_ns,
       GREATEST(q.wf, h.from_ns, h.started_before_ns)                          AS certain_from,
       row_number() OVER (PARTITION BY q.ptp_rec, q.field
                          ORDER BY h.from_ns, h.filename, h.file_row_number)   AS ord,
       (   h.started_before_ns > GREATEST(q.wf, h.from_ns)
        OR (h.ended_after_ns <= q.wt AND h.ended_after_ns < h.to_ns)
        OR (h.lasts AND (c.until_ns IS NULL OR q.wt > c.until_ns))
        OR GREATEST(q.wf, h.from_ns, h.started_before_ns) > q.t - q.s
        OR (NOT h.lasts AND h.to_ns <= q.f + q.s)) AS uncertain,
       q.wt, c.until_ns AS covered_until
FROM ptp_field AS q
JOIN ptp_kept AS h ON h.ip = q.ip
CROSS JOIN ptp_covered_until AS c
WHERE q.what = 'lookup'
  AND h.from_ns <= q.wt AND q.wf < h.to_ns AND h.from_ns < h.to_ns;

-- Two pods conflict where both are certain at one instant of the window,
-- unless one handed the address over to the other: the one that started
-- first (with the same start, the one that ended first) ended no more
-- than a second after the other started (history.HandedOver).
CREATE OR REPLACE TEMP TABLE ptp_conflict AS
SELECT DISTINCT p.ptp_rec, p.field
FROM ptp_found AS p
JOIN ptp_found AS q ON q.ptp_rec = p.ptp_rec AND q.field = p.field AND q.ord > p.ord AND q.pod_uid <> p.pod_uid
CROSS JOIN LATERAL (SELECT GREATEST(p.certain_from, q.certain_from) AS m) AS o
CROSS JOIN LATERAL (SELECT CASE WHEN p.from_ns < q.from_ns THEN p.to_ns
                                WHEN q.from_ns < p.from_ns THEN q.to_ns
                                ELSE LEAST(p.to_ns, q.to_ns) END AS first_to) AS hand
WHERE o.m <= p.wt
  AND o.m < p.to_ns AND o.m < p.ended_after_ns AND (NOT p.lasts OR o.m <= p.covered_until)
  AND o.m < q.to_ns AND o.m < q.ended_after_ns AND (NOT q.lasts OR o.m <= q.covered_until)
  AND (first_to = ptp_never() OR first_to - GREATEST(p.from_ns, q.from_ns) > 1000000000);

-- The holders, ordered by their first hold in the window.
CREATE OR REPLACE TEMP TABLE ptp_holders AS
SELECT f.ptp_rec, f.field,
       count(*)                                                AS pods,
       string_agg(p.namespace, ',' ORDER BY f.first_ord)       AS namespace,
       string_agg(p.pod, ',' ORDER BY f.first_ord)             AS pod,
       string_agg(p.uid, ',' ORDER BY f.first_ord)             AS uid,
       string_agg(p.node, ',' ORDER BY f.first_ord)            AS node,
       bool_or(f.uncertain)                                    AS uncertain
FROM (SELECT ptp_rec, field, pod_uid, min(ord) AS first_ord, bool_or(uncertain) AS uncertain
      FROM ptp_found GROUP BY ptp_rec, field, pod_uid) AS f
JOIN ptp_pod AS p USING (pod_uid)
GROUP BY f.ptp_rec, f.field;

-- Each address field's five columns. The history vouches for the window
-- when every instant of it is covered and none lies in a gap of the
-- address.
CREATE OR REPLACE TEMP TABLE ptp_answer AS
SELECT q.ptp_rec, q.field,
       CASE q.what WHEN 'skipped' THEN '-' WHEN 'lookup' THEN COALESCE(h.namespace, '-') END AS namespace,
       CASE q.what WHEN 'skipped' THEN '-' WHEN 'lookup' THEN COALESCE(h.pod, '-') END       AS pod,
       CASE q.what WHEN 'skipped' THEN '-' WHEN 'lookup' THEN COALESCE(h.uid, '-') END       AS pod_uid,
       CASE q.what WHEN 'skipped' THEN '-' WHEN 'lookup' THEN COALESCE(h.node, '-') END      AS node,
       CASE
         WHEN q.what = 'skipped' THEN '-'
         WHEN q.what = 'unparsed' THEN NULL
         WHEN h.pods IS NULL AND v.covered THEN 'none'
         WHEN h.pods IS NULL THEN 'not-covered'
         WHEN x.ptp_rec IS NOT NULL THEN 'conflict'
         WHEN NOT v.covered OR h.uncertain THEN 'uncertain'
         WHEN h.pods > 1 THEN 'handover'
         ELSE 'certain'
       END AS match
FROM ptp_field AS q
LEFT JOIN ptp_holders AS h USING (ptp_rec, field)
LEFT JOIN ptp_conflict AS x USING (ptp_rec, field)
CROSS JOIN LATERAL (
    SELECT EXISTS (SELECT 1 FROM ptp_covered AS c WHERE c.from_ns <= q.wf AND q.wt <= c.until_ns)
       AND NOT EXISTS (SELECT 1 FROM ptp_gap AS g
                       WHERE g.ip = q.ip AND g.from_ns <= q.wt AND GREATEST(q.wf, g.from_ns) < g.until_ns) AS covered
) AS v;

-- The records with their columns appended, in their order. A field the
-- flow logs' format lacks has NULL columns.
SELECT r.*,
       a."srcaddr-namespace", a."srcaddr-pod", a."srcaddr-pod-uid", a."srcaddr-node", a."srcaddr-match",
       a."dstaddr-namespace", a."dstaddr-pod", a."dstaddr-pod-uid", a."dstaddr-node", a."dstaddr-match",
       a."pkt-srcaddr-namespace", a."pkt-srcaddr-pod", a."pkt-srcaddr-pod-uid", a."pkt-srcaddr-node", a."pkt-srcaddr-match",
       a."pkt-dstaddr-namespace", a."pkt-dstaddr-pod", a."pkt-dstaddr-pod-uid", a."pkt-dstaddr-node", a."pkt-dstaddr-match"
FROM ptp_flow AS r
LEFT JOIN (
    SELECT ptp_rec,
           max(namespace) FILTER (WHERE field = 'srcaddr')     AS "srcaddr-namespace",
           max(pod)       FILTER (WHERE field = 'srcaddr')     AS "srcaddr-pod",
           max(pod_uid)   FILTER (WHERE field = 'srcaddr')     AS "srcaddr-pod-uid",
           max(node)      FILTER (WHERE field = 'srcaddr')     AS "srcaddr-node",
           max(match)     FILTER (WHERE field = 'srcaddr')     AS "srcaddr-match",
           max(namespace) FILTER (WHERE field = 'dstaddr')     AS "dstaddr-namespace",
           max(pod)       FILTER (WHERE field = 'dstaddr')     AS "dstaddr-pod",
           max(pod_uid)   FILTER (WHERE field = 'dstaddr')     AS "dstaddr-pod-uid",
           max(node)      FILTER (WHERE field = 'dstaddr')     AS "dstaddr-node",
           max(match)     FILTER (WHERE field = 'dstaddr')     AS "dstaddr-match",
           max(namespace) FILTER (WHERE field = 'pkt-srcaddr') AS "pkt-srcaddr-namespace",
           max(pod)       FILTER (WHERE field = 'pkt-srcaddr') AS "pkt-srcaddr-pod",
           max(pod_uid)   FILTER (WHERE field = 'pkt-srcaddr') AS "pkt-srcaddr-pod-uid",
           max(node)      FILTER (WHERE field = 'pkt-srcaddr') AS "pkt-srcaddr-node",
           max(match)     FILTER (WHERE field = 'pkt-srcaddr') AS "pkt-srcaddr-match",
           max(namespace) FILTER (WHERE field = 'pkt-dstaddr') AS "pkt-dstaddr-namespace",
           max(pod)       FILTER (WHERE field = 'pkt-dstaddr') AS "pkt-dstaddr-pod",
           max(pod_uid)   FILTER (WHERE field = 'pkt-dstaddr') AS "pkt-dstaddr-pod-uid",
           max(node)      FILTER (WHERE field = 'pkt-dstaddr') AS "pkt-dstaddr-node",
           max(match)     FILTER (WHERE field = 'pkt-dstaddr') AS "pkt-dstaddr-match"
    FROM ptp_answer GROUP BY ptp_rec
) AS a USING (ptp_rec)
ORDER BY r.ptp_rec;
