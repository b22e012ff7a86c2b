#!/usr/bin/env bash
# Runs Debian's real Prometheus against a running ingestd on loopback and
# reads a consumer's lag back through Prometheus's query API: 100 lines
# written, a consumer at 40, so the lag must read 60 fragments.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ING=$(free_port); PROM=$(free_port)
go build -o "$tmp/ingestd" ./cmd/ingestd
"$tmp/ingestd" --data-dir "$tmp/data" --http-addr "127.0.0.1:$ING" --tcp-addr "" >"$tmp/ingestd.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$ING/ping" && break; sleep 0.1; done

curl -sf -XPUT "http://127.0.0.1:$ING/api/v1/tables/cpu" -H 'Content-Type: application/json' -d '{"sync":true}' >/dev/null
seq 1 100 | sed 's/.*/cpu,host=h usage=&i &/' | curl -sf -XPOST "http://127.0.0.1:$ING/write" --data-binary @- >/dev/null
curl -sf "http://127.0.0.1:$ING/drain?table=cpu&epoch=1&after=40&limit=1&consumer=audit" >/dev/null

cat >"$tmp/prometheus.yml" <<CFG
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: ingestd
    static_configs: [{targets: ["127.0.0.1:$ING"]}]
CFG
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/prom" \
  --web.listen-address="127.0.0.1:$PROM" >"$tmp/prometheus.log" 2>&1 &
pids+=($!)

query='ingestd_feed_consumer_lag_fragments{table="cpu",consumer="audit"}'
for _ in $(seq 120); do
  val=$(curl -sf "http://127.0.0.1:$PROM/api/v1/query" --data-urlencode "query=$query" |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")' 2>/dev/null || true)
  if [ -n "$val" ]; then break; fi
  sleep 0.5
done
echo "Prometheus reads $query = ${val:-nothing}"
if [ "$val" != "60" ]; then
  echo "FAIL: want 60"; tail -20 "$tmp/prometheus.log"; exit 1
fi
echo "prometheus e2e passed"
