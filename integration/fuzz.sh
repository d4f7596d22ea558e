#!/usr/bin/env bash
# integration/fuzz.sh — runs every Go fuzz target of adksession for a bounded time each.
#
#   integration/testenv.sh integration/fuzz.sh          # what .ci/run does (FuzzRequest needs redis-server)
#   FUZZTIME=10m integration/testenv.sh integration/fuzz.sh FuzzEventCodec
#
# Each target is fuzzed on its own (`go test -fuzz` takes one at a time) for FUZZTIME (default 30s). A failing
# input is written under the package's testdata/fuzz/<Target>/ and the script exits non-zero: commit that file
# with the fix, so the input becomes a regular test (`go test` runs every seed corpus).
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."

targets=(
  "./service FuzzEventCodec"
  "./service FuzzSplitDelta"
  "./service FuzzEventJSON"
  "./persist FuzzEventForms"
  "./cache FuzzEscape"
  "./cache FuzzKeysDistinct"
  "./cache FuzzAppIndexMember"
  "./service/httpapi FuzzRequest"
)
time=${FUZZTIME:-30s}
rc=0
for t in "${targets[@]}"; do
  read -r pkg name <<<"$t"
  if [[ $# -gt 0 && ! " $* " =~ " $name " ]]; then
    continue
  fi
  echo "fuzz: $name ($pkg) for $time"
  if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$time" "$pkg"; then
    echo "fuzz: $name FAILED" >&2
    rc=1
  fi
done
exit "$rc"
