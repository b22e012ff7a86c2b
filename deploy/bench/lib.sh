# Shared by compare.sh and soak.sh (sourced): the servers they run side by side.
# The caller sets WORK (a fresh directory), PORT (the base port) and SYSTEMS.

PIDS=()

cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"/run.*
}
trap cleanup EXIT

# runs SYSTEM: whether SYSTEMS names it.
runs() { [[ " $SYSTEMS " == *" $1 "* ]]; }

# install_peers: InfluxDB 1.6.7 and VictoriaMetrics from Debian when SYSTEMS
# needs them. The packages enable and start services: a policy-rc.d keeps
# them from starting, and they are stopped and disabled in case a service
# manager started them anyway.
install_peers() {
  if { runs influxdb && ! command -v influxd >/dev/null; } ||
    { runs victoriametrics && ! command -v victoria-metrics >/dev/null; }; then
    apt-get update -qq
    local had_policy=0; [ -e /usr/sbin/policy-rc.d ] && had_policy=1
    [ $had_policy = 1 ] || { printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq influxdb victoria-metrics >/dev/null
    [ $had_policy = 1 ] || rm -f /usr/sbin/policy-rc.d
  fi
  local svc
  for svc in influxdb victoria-metrics; do
    systemctl stop "$svc" 2>/dev/null || true
    systemctl disable "$svc" 2>/dev/null || true
  done
}

# build: ingestd (and nats-server when SYSTEMS runs JetStream) into WORK.
build() {
  go build -o "$WORK/ingestd" ./cmd/ingestd
  if runs ingestd-js1 || runs ingestd-js2 || runs ingestd-js3; then go build -o "$WORK/nats-server" github.com/nats-io/nats-server/v2; fi
}

# port N: a loopback port from the base, checked free.
port() {
  local p=$((PORT + $1))
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
    echo "port $p is in use (set PORT_BASE=)" >&2; exit 1
  fi
  echo "$p"
}

# start_nats DIR: a fresh 3-server JetStream cluster (client ports 10-12,
# routes 13-15, monitoring 16-18 from the base) in DIR; sets NATS_URLS and
# adds the servers to OTHER_PIDS once every one reports healthy.
start_nats() {
  local dir=$1 i j routes="" ok
  NATS_URLS=""
  for i in 0 1 2; do
    routes+="${routes:+, }nats://127.0.0.1:$(port $((13 + i)))"
    NATS_URLS+="${NATS_URLS:+,}nats://127.0.0.1:$(port $((10 + i)))"
  done
  for i in 0 1 2; do
    cat >"$dir/nats$i.conf" <<EOF
server_name: n$i
listen: 127.0.0.1:$(port $((10 + i)))
http: 127.0.0.1:$(port $((16 + i)))
jetstream { store_dir: "$dir/nats$i", sync_interval: always }
cluster { name: bench, listen: 127.0.0.1:$(port $((13 + i))), routes: [$routes] }
EOF
    "$WORK/nats-server" -c "$dir/nats$i.conf" >"$dir/nats$i.log" 2>&1 &
    OTHER_PIDS+=("$!"); PIDS+=("$!")
  done
  for i in $(seq 300); do
    ok=0
    for j in 0 1 2; do curl -sf -o /dev/null "http://127.0.0.1:$((PORT + 16 + j))/healthz" && ok=$((ok + 1)); done
    [ $ok = 3 ] && return 0
    sleep 0.1
  done
  echo "the NATS cluster did not become healthy; logs in $dir" >&2; exit 1
}

# start SYSTEM DIR: starts a server on a fresh DIR; sets SPID and SURL,
# and for ingestd-jsN WRITE_URLS (the other nodes) and OTHER_PIDS.
start() {
  local sys=$1 dir=$2
  mkdir -p "$dir"
  WRITE_URLS="" OTHER_PIDS=()
  case $sys in
    ingestd-js1 | ingestd-js2 | ingestd-js3)
      start_nats "$dir"
      local n=${sys#ingestd-js} i mat=()
      # JS_OTHERS_MATERIALISE, when set, is the --jetstream-materialise of
      # every node but the first (which serves the drains and tails): empty
      # keeps no table's rows there.
      [ -z "${JS_OTHERS_MATERIALISE+set}" ] || mat=(--jetstream-materialise "$JS_OTHERS_MATERIALISE")
      # INGESTD_FLAGS: further flags for every node (a tuning to compare with the defaults).
      # shellcheck disable=SC2086
      for i in $(seq 2 "$n"); do
        WRITE_URLS+="${WRITE_URLS:+,}http://127.0.0.1:$(port $((16 + 2 * i)))"
        "$WORK/ingestd" --store jetstream --nats-url "$NATS_URLS" --data-dir "$dir/data$i" \
          --http-addr "127.0.0.1:$(port $((16 + 2 * i)))" --tcp-addr "127.0.0.1:$(port $((17 + 2 * i)))" \
          --log-level warn "${mat[@]}" ${INGESTD_FLAGS:-} >"$dir/log$i" 2>&1 &
        OTHER_PIDS+=("$!"); PIDS+=("$!")
      done
      SURL="http://127.0.0.1:$(port 1)"
      # shellcheck disable=SC2086
      "$WORK/ingestd" --store jetstream --nats-url "$NATS_URLS" --data-dir "$dir/data" \
        --http-addr "127.0.0.1:$(port 1)" --tcp-addr "127.0.0.1:$(port 2)" --log-level warn ${INGESTD_FLAGS:-} >"$dir/log" 2>&1 &
      ;;
    ingestd | ingestd-retention)
      SURL="http://127.0.0.1:$(port 1)"
      local ret=()
      [ "$sys" = ingestd ] || ret=(--default-retention 7d --retention-sweep-interval 1s --store-gc-interval 1s)
      # INGESTD_FLAGS: further flags for the ingestd under test (a tuning to compare with the defaults).
      # shellcheck disable=SC2086
      "$WORK/ingestd" --data-dir "$dir/data" --http-addr "127.0.0.1:$(port 1)" --tcp-addr "127.0.0.1:$(port 2)" \
        --log-level warn "${ret[@]}" ${INGESTD_FLAGS:-} >"$dir/log" 2>&1 &
      ;;
    influxdb)
      SURL="http://127.0.0.1:$(port 3)"
      cat >"$dir/influxdb.conf" <<EOF
reporting-disabled = true
bind-address = "127.0.0.1:$(port 4)"
[meta]
  dir = "$dir/meta"
  logging-enabled = false
[data]
  dir = "$dir/data"
  wal-dir = "$dir/wal"
  wal-fsync-delay = "0s"
  query-log-enabled = false
  max-series-per-database = 0
  max-values-per-tag = 0
[monitor]
  store-enabled = false
[http]
  enabled = true
  bind-address = "127.0.0.1:$(port 3)"
  log-enabled = false
[logging]
  level = "warn"
[continuous_queries]
  enabled = false
EOF
      influxd run -config "$dir/influxdb.conf" >"$dir/log" 2>&1 &
      ;;
    victoriametrics)
      SURL="http://127.0.0.1:$(port 5)"
      victoria-metrics -storageDataPath "$dir/data" -retentionPeriod 100y -httpListenAddr "127.0.0.1:$(port 5)" \
        -loggerLevel WARN >"$dir/log" 2>&1 &
      ;;
  esac
  SPID=$!
  PIDS+=("$SPID")
  # The harness waits for --url itself; the other nodes must answer too
  # before the first request is dealt to them.
  local u i
  for u in ${WRITE_URLS//,/ }; do
    for i in $(seq 600); do curl -sf -o /dev/null "$u/ping" && break; sleep 0.1; done
    curl -sf -o /dev/null "$u/ping" || { echo "the node at $u did not start; its log:" >&2; tail -20 "$dir"/log* >&2; exit 1; }
  done
}

stop() {
  local p
  for p in "$SPID" "${OTHER_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "$SPID" "${OTHER_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
}
