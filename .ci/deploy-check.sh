#!/usr/bin/env bash
# Validates deploy/ with the tools this machine has: promtool (rules, rule
# unit tests, configs), systemd-analyze (the unit), the Kubernetes API types
# (deploy/validate, its own module) and docker-compose (the compose file).
# The Dockerfile cannot be built here (no Docker engine).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== promtool"
promtool check rules deploy/prometheus/ingestd-rules.yml
(cd deploy/prometheus && promtool test rules ingestd-rules_test.yml)
promtool check config deploy/prometheus/prometheus.yml
cp deploy/compose/prometheus.yml deploy/prometheus/ingestd-rules.yml "$tmp/"
promtool check config "$tmp/prometheus.yml"

echo "== systemd-analyze verify"
go build -o "$tmp/ingestd" ./cmd/ingestd
sed "s#/usr/local/bin/ingestd#$tmp/ingestd#" deploy/systemd/ingestd.service > "$tmp/ingestd.service"
out=$(systemd-analyze verify "$tmp/ingestd.service" 2>&1 || true)
if [ -n "$out" ]; then echo "$out"; exit 1; fi
systemd-analyze security --offline=true --threshold=30 "$tmp/ingestd.service" | tail -1

echo "== kubernetes manifests"
(cd deploy/validate && go test -count=1 ./...)

echo "== docker-compose config"
docker-compose -f deploy/compose/docker-compose.yml config -q
echo "deploy checks passed"
