#!/usr/bin/env bash
# Runs fuzz targets (all, or those named) for FUZZ_SECONDS each, FUZZ_JOBS at a time, and prints
# one line per target: executions, corpus size, crashes. Each target starts from the committed
# seeds (fuzz/seeds/<target>/, read only) and its local corpus (fuzz/corpus/<target>/,
# git-ignored), and writes what it finds to the local corpus. A crash leaves its input in
# fuzz/artifacts/<target>/; fix it, then copy the input into fuzz/seeds/<target>/ so `make unit`
# replays it from then on.
#
# `run.sh --minimize [targets]` instead rewrites fuzz/seeds/<target>/ as the smallest inputs of
# seeds and corpus that keep every coverage edge they reach (libFuzzer's merge, smallest first,
# edges without hit counts), to commit after a run; crash inputs kept in the seeds stay.
set -uo pipefail
cd "$(dirname "$0")"
seconds="${FUZZ_SECONDS:-60}"
jobs="${FUZZ_JOBS:-2}"
minimize=0
if [ "${1:-}" = "--minimize" ]; then
  minimize=1
  shift
fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(RUSTC_BOOTSTRAP=1 cargo fuzz list)
mkdir -p logs
run() {
  local t="$1"
  mkdir -p "corpus/$t" "seeds/$t"
  RUSTC_BOOTSTRAP=1 cargo fuzz run -O "$t" "corpus/$t" "seeds/$t" -- -max_total_time="$seconds" \
    -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 >"logs/$t.log" 2>&1
  local rc=$?
  local execs corpus
  execs=$(grep -E '^stat::number_of_executed_units' "logs/$t.log" | awk '{print $2}')
  corpus=$(ls "corpus/$t" | wc -l)
  if [ $rc -eq 0 ]; then
    printf '%-14s %12s execs in %ss  corpus %5s  crashes 0\n' "$t" "${execs:-?}" "$seconds" "$corpus"
  else
    printf '%-14s %12s execs          corpus %5s  CRASH (see fuzz/logs/%s.log, fuzz/artifacts/%s/)\n' "$t" "${execs:-?}" "$corpus" "$t" "$t"
  fi
  return $rc
}
minimize() {
  local t="$1" bin="target/x86_64-unknown-linux-gnu/release/$1"
  local fresh
  fresh=$(mktemp -d)
  mkdir -p "corpus/$t" "seeds/$t"
  # Crash inputs (named so by libFuzzer) stay whatever coverage they add.
  find "seeds/$t" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'oom-*' -o -name 'timeout-*' -o -name 'slow-unit-*' \) \
    -exec cp {} "$fresh/" \;
  if ! "$bin" -merge=1 -use_counters=0 -rss_limit_mb=2048 -max_len=65536 "$fresh" "seeds/$t" "corpus/$t" \
    >"logs/minimize-$t.log" 2>&1; then
    echo "$t: merge failed (see fuzz/logs/minimize-$t.log)"
    rm -rf "$fresh"
    return 1
  fi
  rm -rf "seeds/$t"
  mv "$fresh" "seeds/$t"
  chmod 755 "seeds/$t"
  printf '%-14s seeds %5s files %9s bytes\n' "$t" "$(ls "seeds/$t" | wc -l)" "$(cat "seeds/$t"/* | wc -c)"
}
status=0
running=0
for t in "${targets[@]}"; do
  if [ $minimize -eq 1 ]; then
    minimize "$t" || status=1
    continue
  fi
  run "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n || status=1; running=$((running - 1)); fi
done
while [ "$running" -gt 0 ]; do wait -n || status=1; running=$((running - 1)); done
exit $status
