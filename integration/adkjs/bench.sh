#!/usr/bin/env bash
# integration/adkjs/bench.sh — ADK JS's own DatabaseSessionService and adksession (flusher on) appending into the
# same Postgres, one after the other in one run (docs/benchmarks.md, "ADK JS on the same Postgres").
#
#   integration/adkjs/bench.sh [--database URL] [--redis URL] [--sessions S] [--events E] [--concurrency C] [--keep]
#
# --database  a Postgres server (the database named in the URL is only used to connect): the script creates two
#             fresh databases of its own there, adkjs_bench_<run> and adksession_bench_<run>, and drops those two
#             (and no other) at the end unless --keep. Default: $ADKSESSION_TEST_DATABASE_URL.
# --redis     the Redis of adksession; its keys go to a namespace of their own, deleted at the end unless --keep.
#             Default: $ADKSESSION_TEST_REDIS_URL.
# When those variables are unset, /tmp/devenv.sh is sourced if present; or run the script under the test harness,
# which starts throwaway servers: integration/testenv.sh integration/adkjs/bench.sh
#
# Needs node and npm (ADK JS is installed with `npm ci` from package-lock.json into a temp dir), psql, go; not
# part of the CI test command since it needs the npm registry.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
sessions=100 events=50 concurrency=10 keep=0
database=${ADKSESSION_TEST_DATABASE_URL:-} redis=${ADKSESSION_TEST_REDIS_URL:-}
if [[ -z $database || -z $redis ]] && [[ -f /tmp/devenv.sh ]]; then
	# shellcheck disable=SC1091
	source /tmp/devenv.sh
	database=${database:-${ADKSESSION_TEST_DATABASE_URL:-}} redis=${redis:-${ADKSESSION_TEST_REDIS_URL:-}}
fi
while [[ $# -gt 0 ]]; do
	case $1 in
	--database) database=$2; shift 2 ;;
	--redis) redis=$2; shift 2 ;;
	--sessions) sessions=$2; shift 2 ;;
	--events) events=$2; shift 2 ;;
	--concurrency) concurrency=$2; shift 2 ;;
	--keep) keep=1; shift ;;
	*) echo "usage: $0 [--database URL] [--redis URL] [--sessions S] [--events E] [--concurrency C] [--keep]" >&2; exit 2 ;;
	esac
done
[[ -n $database && -n $redis ]] || { echo "$0: no --database or --redis (and no ADKSESSION_TEST_* variables)" >&2; exit 2; }
for tool in node npm psql go; do
	command -v "$tool" >/dev/null || { echo "$0: $tool not found" >&2; exit 2; }
done

# database_url URL NAME: URL with its database replaced by NAME (query kept).
database_url() {
	[[ $1 =~ ^(postgres(ql)?://[^/?]+)(/[^?]*)?(\?.*)?$ ]] || { echo "$0: not a postgres:// URL" >&2; exit 2; }
	echo "${BASH_REMATCH[1]}/$2${BASH_REMATCH[4]}"
}
run=$(date -u +%Y%m%d%H%M%S)_$$
jsdb=adkjs_bench_$run godb=adksession_bench_$run namespace=adkjs-bench-$run:
work=$(mktemp -d)
cleanup() {
	rm -rf "$work"
	if [[ $keep == 0 ]]; then
		for db in "$jsdb" "$godb"; do
			psql -q "$database" -c "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true
		done
		if command -v redis-cli >/dev/null; then
			redis-cli -u "$redis" --scan --pattern "$namespace*" | xargs -r -n 500 redis-cli -u "$redis" UNLINK >/dev/null || true
		fi
	fi
}
trap cleanup EXIT
for db in "$jsdb" "$godb"; do
	psql -q "$database" -c "CREATE DATABASE $db" >/dev/null
done

echo "== installing ADK JS (npm ci)"
cp "$here/package.json" "$here/package-lock.json" "$here/.npmrc" "$here/bench.mjs" "$work/"
(cd "$work" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
echo "== building adksession"
(cd "$repo" && go build -o "$work/adksession" ./cmd/adksession)

load() { echo "load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"; }
echo "== ADK JS DatabaseSessionService → $(database_url "$database" "$jsdb" | sed -E 's#//[^@/]*@#//#')   ($(load))"
node "$work/bench.mjs" "$(database_url "$database" "$jsdb")" "$sessions" "$events" "$concurrency" | tee "$work/adkjs.out"
echo "== adksession bench (flusher on) → $(database_url "$database" "$godb" | sed -E 's#//[^@/]*@#//#')   ($(load))"
"$work/adksession" bench --redis "$redis" --database "$(database_url "$database" "$godb")" --namespace "$namespace" \
	--sessions "$sessions" --events "$events" --concurrency "$concurrency" --payload 200 --no-ceiling | tee "$work/adksession.out"
# rows_check NAME: the events in database NAME's events table must be S×E.
rows_check() {
	local n
	n=$(psql -Atq "$(database_url "$database" "$1")" -c "SELECT count(*) FROM events")
	echo "postgres      $n event rows in $1"
	[[ $n == $((sessions * events)) ]] || { echo "$0: want $((sessions * events)) event rows" >&2; exit 1; }
}
rows_check "$jsdb"
rows_check "$godb"
echo "== same run, $sessions sessions × $events events, concurrency $concurrency ($(load))"
echo "ADK JS      $(grep '^appends' "$work/adkjs.out")"
echo "adksession  $(grep '^appends' "$work/adksession.out")"
