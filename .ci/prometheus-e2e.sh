#!/usr/bin/env bash
# Runs Debian's real Prometheus against a running ingestd on loopback and
# reads a consumer's lag back through Prometheus's query API: 100 lines
# written, a consumer at 40, so the lag must read 60 fragments. Then every
# query of every panel of deploy/grafana/ingestd-dashboard.json must return
# data (a non-empty result with a number) while a writer keeps ingestd busy.
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

# The Grafana dashboard: load on HTTP and TCP (one bad line a round, for the
# rejected-lines panel) while each panel's PromQL is asked, with Grafana's
# variables as a dashboard showing every instance sets them.
curl -sf -XPUT "http://127.0.0.1:$ING/api/v1/tables/mem" -H 'Content-Type: application/json' -d '{"sync":true}' >/dev/null
(
  i=0
  while :; do
    i=$((i + 1))
    printf 'cpu,host=w usage=%di %d\nmem,host=w used=%di %d\nbad line\n' "$i" "$((1000 + i))" "$i" "$i" |
      curl -s -o /dev/null -XPOST "http://127.0.0.1:$ING/write" --data-binary @- || true
    curl -s -o /dev/null "http://127.0.0.1:$ING/drain?table=mem&epoch=1&after=0&limit=1&consumer=slow" || true
    sleep 0.2
  done
) &
pids+=($!)
python3 - "http://127.0.0.1:$PROM" deploy/grafana/ingestd-dashboard.json <<'PY'
import json, math, sys, time, urllib.parse, urllib.request
prom, path = sys.argv[1], sys.argv[2]
dash = json.load(open(path))
names = {v["name"] for v in dash["templating"]["list"]}
assert names == {"datasource", "instance"}, names
queries = [("variable instance", dash["templating"]["list"][1]["definition"].replace("label_values(ingestd_build_info, instance)", "ingestd_build_info"))]
for p in dash["panels"]:
    assert p["targets"], p["title"]
    for t in p["targets"]:
        queries.append((p["title"] + " / " + t["refId"], t["expr"].replace("$__rate_interval", "15s").replace("$instance", ".*")))
def ask(q):
    url = prom + "/api/v1/query?" + urllib.parse.urlencode({"query": q})
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
    if body["status"] != "success":
        raise SystemExit("FAIL: %s: %s" % (q, body))
    return [float(x["value"][1]) for x in body["data"]["result"]]
failed = []
for name, q in queries:
    deadline, vals = time.time() + 60, []
    while time.time() < deadline:
        vals = ask(q)
        if any(not math.isnan(v) for v in vals):
            break
        time.sleep(1)
    ok = any(not math.isnan(v) for v in vals)
    print("%-4s %-45s %s" % ("ok" if ok else "FAIL", name, vals[:4]))
    if not ok:
        failed.append(name)
if failed:
    raise SystemExit("FAIL: no data for %d panel queries: %s" % (len(failed), failed))
print("every panel query of the dashboard returns data (%d queries)" % len(queries))
PY
echo "prometheus e2e passed"
