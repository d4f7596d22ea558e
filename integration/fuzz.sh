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
  "./service FuzzEventDecode"
  "./cache/eventjson FuzzEventForms"
  "./cache/eventjson FuzzAPIEvent"
  "./cache/eventjson FuzzCompact"
  "./cache/eventjson FuzzAppendString"
  "./cache FuzzEscape"
  "./cache FuzzKeysDistinct"
  "./cache FuzzAppIndexMember"
  "./service/httpapi FuzzRequest"
)
time=${FUZZTIME:-30s}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# fuzz_one runs one target. Go 1.26's fuzz coordinator can end a duration-bound run with a bare "context
# deadline exceeded" and no failing input, when a starved worker is still mid-call as -fuzztime expires
# (go.dev/issue/75804, fixed in Go 1.27). That run found nothing: it is run again, up to twice. Any other
# failure, and any run that writes a failing input, fails the script.
fuzz_one() {
  local pkg=$1 name=$2 attempt
  for attempt in 1 2 3; do
    if go test -run '^$' -fuzz "^${name}\$" -fuzztime "$time" "$pkg" 2>&1 | tee "$out"; then
      return 0
    fi
    if grep -q 'Failing input written' "$out" || ! grep -qx '    context deadline exceeded' "$out"; then
      return 1
    fi
    echo "fuzz: $name ended on the coordinator's deadline race (go.dev/issue/75804), no failing input: run $attempt of 3" >&2
  done
  return 1
}

rc=0
for t in "${targets[@]}"; do
  read -r pkg name <<<"$t"
  if [[ $# -gt 0 && ! " $* " =~ " $name " ]]; then
    continue
  fi
  echo "fuzz: $name ($pkg) for $time"
  if ! fuzz_one "$pkg" "$name"; then
    echo "fuzz: $name FAILED" >&2
    rc=1
  fi
done
exit "$rc"
