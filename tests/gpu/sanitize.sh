#!/usr/bin/env bash
# Runs GPU tests under compute-sanitizer, each on its quick subset
# (FSA_TEST_QUICK=1), and prints one line per test: clean, errors, failed,
# ran no test (exit 0 without one passed test: a filter that matched
# nothing, every case skipped), skipped (no GPU: exit 77) or cut (past the
# time limit, with no error reported before it).
#
#   tests/gpu/sanitize.sh BUILD_DIR [TEST ...]
#
# TEST names a test of the `gpu` label (test_selected_bwd, ...); none: all of
# them. Environment: FSA_SANITIZE_TOOL (memcheck; racecheck, initcheck and
# synccheck work too), FSA_SANITIZE_SECONDS (per test, 600), COMPUTE_SANITIZER
# (the program; else compute-sanitizer on PATH or in /usr/local/cuda/bin).
# Exit status: 0 when no test reported an error, failed or ran no test, and at
# least one ran (clean, or cut after a passed test), else 1: every test
# skipped is a failure, not a clean run (test_multi_gpu skipping on a one-GPU
# machine among clean tests is fine). A cut test counts as neither: its line
# says how far it got (the log keeps the rest).
set -uo pipefail

usage() { echo "usage: $0 BUILD_DIR [TEST ...]" >&2; exit 2; }
[ $# -ge 1 ] || usage
build=$1
shift
[ -d "$build/tests" ] || { echo "error: $build/tests is not a build's test folder" >&2; exit 2; }

sanitizer=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
[ -x "$sanitizer" ] || { echo "error: compute-sanitizer not found (set COMPUTE_SANITIZER)" >&2; exit 2; }
tool=${FSA_SANITIZE_TOOL:-memcheck}
seconds=${FSA_SANITIZE_SECONDS:-600}

if [ $# -eq 0 ]; then
  # The gpu label's tests, as CTest lists them.
  mapfile -t tests < <(ctest --test-dir "$build" -N -L gpu | sed -n 's/^ *Test *#[0-9]*: *//p')
  [ ${#tests[@]} -gt 0 ] || { echo "error: no test of the gpu label in $build" >&2; exit 2; }
else
  tests=("$@")
fi

logs=${FSA_SANITIZE_LOGS:-$build/sanitize}
mkdir -p "$logs"
export FSA_TEST_QUICK=1 FSA_TEST_TMPDIR="$build/tests/tmp" FSA_TEST_BINARY_DIR="$build/tests"
mkdir -p "$FSA_TEST_TMPDIR"

bad=0
ran=0
for t in "${tests[@]}"; do
  exe="$build/tests/$t"
  log="$logs/$t.$tool.log"
  if [ ! -x "$exe" ]; then
    echo "$t: failed (no executable $exe)"
    bad=1
    continue
  fi
  start=$(date +%s)
  timeout --signal=INT --kill-after=15 "$seconds" \
    "$sanitizer" --tool "$tool" --error-exitcode 99 --print-limit 20 "$exe" >"$log" 2>&1
  rc=$?
  took=$(($(date +%s) - start))
  summary=$(grep -oE '(ERROR SUMMARY: [0-9]+ errors?|RACECHECK SUMMARY: [0-9]+ hazards? displayed \([0-9]+ errors?, [0-9]+ warnings?\))' "$log" | tail -1)
  passed=$(grep -c '^\[       OK \]' "$log")
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    # A report's first line: "========= Invalid __global__ read ...", "========= Program hit ...".
    if grep -v '^========= \(COMPUTE-SANITIZER\|ERROR SUMMARY\)' "$log" | grep -q '^========= [A-Za-z]'; then
      echo "$t: reports before the limit of ${seconds} s (see $log)"
      bad=1
    else
      echo "$t: cut after ${seconds} s, no error reported before ($passed tests passed)"
      [ "$passed" -gt 0 ] && ran=$((ran + 1))
    fi
  elif [ $rc -eq 77 ]; then
    echo "$t: skipped (no usable GPU)"
  elif [ $rc -eq 99 ]; then
    echo "$t: errors, ${summary:-no summary} (see $log)"
    bad=1
  elif [ $rc -ne 0 ]; then
    echo "$t: failed with exit status $rc, ${summary:-no summary} (see $log)"
    bad=1
  elif [ "$passed" -eq 0 ]; then
    # cmocka exits 0 when its filter matched no test or every test called skip().
    echo "$t: ran no test (exit 0 and no passed test), ${summary:-no summary} (see $log)"
    bad=1
  else
    echo "$t: clean, ${summary:-no summary}, $passed tests passed in ${took} s"
    ran=$((ran + 1))
  fi
done
if [ $bad -eq 0 ] && [ $ran -eq 0 ]; then
  echo "no test ran: all ${#tests[@]} skipped or were cut before one passed (no usable GPU?)"
  bad=1
fi
exit $bad
