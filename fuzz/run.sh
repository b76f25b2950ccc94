#!/usr/bin/env bash
# Runs fuzz targets (all, or those named) for FUZZ_SECONDS each, FUZZ_JOBS at a time, and prints
# one line per target: executions, corpus size, crashes. A crash leaves its input in
# fuzz/artifacts/<target>/; fix it, then copy the input into fuzz/corpus/<target>/.
set -uo pipefail
cd "$(dirname "$0")"
seconds="${FUZZ_SECONDS:-60}"
jobs="${FUZZ_JOBS:-2}"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(RUSTC_BOOTSTRAP=1 cargo fuzz list)
mkdir -p logs
run() {
  local t="$1"
  mkdir -p "corpus/$t"
  RUSTC_BOOTSTRAP=1 cargo fuzz run -O "$t" "corpus/$t" -- -max_total_time="$seconds" \
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
status=0
running=0
for t in "${targets[@]}"; do
  run "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n || status=1; running=$((running - 1)); fi
done
while [ "$running" -gt 0 ]; do wait -n || status=1; running=$((running - 1)); done
exit $status
