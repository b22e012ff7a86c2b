#!/usr/bin/env bash
# Sustained load side by side: `ingestd bench --mode soak` against ingestd,
# InfluxDB 1.6.7 and VictoriaMetrics (Debian's packages), one after the
# other, each on a fresh data directory, at each offered rate and
# cardinality.
#
#   deploy/bench/soak.sh                                  # 10 min at 100,000 lines/s over 1,000 series
#   RATES="50000 100000" SERIES="1000 100000" TAILS=9 deploy/bench/soak.sh
#   SYSTEMS=ingestd DURATION=60s RATES=200000 deploy/bench/soak.sh   # a quick look at one rate
#   INGESTD_FLAGS="--store-memtable-bytes 16777216" SYSTEMS=ingestd deploy/bench/soak.sh   # a tuning
#   SYSTEMS="ingestd-js1 ingestd-js2 ingestd-js3" RATES=100000 deploy/bench/soak.sh   # --store=jetstream, 1-3 nodes
#
# The load (see `ingestd bench --help`, soak mode): SERIES series over the
# 9 TSBS devops tables, each line stamped with the time it is due, sent in
# requests of LINES lines at RATE lines/s, open loop, at most MAX_INFLIGHT
# requests outstanding, for DURATION; a report line per WINDOW. ingestd
# also runs TAILS tailing consumers (one per table, long-polling). A rate
# is sustained when every window acknowledged 99 % of the offered lines
# with p99 <= 100 ms. Every figure is printed, then one summary line per
# run; its last column is the windows missed, and how many of them the
# harness's disk probe (--disk-probe) saw the machine's storage stall in
# (a sync of one rewritten 4 KiB block slower than 100 ms). Not run by
# CI (it takes DURATION per run and installs packages); needs root for
# apt-get unless influxd and victoria-metrics are on PATH.
set -euo pipefail
cd "$(dirname "$0")/../.."

SYSTEMS=${SYSTEMS:-ingestd influxdb victoriametrics}
RATES=${RATES:-100000}
SERIES=${SERIES:-1000}
DURATION=${DURATION:-10m}
WINDOW=${WINDOW:-10s}
LINES=${LINES:-1000}
MAX_INFLIGHT=${MAX_INFLIGHT:-64}
TAILS=${TAILS:-0}
# ingestd-jsN: N ingestd nodes on a fresh 3-server JetStream cluster
# (deploy/bench/lib.sh); the requests go to the nodes in turn, or all to
# the first with JS_WRITES=first, and the NATS servers' and the other
# nodes' CPU time is reported beside the first node's (cluster_cpu/Ml:
# the whole cluster's CPU seconds per million lines acknowledged).
# JS_OTHERS_MATERIALISE, when set, is the other nodes'
# --jetstream-materialise (empty: they keep no rows; the tails read the
# first node).
JS_WRITES=${JS_WRITES:-all}
case $JS_WRITES in all | first) ;; *) echo "JS_WRITES is all or first, not $JS_WRITES" >&2; exit 1 ;; esac
PORT=${PORT_BASE:-18600}
WORK=$(mktemp -d /tmp/ingestd-soak.XXXXXX)
OUT=${OUT:-$WORK/results.txt}

# shellcheck source=deploy/bench/lib.sh
source deploy/bench/lib.sh
for s in $SYSTEMS; do
  case $s in ingestd | ingestd-js1 | ingestd-js2 | ingestd-js3 | influxdb | victoriametrics) ;; *) echo "unknown system $s in SYSTEMS" >&2; exit 1 ;; esac
done
install_peers
build

n=0
for series in $SERIES; do
  for rate in $RATES; do
    for sys in $SYSTEMS; do
      n=$((n + 1))
      dir="$WORK/run.$n"
      start "$sys" "$dir"
      extra=()
      [[ $sys == ingestd* ]] && extra=(--tails "$TAILS")
      [ -z "$WRITE_URLS" ] || [ "$JS_WRITES" = first ] || extra+=(--write-urls "$WRITE_URLS")
      [ ${#OTHER_PIDS[@]} = 0 ] || extra+=(--other-pids "$(IFS=,; echo "${OTHER_PIDS[*]}")")
      echo "== $sys, $series series, $rate lines/s offered, $DURATION" | tee -a "$OUT"
      "$WORK/ingestd" bench --mode soak --target "${sys%%-*}" --url "$SURL" --server-pid "$SPID" --store-dir "$dir" \
        --rate "$rate" --series "$series" --soak-duration "$DURATION" --window "$WINDOW" --latency-lines "$LINES" \
        --max-inflight "$MAX_INFLIGHT" "${extra[@]}" 2>&1 | sed "s/^RESULT /RESULT system=$sys /" | tee -a "$OUT" || true
      stop
      rm -rf "$dir"
    done
  done
done

echo
echo "summary ($OUT):"
printf '%-16s %8s %8s %10s %9s %9s %9s %8s %10s %10s %10s %12s %10s %11s %8s %11s\n' system series offered acked/s sustained p99_ms max_ms refused ref_p99_ms ref_ans_ms cpu_s/Ml cluster_cpu/Ml anon_mib bytes/line lag_s missed/disk
grep '^RESULT' "$OUT" | awk '{
  for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
  cluster = (v["cpu_other_s_per_mline"] == "" ? "-" : sprintf("%.2f", v["cpu_s_per_mline"] + v["cpu_other_s_per_mline"]))
  printf "%-16s %8s %8.0f %10.0f %9s %9.1f %9.1f %8s %10.1f %10.1f %10.2f %12s %10.0f %11.1f %8s %11s\n", v["system"], v["series"], v["rate"], v["acked_per_s"], v["sustained"],
    v["p99_ms"], v["max_ms"], v["refused"], v["refused_p99_ms"], v["refused_answer_p99_ms"], v["cpu_s_per_mline"], cluster, v["rss_anon_max_mib"], v["store_bytes_per_line"], (v["lag_max_s"] == "" ? "-" : v["lag_max_s"]),
    (v["windows"] - v["windows_ok"]) "/" (v["missed_disk_stall_windows"] == "" ? "-" : v["missed_disk_stall_windows"])
  delete v
}'
