-- Attribute the addresses of GCP VPC Flow Logs to pods, in BigQuery
-- (GoogleSQL, run as one script), from the files of
-- `kubectl ptp export -o parquet` copied to Cloud Storage: for every log
-- entry and each of its address fields F (jsonPayload.connection.src_ip
-- and dest_ip) the five columns F-namespace, F-pod, F-pod-uid, F-node
-- and F-match that
--
--     kubectl ptp enrich --history-file EXPORT_DIR --skew 1s [-n NS] --format gcp-vpc FLOWS
--
-- gives, by the same rules; they are named src_ip_namespace, ...,
-- dest_ip_match here (BigQuery column names take no "-" or "."). This is a
-- translation of docs/sql/duckdb.sql, which is tested against enrich
-- record by record (hack/sqlcheck); docs/sql/README.md says where the
-- engines differ.
--
-- Replace PROJECT, BUCKET and the dataset names (ptp, logs), set the
-- variables below, and run the whole script: the last statement's rows
-- are the answer.

-- ---------------------------------------------------------------------
-- Parameters
-- ---------------------------------------------------------------------

-- enrich --skew: how far the flow's clock and the controller's may
-- disagree. Each entry's window is widened by it on both sides.
DECLARE skew INTERVAL DEFAULT INTERVAL 1 SECOND;
-- enrich -n: '' for the pods of every namespace, or one namespace's.
DECLARE namespace_asked STRING DEFAULT '';
-- The cluster column to read; NULL reads every row (files of one cluster).
DECLARE cluster_name STRING DEFAULT NULL;

-- Times are compared as Unix microseconds, BigQuery's TIMESTAMP: the
-- exported times are milliseconds. NEVER stands for an end that is not
-- there (a hold that lasts, no endedAfter) and is never used in
-- arithmetic.
DECLARE skew_us INT64 DEFAULT UNIX_MICROS(TIMESTAMP '1970-01-01 00:00:00+00' + skew);
DECLARE never INT64 DEFAULT 9223372036854775807;

-- ---------------------------------------------------------------------
-- Tables
-- ---------------------------------------------------------------------

-- The exported tables, over the files in Cloud Storage (e.g. gsutil -m
-- rsync /exports gs://BUCKET/ptp/). The schema is the files': times are
-- TIMESTAMP (UTC, to the millisecond), "to" and "until" NULL while a hold
-- or a gap lasts.
CREATE EXTERNAL TABLE IF NOT EXISTS ptp.holds
OPTIONS (format = 'PARQUET', uris = ['gs://BUCKET/ptp/holds-*.parquet']);
CREATE EXTERNAL TABLE IF NOT EXISTS ptp.coverage
OPTIONS (format = 'PARQUET', uris = ['gs://BUCKET/ptp/coverage-*.parquet']);
CREATE EXTERNAL TABLE IF NOT EXISTS ptp.gaps
OPTIONS (format = 'PARQUET', uris = ['gs://BUCKET/ptp/gaps-*.parquet']);

-- VPC Flow Logs as a Cloud Logging sink exports them to BigQuery. The
-- sink creates the table (compute_googleapis_com_vpc_flows, partitioned
-- by day; or one table a day, compute_googleapis_com_vpc_flows_YYYYMMDD,
-- read with a wildcard); this statement only states the part of its
-- schema the query reads, and makes an empty one to try the query on.
CREATE TABLE IF NOT EXISTS logs.compute_googleapis_com_vpc_flows (
  logName     STRING,
  insertId    STRING,
  `timestamp` TIMESTAMP,
  jsonPayload STRUCT<
    connection STRUCT<src_ip STRING, dest_ip STRING, src_port INT64, dest_port INT64, protocol INT64>,
    start_time TIMESTAMP,
    end_time   TIMESTAMP,
    bytes_sent INT64,
    packets_sent INT64,
    reporter   STRING>
)
PARTITION BY DATE(`timestamp`);

-- ---------------------------------------------------------------------
-- Addresses
-- ---------------------------------------------------------------------

-- An address is matched by its value, not its spelling, as enrich parses
-- both sides: 2001:DB8::1 is 2001:db8::1, and an IPv4-mapped IPv6 address
-- (::ffff:10.0.0.1) is its IPv4 one. A zone (%eth0) is dropped. What does
-- not parse is NULL, and matches no exported address, as in enrich.
CREATE TEMP FUNCTION ptp_ip(a STRING) AS ((
  SELECT IF(LENGTH(b) = 16 AND SUBSTR(b, 1, 12) = FROM_HEX('00000000000000000000ffff'), SUBSTR(b, 13), b)
  FROM UNNEST([NET.SAFE_IP_FROM_STRING(SPLIT(a, '%')[SAFE_OFFSET(0)])]) AS b
));

-- ---------------------------------------------------------------------
-- The history, as enrich reads an export
-- ---------------------------------------------------------------------

-- Every hold row of the cluster. _FILE_NAME keeps, as far as BigQuery
-- can, the order enrich reads rows in (by file).
CREATE TEMP TABLE ptp_hold AS
SELECT ptp_ip(h.address)                                         AS ip,
       h.namespace, h.pod, h.podUID AS pod_uid, h.node,
       UNIX_MICROS(h.`from`)                                     AS from_us,
       COALESCE(UNIX_MICROS(h.`to`), never)                      AS to_us,
       h.`to` IS NULL                                            AS lasts,
       COALESCE(UNIX_MICROS(h.startedBefore), -never)            AS started_before_us,
       -- enrich: uncertain from terminatingSince on, as from endedAfter.
       LEAST(COALESCE(UNIX_MICROS(h.endedAfter), never),
             COALESCE(UNIX_MICROS(h.terminatingSince), never))   AS ended_after_us,
       h._FILE_NAME                                              AS path
FROM ptp.holds AS h
WHERE cluster_name IS NULL OR h.cluster = cluster_name;

-- The holds enrich keeps: those of the namespace asked about.
CREATE TEMP TABLE ptp_kept AS
SELECT * FROM ptp_hold WHERE namespace_asked = '' OR namespace = namespace_asked;

-- A pod is printed as the first file that named it says (enrich keys
-- pods by UID and keeps the text it read first), "-" for what is empty.
CREATE TEMP TABLE ptp_pod AS
SELECT pod_uid,
       ARRAY_AGG(IF(namespace = '', '-', SUBSTR(namespace, 1, 253)) ORDER BY path LIMIT 1)[OFFSET(0)] AS namespace,
       ARRAY_AGG(IF(pod = '', '-', SUBSTR(pod, 1, 253)) ORDER BY path LIMIT 1)[OFFSET(0)]             AS pod,
       ARRAY_AGG(IF(pod_uid = '', '-', SUBSTR(pod_uid, 1, 253)) ORDER BY path LIMIT 1)[OFFSET(0)]     AS uid,
       ARRAY_AGG(IF(COALESCE(node, '') = '', '-', SUBSTR(node, 1, 253)) ORDER BY path LIMIT 1)[OFFSET(0)] AS node
FROM ptp_kept
GROUP BY pod_uid;

-- The covered time. Only the coverage of all namespaces vouches for a
-- question about all of them; a namespace's vouches for that namespace
-- only (-n), as in who-had.
CREATE TEMP TABLE ptp_coverage_row AS
SELECT c.scope, UNIX_MICROS(c.`from`) AS from_us, UNIX_MICROS(c.until) AS until_us
FROM ptp.coverage AS c
WHERE (cluster_name IS NULL OR c.cluster = cluster_name)
  AND (c.scope = '' OR c.scope = namespace_asked)
  AND c.`from` <= c.until;

-- How far the history is proven: a hold that lasts is certain up to
-- there only (its pod may have let go since, unseen). NULL when nothing
-- vouches: a hold that lasts is then never certain.
CREATE TEMP TABLE ptp_covered_until AS
SELECT MAX(until_us) AS until_us FROM ptp_coverage_row;

-- enrich joins a scope's rows that overlap or lie a millisecond apart
-- (an hourly run's rows begin a millisecond after the last run's end,
-- and the history vouched for the instants between); then it walks a
-- window instant by instant through either scope's intervals, so across
-- scopes two intervals continue each other only if they overlap or
-- touch.
CREATE TEMP TABLE ptp_covered AS
WITH joined AS (
  SELECT scope, from_us, until_us,
         SUM(IF(from_us <= prev + 1000, 0, 1))
           OVER (PARTITION BY scope ORDER BY from_us, until_us ROWS UNBOUNDED PRECEDING) AS island
  FROM (SELECT *, MAX(until_us) OVER (PARTITION BY scope ORDER BY from_us, until_us
                                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev
        FROM ptp_coverage_row)
), per_scope AS (
  SELECT scope, MIN(from_us) AS from_us, MAX(until_us) AS until_us FROM joined GROUP BY scope, island
), across AS (
  SELECT from_us, until_us,
         SUM(IF(from_us <= prev, 0, 1)) OVER (ORDER BY from_us, until_us ROWS UNBOUNDED PRECEDING) AS island
  FROM (SELECT *, MAX(until_us) OVER (ORDER BY from_us, until_us
                                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev
        FROM per_scope)
)
SELECT MIN(from_us) AS from_us, MAX(until_us) AS until_us FROM across GROUP BY island;

-- Where an address's holds are not complete, [from, until): an overflow,
-- the time before its IPHistory answers for, and an incremental run's
-- open gap of a hold it could not write yet. An open gap is void once a
-- hold of its pod (one enrich keeps) spans it: a later run wrote that
-- hold when it ended.
CREATE TEMP TABLE ptp_gap AS
WITH gap_row AS (
  SELECT ptp_ip(g.address) AS ip, g.reason, g.podUID AS pod_uid,
         UNIX_MICROS(g.`from`) AS from_us, COALESCE(UNIX_MICROS(g.until), never) AS until_us,
         g.until IS NULL AS lasts
  FROM ptp.gaps AS g
  WHERE (cluster_name IS NULL OR g.cluster = cluster_name)
    -- An open gap of another namespace's pod: that hold is not asked about.
    AND (g.reason <> 'open' OR namespace_asked = '' OR g.namespace = namespace_asked)
)
SELECT g.ip, g.from_us, g.until_us
FROM gap_row AS g
LEFT JOIN ptp_kept AS h
       ON g.reason = 'open' AND h.ip = g.ip AND h.pod_uid = g.pod_uid AND NOT h.lasts
      AND h.from_us <= g.from_us AND NOT g.lasts AND h.to_us >= g.until_us
WHERE g.from_us < g.until_us
GROUP BY g.ip, g.from_us, g.until_us, g.reason, g.pod_uid
HAVING COUNT(h.pod_uid) = 0;

-- ---------------------------------------------------------------------
-- The flow log entries
-- ---------------------------------------------------------------------

-- One row per entry, numbered once: the answers are joined back to it.
-- Add a WHERE on `timestamp` to read only the days you need.
CREATE TEMP TABLE ptp_flow AS
SELECT ROW_NUMBER() OVER () AS ptp_rec, f.*
FROM logs.compute_googleapis_com_vpc_flows AS f;

-- One row per address field, and the entry's window as enrich reads it:
-- [start_time, max(start_time, end_time)] (F, T; end_time missing: T =
-- F), widened by the skew S to [wf, wt], over which holders are looked
-- for. An entry without a start_time is unparsed (enrich passes it
-- through without columns: NULL here); a missing address has "-" in
-- every column.
CREATE TEMP TABLE ptp_field AS
SELECT r.ptp_rec, u.field, u.address, ptp_ip(u.address) AS ip,
       CASE WHEN w.f IS NULL THEN 'unparsed'
            WHEN COALESCE(u.address, '') IN ('', '-') THEN 'skipped'
            ELSE 'lookup' END AS what,
       w.f, w.t, skew_us AS s, w.f - skew_us AS wf, w.t + skew_us AS wt
FROM ptp_flow AS r
CROSS JOIN UNNEST([STRUCT('src_ip' AS field, r.jsonPayload.connection.src_ip AS address),
                   STRUCT('dest_ip' AS field, r.jsonPayload.connection.dest_ip AS address)]) AS u
CROSS JOIN UNNEST([STRUCT(
    UNIX_MICROS(SAFE_CAST(r.jsonPayload.start_time AS TIMESTAMP)) AS f,
    GREATEST(UNIX_MICROS(SAFE_CAST(r.jsonPayload.start_time AS TIMESTAMP)),
             COALESCE(UNIX_MICROS(SAFE_CAST(r.jsonPayload.end_time AS TIMESTAMP)),
                      UNIX_MICROS(SAFE_CAST(r.jsonPayload.start_time AS TIMESTAMP)))) AS t)]) AS w;

-- ---------------------------------------------------------------------
-- The answers
-- ---------------------------------------------------------------------

WITH
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
found AS (
  SELECT q.ptp_rec, q.field, h.pod_uid, h.from_us, h.to_us, h.lasts, h.ended_after_us,
         q.wt, c.until_us AS covered_until,
         GREATEST(q.wf, h.from_us, h.started_before_us) AS certain_from,
         ROW_NUMBER() OVER (PARTITION BY q.ptp_rec, q.field ORDER BY h.from_us, h.path, h.pod_uid) AS ord,
         (   h.started_before_us > GREATEST(q.wf, h.from_us)
          OR (h.ended_after_us <= q.wt AND h.ended_after_us < h.to_us)
          OR (h.lasts AND (c.until_us IS NULL OR q.wt > c.until_us))
          OR GREATEST(q.wf, h.from_us, h.started_before_us) > q.t - q.s
          OR (NOT h.lasts AND h.to_us <= q.f + q.s)) AS uncertain
  FROM ptp_field AS q
  JOIN ptp_kept AS h ON h.ip = q.ip
  CROSS JOIN ptp_covered_until AS c
  WHERE q.what = 'lookup'
    AND h.from_us <= q.wt AND q.wf < h.to_us AND h.from_us < h.to_us
),

-- Two pods conflict where both are certain at one instant of the window,
-- unless one handed the address over to the other: the one that started
-- first (with the same start, the one that ended first) ended no more
-- than a second after the other started (history.HandedOver).
conflict AS (
  SELECT DISTINCT ptp_rec, field
  FROM (SELECT p.ptp_rec, p.field, p.wt, p.covered_until,
               GREATEST(p.certain_from, q.certain_from) AS m,
               p.to_us AS p_to, p.ended_after_us AS p_ea, p.lasts AS p_lasts,
               q.to_us AS q_to, q.ended_after_us AS q_ea, q.lasts AS q_lasts,
               CASE WHEN p.from_us < q.from_us THEN p.to_us
                    WHEN q.from_us < p.from_us THEN q.to_us
                    ELSE LEAST(p.to_us, q.to_us) END AS first_to,
               GREATEST(p.from_us, q.from_us) AS next_from
        FROM found AS p
        JOIN found AS q ON q.ptp_rec = p.ptp_rec AND q.field = p.field AND q.ord > p.ord AND q.pod_uid <> p.pod_uid)
  WHERE m <= wt
    AND m < p_to AND m < p_ea AND (NOT p_lasts OR m <= covered_until)
    AND m < q_to AND m < q_ea AND (NOT q_lasts OR m <= covered_until)
    AND (first_to = never OR first_to - next_from > 1000000)
),

-- The holders, ordered by their first hold in the window.
holders AS (
  SELECT f.ptp_rec, f.field, COUNT(*) AS pods,
         STRING_AGG(d.namespace, ',' ORDER BY f.first_ord) AS namespace,
         STRING_AGG(d.pod, ',' ORDER BY f.first_ord)       AS pod,
         STRING_AGG(d.uid, ',' ORDER BY f.first_ord)       AS uid,
         STRING_AGG(d.node, ',' ORDER BY f.first_ord)      AS node,
         LOGICAL_OR(f.uncertain)                           AS uncertain
  FROM (SELECT ptp_rec, field, pod_uid, MIN(ord) AS first_ord, LOGICAL_OR(uncertain) AS uncertain
        FROM found GROUP BY ptp_rec, field, pod_uid) AS f
  JOIN ptp_pod AS d ON d.pod_uid = f.pod_uid
  GROUP BY f.ptp_rec, f.field
),

-- The history vouches for a window when every instant of it is covered
-- and none lies in a gap of the address.
in_coverage AS (
  SELECT DISTINCT q.ptp_rec, q.field
  FROM ptp_field AS q JOIN ptp_covered AS c ON c.from_us <= q.wf AND q.wt <= c.until_us
  WHERE q.what = 'lookup'
),
in_gap AS (
  SELECT DISTINCT q.ptp_rec, q.field
  FROM ptp_field AS q JOIN ptp_gap AS g ON g.ip = q.ip AND g.from_us <= q.wt AND GREATEST(q.wf, g.from_us) < g.until_us
  WHERE q.what = 'lookup'
),

answer AS (
  SELECT q.ptp_rec, q.field,
         CASE q.what WHEN 'skipped' THEN '-' WHEN 'lookup' THEN COALESCE(h.namespace, '-') END AS namespace,
         CASE q.what WHEN 'skipped' THEN '-' WHEN 'lookup' THEN COALESCE(h.pod, '-') END       AS pod,
         CASE q.what WHEN 'skipped' THEN '-' WHEN 'lookup' THEN COALESCE(h.uid, '-') END       AS pod_uid,
         CASE q.what WHEN 'skipped' THEN '-' WHEN 'lookup' THEN COALESCE(h.node, '-') END      AS node,
         CASE
           WHEN q.what = 'skipped' THEN '-'
           WHEN q.what = 'unparsed' THEN NULL
           WHEN h.pods IS NULL AND ic.ptp_rec IS NOT NULL AND ig.ptp_rec IS NULL THEN 'none'
           WHEN h.pods IS NULL THEN 'not-covered'
           WHEN x.ptp_rec IS NOT NULL THEN 'conflict'
           WHEN ic.ptp_rec IS NULL OR ig.ptp_rec IS NOT NULL OR h.uncertain THEN 'uncertain'
           WHEN h.pods > 1 THEN 'handover'
           ELSE 'certain'
         END AS match
  FROM ptp_field AS q
  LEFT JOIN holders     AS h  ON h.ptp_rec = q.ptp_rec AND h.field = q.field
  LEFT JOIN conflict    AS x  ON x.ptp_rec = q.ptp_rec AND x.field = q.field
  LEFT JOIN in_coverage AS ic ON ic.ptp_rec = q.ptp_rec AND ic.field = q.field
  LEFT JOIN in_gap      AS ig ON ig.ptp_rec = q.ptp_rec AND ig.field = q.field
),

-- Each address field's five columns on the entry's row.
per_record AS (
  SELECT ptp_rec,
         MAX(IF(field = 'src_ip', namespace, NULL))  AS src_ip_namespace,
         MAX(IF(field = 'src_ip', pod, NULL))        AS src_ip_pod,
         MAX(IF(field = 'src_ip', pod_uid, NULL))    AS src_ip_pod_uid,
         MAX(IF(field = 'src_ip', node, NULL))       AS src_ip_node,
         MAX(IF(field = 'src_ip', match, NULL))      AS src_ip_match,
         MAX(IF(field = 'dest_ip', namespace, NULL)) AS dest_ip_namespace,
         MAX(IF(field = 'dest_ip', pod, NULL))       AS dest_ip_pod,
         MAX(IF(field = 'dest_ip', pod_uid, NULL))   AS dest_ip_pod_uid,
         MAX(IF(field = 'dest_ip', node, NULL))      AS dest_ip_node,
         MAX(IF(field = 'dest_ip', match, NULL))     AS dest_ip_match
  FROM answer GROUP BY ptp_rec
)

SELECT r.*,
       a.src_ip_namespace, a.src_ip_pod, a.src_ip_pod_uid, a.src_ip_node, a.src_ip_match,
       a.dest_ip_namespace, a.dest_ip_pod, a.dest_ip_pod_uid, a.dest_ip_node, a.dest_ip_match
FROM ptp_flow AS r
LEFT JOIN per_record AS a USING (ptp_rec)
ORDER BY r.ptp_rec;
