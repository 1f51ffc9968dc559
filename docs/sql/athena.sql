-- Attribute the addresses of AWS VPC Flow Logs to pods, in Amazon Athena
-- (engine version 3, Trino SQL), from the files of
-- `kubectl ptp export -o parquet` copied to S3: for every record and each
-- of its address fields F (srcaddr, dstaddr; pkt-srcaddr and pkt-dstaddr
-- where the format has them) the five columns F-namespace, F-pod,
-- F-pod-uid, F-node and F-match that
--
--     kubectl ptp enrich --history-file EXPORT_DIR --skew 1s [-n NS] FLOWS
--
-- appends, by the same rules. docs/sql/duckdb.sql is the same query, tested
-- against enrich record by record (hack/sqlcheck); this one is a
-- translation of it, and docs/sql/README.md says where the two engines
-- differ.
--
-- Athena runs one statement at a time: run each CREATE once, then the
-- query at the end.

-- ---------------------------------------------------------------------
-- Tables
-- ---------------------------------------------------------------------

-- An Athena table reads every file under its LOCATION, so each exported
-- table needs a prefix of its own, e.g.:
--   aws s3 sync /exports s3://BUCKET/ptp/holds/    --exclude '*' --include 'holds-*.parquet'
--   aws s3 sync /exports s3://BUCKET/ptp/coverage/ --exclude '*' --include 'coverage-*.parquet'
--   aws s3 sync /exports s3://BUCKET/ptp/gaps/     --exclude '*' --include 'gaps-*.parquet'
-- Column names are matched to the Parquet files' (podUID, startedBefore,
-- ...) without regard to case. Times are UTC, to the millisecond.
CREATE EXTERNAL TABLE IF NOT EXISTS ptp_holds (
  cluster          string,
  address          string,
  family           string,
  namespace        string,
  pod              string,
  poduid           string,
  node             string,
  `from`           timestamp,
  `to`             timestamp,   -- NULL while the hold lasts
  startedbefore    timestamp,
  endedafter       timestamp,
  terminatingsince timestamp
)
STORED AS PARQUET
LOCATION 's3://BUCKET/ptp/holds/';

CREATE EXTERNAL TABLE IF NOT EXISTS ptp_coverage (
  cluster   string,
  scope     string,             -- '' for all namespaces
  `from`    timestamp,
  until     timestamp,
  retention bigint              -- seconds
)
STORED AS PARQUET
LOCATION 's3://BUCKET/ptp/coverage/';

CREATE EXTERNAL TABLE IF NOT EXISTS ptp_gaps (
  cluster string,
  address string,
  `from`  timestamp,
  until   timestamp,            -- NULL while it lasts
  reason  string,               -- overflow, unrecorded, open
  poduid  string,               -- the pod of an open gap
  namespace string              -- and its namespace
)
STORED AS PARQUET
LOCATION 's3://BUCKET/ptp/gaps/';

-- VPC Flow Logs delivered to S3 as text, in the default format (version
-- 2). start and end are read as text: enrich tells a "-" (no data: the
-- record is skipped) from a time it cannot read (the record is passed
-- through unparsed), which a bigint column would make NULL alike.
-- Athena reads the objects under LOCATION and its sub-prefixes (add
-- partition projection on the date for large logs).
CREATE EXTERNAL TABLE IF NOT EXISTS vpc_flow_logs (
  version      int,
  account_id   string,
  interface_id string,
  srcaddr      string,
  dstaddr      string,
  srcport      int,
  dstport      int,
  protocol     bigint,
  packets      bigint,
  bytes        bigint,
  `start`      string,
  `end`        string,
  action       string,
  log_status   string
)
ROW FORMAT DELIMITED FIELDS TERMINATED BY ' '
LOCATION 's3://BUCKET/AWSLogs/ACCOUNT/vpcflowlogs/REGION/'
TBLPROPERTIES ('skip.header.line.count' = '1');

-- The same logs delivered as Parquet (with pkt-srcaddr and pkt-dstaddr
-- if the flow log's custom format has them: their columns are
-- pkt_srcaddr and pkt_dstaddr). A missing value is NULL, where the text
-- has "-".
CREATE EXTERNAL TABLE IF NOT EXISTS vpc_flow_logs_parquet (
  version      int,
  account_id   string,
  interface_id string,
  srcaddr      string,
  dstaddr      string,
  srcport      int,
  dstport      int,
  protocol     bigint,
  packets      bigint,
  bytes        bigint,
  `start`      bigint,
  `end`        bigint,
  action       string,
  log_status   string,
  pkt_srcaddr  string,
  pkt_dstaddr  string
)
STORED AS PARQUET
LOCATION 's3://BUCKET/AWSLogs/ACCOUNT/vpcflowlogs/REGION/';

-- ---------------------------------------------------------------------
-- The query
-- ---------------------------------------------------------------------

WITH params AS (
    SELECT to_milliseconds(INTERVAL '1' SECOND) AS skew,   -- enrich --skew (whole milliseconds)
           ''                                   AS namespace, -- enrich -n; '' for every namespace
           CAST(NULL AS varchar)                AS cluster  -- the cluster column; NULL: every row (one cluster)
),

-- Times are compared as Unix milliseconds: the exported times are
-- milliseconds and a record's seconds, so every comparison enrich makes
-- in nanoseconds gives the same result. 9223372036854775807 stands for
-- an end that is not there (a hold that lasts, no endedAfter) and is
-- never used in arithmetic.
--
-- An address is matched by its value (IPADDRESS), not its spelling, as
-- enrich parses both sides: an IPv4-mapped IPv6 address is its IPv4 one.

-- Every hold row of the cluster. "$path" keeps, as far as Athena can,
-- the order enrich reads rows in (by file).
hold AS (
    SELECT TRY_CAST(split_part(h.address, '%', 1) AS IPADDRESS)                     AS ip,
           h.namespace, h.pod, h.poduid AS pod_uid, h.node,
           CAST(round(to_unixtime(h."from") * 1000) AS bigint)                       AS from_ms,
           COALESCE(CAST(round(to_unixtime(h."to") * 1000) AS bigint), 9223372036854775807) AS to_ms,
           h."to" IS NULL                                                            AS lasts,
           COALESCE(CAST(round(to_unixtime(h.startedbefore) * 1000) AS bigint), -9223372036854775807) AS started_before_ms,
           -- enrich: uncertain from terminatingSince on, as from endedAfter.
           LEAST(COALESCE(CAST(round(to_unixtime(h.endedafter) * 1000) AS bigint), 9223372036854775807),
                 COALESCE(CAST(round(to_unixtime(h.terminatingsince) * 1000) AS bigint), 9223372036854775807)) AS ended_after_ms,
           h."$path"                                                                 AS path
    FROM ptp_holds AS h CROSS JOIN params AS p
    WHERE p.cluster IS NULL OR h.cluster = p.cluster
),

-- The holds enrich keeps: those of the namespace asked about.
kept AS (
    SELECT h.* FROM hold AS h CROSS JOIN params AS p
    WHERE p.namespace = '' OR h.namespace = p.namespace
),

-- A pod is printed as the first file that named it says (enrich keys
-- pods by UID and keeps the text it read first), "-" for what is empty.
pod AS (
    SELECT pod_uid,
           min_by(CASE WHEN namespace = '' THEN '-' ELSE substr(namespace, 1, 253) END, path)  AS namespace,
           min_by(CASE WHEN pod = '' THEN '-' ELSE substr(pod, 1, 253) END, path)              AS pod,
           min_by(CASE WHEN pod_uid = '' THEN '-' ELSE substr(pod_uid, 1, 253) END, path)      AS uid,
           min_by(CASE WHEN COALESCE(node, '') = '' THEN '-' ELSE substr(node, 1, 253) END, path) AS node
    FROM kept GROUP BY pod_uid
),

-- The covered time. Only the coverage of all namespaces vouches for a
-- question about all of them; a namespace's vouches for that namespace
-- only (-n), as in who-had.
coverage_row AS (
    SELECT c.scope,
           CAST(round(to_unixtime(c."from") * 1000) AS bigint) AS from_ms,
           CAST(round(to_unixtime(c.until) * 1000) AS bigint)  AS until_ms
    FROM ptp_coverage AS c CROSS JOIN params AS p
    WHERE (p.cluster IS NULL OR c.cluster = p.cluster)
      AND (c.scope = '' OR c.scope = p.namespace)
      AND c."from" <= c.until
),

-- How far the history is proven: a hold that lasts is certain up to
-- there only (its pod may have let go since, unseen). NULL when nothing
-- vouches: a hold that lasts is then never certain.
covered_until AS (
    SELECT max(until_ms) AS until_ms FROM coverage_row
),

-- enrich joins a scope's rows that overlap or lie a millisecond apart:
-- an hourly run's rows begin a millisecond after the last run's end, and
-- the history vouched for the instants between.
scope_island AS (
    SELECT scope, from_ms, until_ms,
           sum(CASE WHEN from_ms <= prev + 1 THEN 0 ELSE 1 END)
               OVER (PARTITION BY scope ORDER BY from_ms, until_ms ROWS UNBOUNDED PRECEDING) AS island
    FROM (SELECT *, max(until_ms) OVER (PARTITION BY scope ORDER BY from_ms, until_ms
                                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev
          FROM coverage_row)
),
per_scope AS (
    SELECT scope, min(from_ms) AS from_ms, max(until_ms) AS until_ms
    FROM scope_island GROUP BY scope, island
),

-- enrich walks a window instant by instant through either scope's
-- intervals: across scopes, two intervals continue each other only if
-- they overlap or touch.
covered AS (
    SELECT min(from_ms) AS from_ms, max(until_ms) AS until_ms
    FROM (SELECT from_ms, until_ms,
                 sum(CASE WHEN from_ms <= prev THEN 0 ELSE 1 END)
                     OVER (ORDER BY from_ms, until_ms ROWS UNBOUNDED PRECEDING) AS island
          FROM (SELECT *, max(until_ms) OVER (ORDER BY from_ms, until_ms
                                              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev
                FROM per_scope))
    GROUP BY island
),

-- Where an address's holds are not complete, [from, until): an overflow,
-- the time before its IPHistory answers for, and an incremental run's
-- open gap of a hold it could not write yet. An open gap is void once a
-- hold of its pod (one enrich keeps) spans it: a later run wrote that
-- hold when it ended.
gap_row AS (
    SELECT TRY_CAST(split_part(g.address, '%', 1) AS IPADDRESS)                            AS ip,
           g.reason, g.poduid AS pod_uid,
           CAST(round(to_unixtime(g."from") * 1000) AS bigint)                              AS from_ms,
           COALESCE(CAST(round(to_unixtime(g.until) * 1000) AS bigint), 9223372036854775807) AS until_ms,
           g.until IS NULL                                                                  AS lasts
    FROM ptp_gaps AS g CROSS JOIN params AS p
    WHERE (p.cluster IS NULL OR g.cluster = p.cluster)
      -- An open gap of another namespace's pod: that hold is not asked about.
      AND (g.reason <> 'open' OR p.namespace = '' OR g.namespace = p.namespace)
),
gap AS (
    SELECT g.ip, g.from_ms, g.until_ms
    FROM gap_row AS g
    LEFT JOIN kept AS h
           ON g.reason = 'open' AND h.ip = g.ip AND h.pod_uid = g.pod_uid AND NOT h.lasts
          AND h.from_ms <= g.from_ms AND NOT g.lasts AND h.to_ms >= g.until_ms
    WHERE g.from_ms < g.until_ms
    GROUP BY g.ip, g.from_ms, g.until_ms, g.reason, g.pod_uid
    HAVING count(h.pod_uid) = 0
),

-- The records, numbered. Athena may evaluate a WITH query once for each
-- place that reads it, so the number must follow from the record itself:
-- the ORDER BY names every column, and records that tie are identical
-- and get the same answers. (Add a WHERE on the date, or partitions, to
-- read only the days you need.)
flow AS (
    SELECT row_number() OVER (ORDER BY "$path", interface_id, "start", "end", srcaddr, dstaddr, srcport, dstport,
                                       protocol, packets, bytes, action, log_status, account_id, version) AS ptp_rec,
           f.*
    FROM vpc_flow_logs AS f
    -- For vpc_flow_logs_parquet: select CAST("start" AS varchar) AS "start",
    -- CAST("end" AS varchar) AS "end", and add pkt_srcaddr and pkt_dstaddr
    -- to the ORDER BY, to the UNNEST below (as 'pkt-srcaddr' and
    -- 'pkt-dstaddr') and to per_record.
),

-- One row per address field, and the record's window as enrich reads it:
-- NODATA and SKIPDATA records, and those whose start and end are both
-- "-", have no address to look up ("-" in every column); any other time
-- that is not Unix seconds makes the record unparsed (enrich passes it
-- through without columns: NULL here). The window is [start, max(start,
-- end)] (F, T), widened by the skew S to [wf, wt], over which holders
-- are looked for.
field AS (
    SELECT r.ptp_rec, u.field, u.address,
           TRY_CAST(split_part(u.address, '%', 1) AS IPADDRESS) AS ip,
           CASE WHEN COALESCE(r.log_status IN ('NODATA', 'SKIPDATA'), false)
                  OR (COALESCE(r."start", '-') = '-' AND COALESCE(r."end", '-') = '-') THEN 'skipped'
                WHEN NOT (COALESCE(regexp_like(r."start", '^[0-9]{1,11}$'), false)
                          AND COALESCE(regexp_like(r."end", '^[0-9]{1,11}$'), false)) THEN 'unparsed'
                WHEN COALESCE(u.address, '') IN ('', '-') THEN 'skipped'
                ELSE 'lookup' END AS what,
           w.f, w.t, p.skew AS s, w.f - p.skew AS wf, w.t + p.skew AS wt
    FROM flow AS r
    CROSS JOIN params AS p
    CROSS JOIN UNNEST(ARRAY['srcaddr', 'dstaddr'], ARRAY[r.srcaddr, r.dstaddr]) AS u (field, address)
    CROSS JOIN LATERAL (
        SELECT TRY_CAST(r."start" AS bigint) * 1000 AS f,
               GREATEST(TRY_CAST(r."start" AS bigint), TRY_CAST(r."end" AS bigint)) * 1000 AS t
    ) AS w
),

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
    SELECT q.ptp_rec, q.field, h.pod_uid, h.from_ms, h.to_ms, h.lasts, h.ended_after_ms,
           q.wt, c.until_ms AS covered_until,
           GREATEST(q.wf, h.from_ms, h.started_before_ms) AS certain_from,
           row_number() OVER (PARTITION BY q.ptp_rec, q.field ORDER BY h.from_ms, h.path, h.pod_uid) AS ord,
           (   h.started_before_ms > GREATEST(q.wf, h.from_ms)
            OR (h.ended_after_ms <= q.wt AND h.ended_after_ms < h.to_ms)
            OR (h.lasts AND (c.until_ms IS NULL OR q.wt > c.until_ms))
            OR GREATEST(q.wf, h.from_ms, h.started_before_ms) > q.t - q.s
            OR (NOT h.lasts AND h.to_ms <= q.f + q.s)) AS uncertain
    FROM field AS q
    JOIN kept AS h ON h.ip = q.ip
    CROSS JOIN covered_until AS c
    WHERE q.what = 'lookup'
      AND h.from_ms <= q.wt AND q.wf < h.to_ms AND h.from_ms < h.to_ms
),

-- Two pods conflict where both are certain at one instant of the window,
-- unless one handed the address over to the other: the one that started
-- first (with the same start, the one that ended first) ended no more
-- than a second after the other started (history.HandedOver).
conflict AS (
    SELECT DISTINCT ptp_rec, field
    FROM (SELECT p.ptp_rec, p.field, p.wt,
                 GREATEST(p.certain_from, q.certain_from) AS m,
                 p.to_ms AS p_to, p.ended_after_ms AS p_ea, p.lasts AS p_lasts,
                 q.to_ms AS q_to, q.ended_after_ms AS q_ea, q.lasts AS q_lasts, p.covered_until,
                 CASE WHEN p.from_ms < q.from_ms THEN p.to_ms
                      WHEN q.from_ms < p.from_ms THEN q.to_ms
                      ELSE LEAST(p.to_ms, q.to_ms) END AS first_to,
                 GREATEST(p.from_ms, q.from_ms) AS next_from
          FROM found AS p
          JOIN found AS q ON q.ptp_rec = p.ptp_rec AND q.field = p.field AND q.ord > p.ord AND q.pod_uid <> p.pod_uid)
    WHERE m <= wt
      AND m < p_to AND m < p_ea AND (NOT p_lasts OR m <= covered_until)
      AND m < q_to AND m < q_ea AND (NOT q_lasts OR m <= covered_until)
      AND (first_to = 9223372036854775807 OR first_to - next_from > 1000)
),

-- The holders, ordered by their first hold in the window.
holders AS (
    SELECT f.ptp_rec, f.field, count(*) AS pods,
           array_join(array_agg(d.namespace ORDER BY f.first_ord), ',') AS namespace,
           array_join(array_agg(d.pod ORDER BY f.first_ord), ',')       AS pod,
           array_join(array_agg(d.uid ORDER BY f.first_ord), ',')       AS uid,
           array_join(array_agg(d.node ORDER BY f.first_ord), ',')      AS node,
           bool_or(f.uncertain)                                         AS uncertain
    FROM (SELECT ptp_rec, field, pod_uid, min(ord) AS first_ord, bool_or(uncertain) AS uncertain
          FROM found GROUP BY ptp_rec, field, pod_uid) AS f
    JOIN pod AS d ON d.pod_uid = f.pod_uid
    GROUP BY f.ptp_rec, f.field
),

-- The history vouches for a window when every instant of it is covered
-- and none lies in a gap of the address.
in_coverage AS (
    SELECT DISTINCT q.ptp_rec, q.field
    FROM field AS q JOIN covered AS c ON c.from_ms <= q.wf AND q.wt <= c.until_ms
    WHERE q.what = 'lookup'
),
in_gap AS (
    SELECT DISTINCT q.ptp_rec, q.field
    FROM field AS q JOIN gap AS g ON g.ip = q.ip AND g.from_ms <= q.wt AND GREATEST(q.wf, g.from_ms) < g.until_ms
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
    FROM field AS q
    LEFT JOIN holders     AS h  ON h.ptp_rec = q.ptp_rec AND h.field = q.field
    LEFT JOIN conflict    AS x  ON x.ptp_rec = q.ptp_rec AND x.field = q.field
    LEFT JOIN in_coverage AS ic ON ic.ptp_rec = q.ptp_rec AND ic.field = q.field
    LEFT JOIN in_gap      AS ig ON ig.ptp_rec = q.ptp_rec AND ig.field = q.field
),

-- Each address field's five columns on the record's row.
per_record AS (
    SELECT ptp_rec,
           max(CASE WHEN field = 'srcaddr' THEN namespace END) AS "srcaddr-namespace",
           max(CASE WHEN field = 'srcaddr' THEN pod END)       AS "srcaddr-pod",
           max(CASE WHEN field = 'srcaddr' THEN pod_uid END)   AS "srcaddr-pod-uid",
           max(CASE WHEN field = 'srcaddr' THEN node END)      AS "srcaddr-node",
           max(CASE WHEN field = 'srcaddr' THEN match END)     AS "srcaddr-match",
           max(CASE WHEN field = 'dstaddr' THEN namespace END) AS "dstaddr-namespace",
           max(CASE WHEN field = 'dstaddr' THEN pod END)       AS "dstaddr-pod",
           max(CASE WHEN field = 'dstaddr' THEN pod_uid END)   AS "dstaddr-pod-uid",
           max(CASE WHEN field = 'dstaddr' THEN node END)      AS "dstaddr-node",
           max(CASE WHEN field = 'dstaddr' THEN match END)     AS "dstaddr-match"
           -- With pkt_srcaddr and pkt_dstaddr: the same ten lines for them.
    FROM answer GROUP BY ptp_rec
)

SELECT r.*,
       a."srcaddr-namespace", a."srcaddr-pod", a."srcaddr-pod-uid", a."srcaddr-node", a."srcaddr-match",
       a."dstaddr-namespace", a."dstaddr-pod", a."dstaddr-pod-uid", a."dstaddr-node", a."dstaddr-match"
FROM flow AS r
LEFT JOIN per_record AS a ON a.ptp_rec = r.ptp_rec
ORDER BY r.ptp_rec;
