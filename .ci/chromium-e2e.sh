#!/usr/bin/env bash
# The status page at / in a real browser: installs Debian's
# chromium, then runs TestStatusPageChromium (cmd/ingestd/status_test.go),
# which starts ingestd with known tables, a busy writer and a lagging
# consumer, checks the DOM headless Chromium built (--dump-dom) and that it
# takes a screenshot showing the lagging consumer's row.
# Fails loudly: on an install error, a mismatch, or a test that did not run.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
fi
echo "chromium-e2e: $(chromium --version)"

out="$(mktemp)"
trap 'rm -f "$out"' EXIT
INGESTD_CHROMIUM="$(command -v chromium)" go test -count=1 -v -run '^TestStatusPageChromium$' ./cmd/ingestd 2>&1 | tee "$out"
# A skipped or missing test must not pass for a green run.
if ! grep -q -- "--- PASS: TestStatusPageChromium " "$out"; then
  echo "chromium-e2e: TestStatusPageChromium did not pass" >&2
  exit 1
fi
echo "chromium-e2e: the status page renders in Chromium"
