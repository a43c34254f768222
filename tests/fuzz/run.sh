#!/usr/bin/env bash
# tests/fuzz/run.sh BUILD_DIR [RUNS | SECONDSs]
# Runs every libFuzzer harness of a build configured with -DFSA_FUZZ=ON:
# deterministic by default (-seed=1, RUNS inputs each, default 200000, after
# the committed seeds in tests/fuzz/corpus/<harness>/), or for SECONDS each
# with a trailing "s" (e.g. 600s: real fuzzing, a random seed). Exits 1 on
# the first crash, leak, sanitizer report or failed assertion, leaving the
# input that caused it (crash-*, leak-*, ...) in BUILD_DIR/fuzz-artifacts.
# Kernels the harnesses compile stay in BUILD_DIR/fuzz-cache for later runs;
# inputs they find go to BUILD_DIR/fuzz-corpus/<harness>/, never to the
# source tree.
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 BUILD_DIR [RUNS | SECONDSs]" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
amount=${2:-200000}
here=$(cd "$(dirname "$0")" && pwd)
case "$amount" in
  *[!0-9]*s | s) echo "error: '$amount' is neither RUNS nor SECONDSs" >&2; exit 2 ;;
  *s) limit=(-max_total_time="${amount%s}") ;;
  *[!0-9]* | "") echo "error: '$amount' is neither RUNS nor SECONDSs" >&2; exit 2 ;;
  *) limit=(-seed=1 -runs="$amount") ;;
esac

artifacts="$build/fuzz-artifacts"
mkdir -p "$artifacts" "$build/fuzz-cache"
# A leak or a UBSan report fails the run as a crash does.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export FSA_FUZZ_CACHE_DIR="$build/fuzz-cache"

status=0
for name in fuzz_args fuzz_desc fuzz_cache_entry; do
  bin="$build/tests/fuzz/$name"
  if [ ! -x "$bin" ]; then
    echo "error: $bin not built (configure with CC=clang -DFSA_FUZZ=ON)" >&2
    exit 1
  fi
  # The first directory collects what this run finds; the seeds are read only.
  corpus="$build/fuzz-corpus/$name"
  mkdir -p "$corpus"
  seeds=()
  [ -d "$here/corpus/$name" ] && seeds=("$here/corpus/$name")
  # fuzz_cache_entry gets a cache of its own, created fresh in $TMPDIR.
  [ "$name" = fuzz_cache_entry ] && cache_env=(env -u FSA_FUZZ_CACHE_DIR) || cache_env=(env)
  start=$SECONDS
  log="$artifacts/$name.log"
  if "${cache_env[@]}" "$bin" "${limit[@]}" -timeout=30 -artifact_prefix="$artifacts/$name-" \
       -print_final_stats=1 "$corpus" "${seeds[@]}" >"$log" 2>&1; then
    printf '%-18s ok   %4ds  %s\n' "$name" $((SECONDS - start)) "$(grep -o 'Done [0-9]* runs' "$log" | tail -1)"
  else
    printf '%-18s FAIL %4ds  (log: %s)\n' "$name" $((SECONDS - start)) "$log"
    tail -n 40 "$log"
    status=1
    break
  fi
done
exit $status
