#!/usr/bin/env bash
# Side-by-side load comparison: ingestd against InfluxDB 1.6.7 and
# VictoriaMetrics (Debian's packages), in alternation, with `ingestd bench`.
#
#   deploy/bench/compare.sh            # 3 rounds on generated TSBS devops data
#   ROUNDS=5 DATA=/path/to/file.lp.gz deploy/bench/compare.sh
#   ROUNDS=1 GEN="--scale 2 --duration 30m" PATTERNS="inorder concurrent" SYSTEMS="ingestd influxdb" \
#     deploy/bench/compare.sh          # a quick smoke run on small generated data
#   SYSTEMS="ingestd ingestd-retention" PATTERNS=inorder GEN="--scale 100 --duration 4h" \
#     deploy/bench/compare.sh          # ingest with retention and GC running, and without
#
# PATTERNS (default "inorder concurrent resend backfill") chooses the
# measurements, SYSTEMS (default "ingestd influxdb victoriametrics") the
# servers. The load is the data `ingestd bench` generates (GEN: its
# --scale/--duration flags, default the TSBS devops shape, 10 hosts over
# 6 h, 194,400 lines; its timestamps start at START, default yesterday
# 00:00 UTC), or the ILP file DATA when set (e.g. TSBS's own
# tsbs-devops-s10-6h.lp.gz).
#
# ingestd-retention is the same binary with retention and the value-log
# collector busy: --default-retention 7d, --retention-sweep-interval 1s,
# --store-gc-interval 1s. Whenever it runs, both ingestd systems are first
# loaded with PRELOAD_ROWS (400,000) rows of another table, `aging`, whose
# times start AGING_LEAD (30 s) after the preload begins minus 1 h and
# span AGING_SPAN (90 s); ingestd-retention then gives `aging` a 1 h
# retention, so its sweeper removes those rows (and the collector gives
# their space back) while the measured ingest runs. The load's timestamps
# must then be within 7 days (GEN, not a file dated long ago). The report
# gives ingestd-retention / ingestd and the aging rows the sweeper removed
# before the harness started and during its run.
#
# ingestd-js1, ingestd-js2 and ingestd-js3 are ingestd on
# --store=jetstream: each measurement starts a fresh 3-server NATS cluster
# on loopback (nats-server built from go.mod's module, file storage,
# sync_interval: always, replicas 3) and 1, 2 or 3 ingestd nodes in front
# of it; with more than one the writers' requests go to the nodes in turn
# (`ingestd bench --write-urls`) and the drain and checks go through the
# first. The NATS servers' CPU and the other nodes' are reported as
# cpu_other_s; the report gives JetStream / badger (the ingestd system)
# per pattern, the mean group commit of the first node and of badger
# (commit_ms; publish_ms: its wait for the streams' acknowledgements),
# and the whole cluster's CPU seconds per million lines (every ingestd
# node and NATS server) against that with one node.
# JS_WRITES=first sends every write through the first node (the others
# only follow the streams): the cluster's CPU with 2 nodes less that with
# 1 is then what a node costs that applies another node's blocks.
# JS_OTHERS_MATERIALISE, when set, is every node's but the first's
# --jetstream-materialise (empty: they keep no table's rows).
#
# Not run by CI (it takes several minutes and installs packages). Needs root
# for apt-get (skipped when influxd and victoria-metrics are on PATH).
#
# Each round, every system gets a fresh temporary data directory for each
# measurement, on loopback, and the systems alternate within each step:
#   inorder:
#   1. HTTP ingest of the data (gzip bodies of $BATCH lines, $CONCURRENCY
#      writers, each owning its series): ingestd, InfluxDB, VictoriaMetrics.
#      ingestd is then drained in full (JSON pages of 10,000 rows).
#   2. ingestd over TCP ($CONNECTIONS connections), then the single-core
#      decode of the same data with ingestd's parser (no server).
#   3. Latency: 1,000-line bodies at half of each system's peak HTTP rate of
#      this round (open loop), and ingestd also at InfluxDB's rate.
#   concurrent: for each count in $WRITERS (default "1 2 4"), that many
#      writers sharing series: consecutive batches of the time-ordered data
#      dealt to them in turn, as TSBS's loader does.
#   resend: the whole data, then all of it again ($RESEND_WRITERS writers,
#      default 1); the second pass, where every line overwrites a stored
#      point, is measured. ingestd is then drained in full: both loads, two
#      fragments per line (drain after resend).
#   backfill: the data's batches newest first ($BACKFILL_WRITERS writers,
#      default 1).
# Each HTTP measurement reports lines/s, p50/p99 request latency, the
# server's CPU seconds over the measured ingest and its peak RSS (VmHWM).
# Durability as shipped: ingestd fsyncs before its 204 (default), InfluxDB
# 1.6.7 fsyncs its WAL on every write (wal-fsync-delay 0, the default),
# VictoriaMetrics acknowledges before its data reaches the disk.
# Every figure is printed, then the median per system and the ratios
# (ingestd / InfluxDB and ingestd / VictoriaMetrics) per pattern.
set -euo pipefail
cd "$(dirname "$0")/../.."

ROUNDS=${ROUNDS:-3}
DATA=${DATA:-}
START=${START:-$(date -u -d 'yesterday' +%Y-%m-%dT00:00:00Z)}
PRELOAD_ROWS=${PRELOAD_ROWS:-400000}
AGING_LEAD=${AGING_LEAD:-30}
AGING_SPAN=${AGING_SPAN:-90}
CONCURRENCY=${CONCURRENCY:-4}
BATCH=${BATCH:-5000}
CONNECTIONS=${CONNECTIONS:-1}
LATENCY_SECONDS=${LATENCY_SECONDS:-10}
PATTERNS=${PATTERNS:-inorder concurrent resend backfill}
SYSTEMS=${SYSTEMS:-ingestd influxdb victoriametrics}
WRITERS=${WRITERS:-1 2 4}
RESEND_WRITERS=${RESEND_WRITERS:-1}
BACKFILL_WRITERS=${BACKFILL_WRITERS:-1}
GEN=${GEN:-}
JS_WRITES=${JS_WRITES:-all}
case $JS_WRITES in all | first) ;; *) echo "JS_WRITES is all or first, not $JS_WRITES" >&2; exit 1 ;; esac
PORT=${PORT_BASE:-18600} # below the ephemeral range, where clients' ports never collide
WORK=$(mktemp -d /tmp/ingestd-compare.XXXXXX)
OUT=${OUT:-$WORK/results.txt}

# has PATTERN: whether PATTERNS names it.
has() { [[ " $PATTERNS " == *" $1 "* ]]; }

# shellcheck source=deploy/bench/lib.sh
source deploy/bench/lib.sh

if [ -z "$DATA" ]; then
  read -r -a LOAD <<<"$GEN"
  LOAD+=(--start "$START")
  DATA="generated (${GEN:-TSBS devops defaults}, from $START)"
else
  [ -r "$DATA" ] || { echo "data file $DATA not found" >&2; exit 1; }
  LOAD=(--file "$DATA")
fi
for p in $PATTERNS; do
  case $p in inorder | concurrent | resend | backfill) ;; *) echo "unknown pattern $p in PATTERNS" >&2; exit 1 ;; esac
done
for s in $SYSTEMS; do
  case $s in ingestd | ingestd-retention | ingestd-js1 | ingestd-js2 | ingestd-js3 | influxdb | victoriametrics) ;; *) echo "unknown system $s in SYSTEMS" >&2; exit 1 ;; esac
done

install_peers
build
BENCH=("$WORK/ingestd" bench)

# aged: the rows of table aging the server's retention has removed.
aged() {
  curl -s "$SURL/metrics" | awk '/^ingestd_retention_removed_rows_total\{table="aging"\}/ { v = $2 } END { printf "%.0f\n", v }'
}

# preload SYSTEM: writes PRELOAD_ROWS rows to table aging (gzip bodies of
# 5,000 lines), stamped from AGING_LEAD s from now minus 1 h over AGING_SPAN
# s; for ingestd-retention, then gives aging a 1 h retention, so that its
# rows age out while the measured ingest runs.
preload() {
  local t0 i
  for i in $(seq 300); do curl -sf -o /dev/null "$SURL/health" && break; sleep 0.1; done
  t0=$(($(date +%s) + AGING_LEAD - 3600))
  mkdir -p "$WORK/preload"
  # (awk's numbers are doubles: the time is printed as seconds and nanoseconds)
  awk -v n="$PRELOAD_ROWS" -v t0="$t0" -v span="$AGING_SPAN" 'BEGIN {
    step = int(span * 1e9 / n)
    for (i = 0; i < n; i++) {
      ns = i * step
      printf "aging,host=h%d v=%.0fi,w=%.0f.5 %.0f%09.0f\n", i % 100, i, i % 1000, t0 + int(ns / 1e9), ns % 1e9
    }
  }' | split -l 5000 - "$WORK/preload/batch."
  for i in "$WORK"/preload/batch.*; do
    gzip -c "$i" | curl -sf -o /dev/null -XPOST "$SURL/write" -H 'Content-Encoding: gzip' --data-binary @- ||
      { echo "preload: write refused" >&2; exit 1; }
  done
  rm -rf "$WORK/preload"
  if [ "$1" = ingestd-retention ]; then
    curl -sf -o /dev/null -XPUT "$SURL/api/v1/tables/aging" -H 'Content-Type: application/json' -d '{"retention": "1h"}' ||
      { echo "preload: retention refused" >&2; exit 1; }
  fi
}

# bench LABEL ROUND SYSTEM ARGS…: one measurement against a fresh server
# (SYSTEM "none": no server); appends its RESULT line to $OUT.
bench() {
  local label=$1 round=$2 sys=$3; shift 3
  local dir="$WORK/run.$label.$round"
  echo "== round $round: $label"
  local extra=()
  local removed="" before=0
  if [ "$sys" != none ]; then
    start "$sys" "$dir"
    # The server's own TCP address: listening already, so not port()'s free check.
    extra=(--target "${sys%%-*}" --url "$SURL" --tcp-addr "127.0.0.1:$((PORT + 2))" --server-pid "$SPID")
    [ -z "$WRITE_URLS" ] || [ "$JS_WRITES" = first ] || extra+=(--write-urls "$WRITE_URLS")
    [ ${#OTHER_PIDS[@]} = 0 ] || extra+=(--other-pids "$(IFS=,; echo "${OTHER_PIDS[*]}")")
    if [[ $sys == ingestd* ]] && runs ingestd-retention; then preload "$sys"; before=$(aged); fi
  fi
  local out rc=0
  out=$("${BENCH[@]}" "${extra[@]}" "$@" 2>&1) || rc=$?
  if [[ $sys == ingestd* ]] && runs ingestd-retention; then
    removed=" aging_removed_before=$before aging_removed_during=$(($(aged) - before))"
  fi
  [ "$sys" != none ] && stop
  echo "$out" | sed 's/^/   /'
  if [ $rc != 0 ]; then
    echo "   $label failed; server log:"; tail -20 "$dir/log" 2>/dev/null | sed 's/^/   | /'
    [ ! -e "$dir/log2" ] || { echo "   second node's log:"; tail -20 "$dir/log2" | sed 's/^/   | /'; }
  fi
  echo "$label round=$round $(echo "$out" | grep '^RESULT' | sed 's/^RESULT //')${removed}" >>"$OUT"
  rm -rf "$dir"
}

# get LABEL KEY [ROUND]: the values of KEY in LABEL's results (none when
# LABEL did not run).
get() {
  { grep "^$1 round=${3:-[0-9]*} " "$OUT" || true; } | tr ' ' '\n' | { grep "^$2=" || true; } | cut -d= -f2
}

median() {
  sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "na"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

med() { get "$1" "$2" | median; }

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "na" || b == "na" || a == "" || b == "" || b == 0) print "na"; else printf "%.2f", a / b }'; }

# times A B: A / B as "1.23x", or na.
times() { local r; r=$(ratio "$1" "$2"); if [ "$r" = na ]; then echo na; else echo "${r}x"; fi; }

half() { awk -v r="$1" 'BEGIN { printf "%.0f", r / 2 }'; }

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(free -g | awk '/Mem:/ { print $2 }') GiB"
echo "versions: $(influxd version 2>/dev/null | head -1); VictoriaMetrics $(dpkg-query -W -f '${Version}' victoria-metrics 2>/dev/null); $(go version | cut -d' ' -f3)"
echo "data: $DATA; load average: $(cut -d' ' -f1-3 /proc/loadavg); results: $OUT"

for r in $(seq 1 "$ROUNDS"); do
  if has inorder; then
    for sys in $SYSTEMS; do
      bench "http:$sys" "$r" "$sys" "${LOAD[@]}" --mode http --concurrency "$CONCURRENCY" --batch-lines "$BATCH"
    done
    if runs ingestd; then
      bench tcp:ingestd "$r" ingestd "${LOAD[@]}" --mode tcp --connections "$CONNECTIONS"
      bench decode "$r" none "${LOAD[@]}" --mode decode
    fi
    ri=$(get http:ingestd lines_per_s "$r" | head -1)
    rx=$(get http:influxdb lines_per_s "$r" | head -1)
    rv=$(get http:victoriametrics lines_per_s "$r" | head -1)
    # Generated TSBS-shaped data, 10 hosts as in the file (too short for it).
    lat=(--mode latency --latency-lines 1000 --latency-duration "${LATENCY_SECONDS}s" --scale 10)
    if runs ingestd; then bench latency:ingestd "$r" ingestd "${lat[@]}" --rate "$(half "${ri:-0}")"; fi
    if runs influxdb; then bench latency:influxdb "$r" influxdb "${lat[@]}" --rate "$(half "${rx:-0}")"; fi
    if runs ingestd && runs influxdb; then bench latency:ingestd@influx "$r" ingestd "${lat[@]}" --rate "$(half "${rx:-0}")"; fi
    if runs victoriametrics; then bench latency:victoriametrics "$r" victoriametrics "${lat[@]}" --rate "$(half "${rv:-0}")"; fi
  fi
  if has concurrent; then
    for w in $WRITERS; do
      for sys in $SYSTEMS; do
        bench "concurrent$w:$sys" "$r" "$sys" "${LOAD[@]}" --mode http --pattern concurrent --concurrency "$w" --batch-lines "$BATCH"
      done
    done
  fi
  if has resend; then
    for sys in $SYSTEMS; do
      bench "resend:$sys" "$r" "$sys" "${LOAD[@]}" --mode http --pattern resend --concurrency "$RESEND_WRITERS" --batch-lines "$BATCH"
    done
  fi
  if has backfill; then
    for sys in $SYSTEMS; do
      bench "backfill:$sys" "$r" "$sys" "${LOAD[@]}" --mode http --pattern backfill --concurrency "$BACKFILL_WRITERS" --batch-lines "$BATCH"
    done
  fi
done

# row LABEL: one line of the medians table (skipped when LABEL did not run).
row() {
  local label=$1 lps v
  grep -q "^$label round=" "$OUT" || return 0
  v=$(get "$label" verified | sort | uniq -c | tr -s ' ' | tr '\n' ' ')
  if [[ $label == latency:* ]]; then lps=$(med "$label" rate); else lps=$(med "$label" lines_per_s); fi
  printf '%-28s %12s %8s %10s %10s %8s %10s %12s %s\n' "$label" "$lps" "$(med "$label" mb_per_s)" \
    "$(med "$label" p50_ms)" "$(med "$label" p99_ms)" "$(med "$label" cpu_s)" "$(med "$label" rss_max_mib)" \
    "$(med "$label" rss_hwm_mib)" "$v"
}

# ratios PREFIX [NAME]: ingestd against the others for the labels PREFIX:SYSTEM.
ratios() {
  local p=$1 i x v
  i=$(med "$p:ingestd" lines_per_s); x=$(med "$p:influxdb" lines_per_s); v=$(med "$p:victoriametrics" lines_per_s)
  printf '%-16s ingestd/InfluxDB %7s  ingestd/VictoriaMetrics %7s  p99 ms ingestd %s, InfluxDB %s, VictoriaMetrics %s\n' \
    "${2:-$p}" "$(times "$i" "$x")" "$(times "$i" "$v")" "$(med "$p:ingestd" p99_ms)" "$(med "$p:influxdb" p99_ms)" \
    "$(med "$p:victoriametrics" p99_ms)"
}

echo
echo "== medians over $ROUNDS rounds"
printf '%-28s %12s %8s %10s %10s %8s %10s %12s %s\n' run lines/s MB/s p50_ms p99_ms cpu_s rss_max_MiB rss_hwm_MiB verified
# (latency runs: lines/s is the offered rate; cpu_s: the server's user+system seconds over the measured ingest)
for label in http:ingestd http:ingestd-retention http:ingestd-js1 http:ingestd-js2 http:ingestd-js3 http:influxdb http:victoriametrics tcp:ingestd decode \
  latency:ingestd latency:influxdb latency:ingestd@influx latency:victoriametrics; do
  row "$label"
done
for p in $(for w in $WRITERS; do echo "concurrent$w"; done) resend backfill; do
  for sys in ingestd ingestd-retention ingestd-js1 ingestd-js2 ingestd-js3 influxdb victoriametrics; do row "$p:$sys"; done
done
max_rss=$(cut -d' ' -f3- "$OUT" | tr ' ' '\n' | grep -E '^rss_(max|hwm)_mib=' | cut -d= -f2 | sort -g | tail -1)
# (none when SYSTEMS has no plain ingestd: only JetStream nodes)
ingestd_rss=$(grep -E '^[a-z0-9@]+:ingestd(@influx)? ' "$OUT" | tr ' ' '\n' | grep -E '^rss_(max|hwm)_mib=' | cut -d= -f2 | sort -g | tail -1) || true

echo
echo "== ratios per pattern (medians; lines/s of the measured pass)"
if has inorder; then ratios http inorder; fi
if has concurrent; then for w in $WRITERS; do ratios "concurrent$w"; done; fi
if has resend; then ratios resend; fi
if has backfill; then ratios backfill; fi
if has resend; then
  echo "drain after resend (ingestd, both loads, JSON pages of 10,000): $(med resend:ingestd drain_rows_per_s) rows/s  (target >= 500000)"
fi
echo "peak RSS over every run: ingestd ${ingestd_rss:-na} MiB (target <= 512), any system ${max_rss:-na} MiB"

if runs ingestd-retention; then
  echo
  echo "== ingest with retention and GC running / without (medians; target >= 0.90)"
  for p in http $(for w in $WRITERS; do echo "concurrent$w"; done) resend backfill; do
    grep -q "^$p:ingestd-retention round=" "$OUT" || continue
    echo "$p: $(ratio "$(med "$p:ingestd-retention" lines_per_s)" "$(med "$p:ingestd" lines_per_s)")" \
      "(lines/s $(med "$p:ingestd-retention" lines_per_s) / $(med "$p:ingestd" lines_per_s); per round$(for r in $(seq 1 "$ROUNDS"); do printf ' %s' "$(ratio "$(get "$p:ingestd-retention" lines_per_s "$r")" "$(get "$p:ingestd" lines_per_s "$r")")"; done);" \
      "server CPU s $(med "$p:ingestd-retention" cpu_s) / $(med "$p:ingestd" cpu_s); aging rows removed before each run:$(get "$p:ingestd-retention" aging_removed_before | sed 's/^/ /' | tr -d '\n'), during it:$(get "$p:ingestd-retention" aging_removed_during | sed 's/^/ /' | tr -d '\n'))"
  done
fi

if runs ingestd-js1 || runs ingestd-js2 || runs ingestd-js3; then
  echo
  echo "== --store=jetstream / badger (medians; 3 NATS servers and the ingestd nodes on this machine)"
fi
# cluster_cpu PATTERN N: CPU seconds per million lines of every ingestd
# node and NATS server of the N-node median.
cluster_cpu() {
  local i o l
  i=$(med "$1:ingestd-js$2" cpu_s) o=$(med "$1:ingestd-js$2" cpu_other_s) l=$(med "$1:ingestd-js$2" lines)
  awk -v i="$i" -v o="$o" -v l="$l" 'BEGIN { if (i == "na" || o == "na" || l == "na" || l == 0) print "na"; else printf "%.2f", (i + o) * 1e6 / l }'
}
for n in 1 2 3; do
  runs "ingestd-js$n" || continue
  for p in http $(for w in $WRITERS; do echo "concurrent$w"; done) resend backfill; do
    grep -q "^$p:ingestd-js$n round=" "$OUT" || continue
    echo "$p, $n ingestd node(s): $(ratio "$(med "$p:ingestd-js$n" lines_per_s)" "$(med "$p:ingestd" lines_per_s)")" \
      "(lines/s $(med "$p:ingestd-js$n" lines_per_s) / $(med "$p:ingestd" lines_per_s); per round$(for r in $(seq 1 "$ROUNDS"); do printf ' %s' "$(ratio "$(get "$p:ingestd-js$n" lines_per_s "$r")" "$(get "$p:ingestd" lines_per_s "$r")")"; done);" \
      "p99 ms $(med "$p:ingestd-js$n" p99_ms) / $(med "$p:ingestd" p99_ms);" \
      "CPU s: ingestd $(med "$p:ingestd-js$n" cpu_s), NATS servers and other nodes $(med "$p:ingestd-js$n" cpu_other_s) / badger $(med "$p:ingestd" cpu_s);" \
      "drain rows/s $(med "$p:ingestd-js$n" drain_rows_per_s) / $(med "$p:ingestd" drain_rows_per_s));" \
      "group commit ms $(med "$p:ingestd-js$n" commit_ms) (publishing $(med "$p:ingestd-js$n" publish_ms)) / $(med "$p:ingestd" commit_ms), commits $(med "$p:ingestd-js$n" commits) / $(med "$p:ingestd" commits);" \
      "cluster CPU s per million lines $(cluster_cpu "$p" "$n")$(runs ingestd-js1 && [ "$n" != 1 ] && echo ", / 1 node: $(ratio "$(cluster_cpu "$p" "$n")" "$(cluster_cpu "$p" 1)")")"
  done
done

if has inorder; then
  echo
  echo "== in-order targets (medians; each ratio from figures of the same run)"
  hi=$(med http:ingestd lines_per_s); hx=$(med http:influxdb lines_per_s); hv=$(med http:victoriametrics lines_per_s)
  echo "HTTP ingest ingestd / InfluxDB 1.6.7:     $(ratio "$hi" "$hx")x  (target >= 3)"
  echo "HTTP ingest ingestd / VictoriaMetrics:    $(ratio "$hi" "$hv")x  (stretch >= 1)"
  echo "TCP ingest / single-core decode:          $(ratio "$(med tcp:ingestd lines_per_s)" "$(med decode lines_per_s)")  (target >= 0.60)"
  echo "drain rows/s:                             $(med http:ingestd drain_rows_per_s)  (target >= 1000000)"
  echo "204 p99 at half peak, ingestd:            $(med latency:ingestd p99_ms) ms  (target <= 10)"
  echo "204 p99 at half peak, InfluxDB:           $(med latency:influxdb p99_ms) ms  (ingestd <= this)"
  echo "204 p99 at InfluxDB's rate, ingestd:      $(med latency:ingestd@influx p99_ms) ms"
  echo "latency runs' pacer lateness (harness without CPU), median of maxima: ingestd $(med latency:ingestd pacer_late_ms) ms, InfluxDB $(med latency:influxdb pacer_late_ms) ms"
fi
