#!/usr/bin/env bash
# Real Telegraf against ingestd (its InfluxDB outputs): builds Telegraf v1.37 from the Go
# module proxy as a custom build with only the plugins the test needs, then
# runs TestTelegraf (cmd/ingestd/clients_test.go), which starts ingestd (and
# one with --auth-file and TLS for the token variants) and runs Telegraf once
# per output configuration of deploy/telegraf/ over the
# fixture cmd/ingestd/testdata/telegraf/metrics.lp, then checks through the
# drain that every metric arrived once per output with its exact values.
# Fails loudly: on a build error, a mismatch, or a test that did not run.
set -euo pipefail
cd "$(dirname "$0")/.."

TELEGRAF_VERSION="${TELEGRAF_VERSION:-v1.37.2}"
# The custom build: 'custom' plus one tag per plugin (docs/CUSTOMIZATION.md).
TAGS="custom,inputs.file,parsers.influx,outputs.influxdb,outputs.influxdb_v2,outputs.socket_writer,serializers.influx"

bin_dir="$(mktemp -d)"
trap 'rm -rf "$bin_dir"' EXIT

echo "telegraf-e2e: building Telegraf $TELEGRAF_VERSION ($TAGS)"
start=$(date +%s)
# GOFLAGS=-mod=mod: Telegraf's own go.mod decides its dependencies, not ours.
GOBIN="$bin_dir" GOFLAGS=-mod=mod go install -tags "$TAGS" \
  -ldflags "-X github.com/influxdata/telegraf/internal.Version=${TELEGRAF_VERSION#v}" \
  "github.com/influxdata/telegraf/cmd/telegraf@$TELEGRAF_VERSION"
echo "telegraf-e2e: built in $(( $(date +%s) - start ))s: $("$bin_dir/telegraf" --version)"

out="$bin_dir/test.log"
INGESTD_TELEGRAF="$bin_dir/telegraf" go test -count=1 -v -run '^TestTelegraf$' ./cmd/ingestd 2>&1 | tee "$out"
# A skipped or missing test must not pass for a green run.
for sub in 'influxdb_to_/write' 'influxdb_v2_to_/api/v2/write' 'socket_writer_over_TCP' \
  'influxdb_with_a_token' 'influxdb_v2_with_a_token' 'socket_writer_over_TLS_with_a_client_certificate'; do
  if ! grep -q -- "--- PASS: TestTelegraf/$sub " "$out"; then
    echo "telegraf-e2e: TestTelegraf/$sub did not pass" >&2
    exit 1
  fi
done
echo "telegraf-e2e: every output (and its token variant) delivered every metric once, exactly"
