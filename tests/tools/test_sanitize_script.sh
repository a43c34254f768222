#!/usr/bin/env bash
# tests/gpu/sanitize.sh against a stand-in sanitizer (tests/fake/
# fake_sanitizer.sh): each outcome gets its line, and the exit status is 1
# exactly when a test reported errors or failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
script=$here/../gpu/sanitize.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/build/tests"
for name in clean errors races norace fails skips slow slowbad; do
  printf '#!/bin/sh\nexit 0\n' >"$work/build/tests/test_$name"
  chmod +x "$work/build/tests/test_$name"
done
export COMPUTE_SANITIZER=$here/../fake/fake_sanitizer.sh FSA_SANITIZE_SECONDS=1 FSA_SANITIZE_LOGS=$work/logs
failures=0

expect() { # <exit status wanted> <line wanted (grep pattern)> <test names...>
  local want_rc=$1 want_line=$2 out rc
  shift 2
  out=$(bash "$script" "$work/build" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$want_rc" ] || ! grep -q -- "$want_line" <<<"$out"; then
    echo "FAIL: $*: wanted exit $want_rc and a line matching '$want_line', got exit $rc:"
    echo "$out"
    failures=$((failures + 1))
  else
    echo "ok: $* -> exit $rc: $(grep -- "$want_line" <<<"$out" | head -1)"
  fi
}

expect 0 '^test_clean: clean, ERROR SUMMARY: 0 errors, 2 tests passed' test_clean
expect 1 '^test_errors: errors, ERROR SUMMARY: 1 error' test_errors
# racecheck ends with its own summary line.
expect 1 '^test_races: errors, RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)' test_races
expect 0 '^test_norace: clean, RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings), 1 tests passed' test_norace
expect 1 '^test_fails: failed with exit status 1' test_fails
expect 0 '^test_skips: skipped' test_skips
expect 0 '^test_slow: cut after 1 s, no error reported before (1 tests passed)' test_slow
expect 1 '^test_slowbad: reports before the limit' test_slowbad
expect 1 '^test_missing: failed (no executable' test_missing
# One bad test among clean ones still fails the run, and every test gets its line.
expect 1 '^test_skips: skipped' test_clean test_errors test_skips
# No test named and CTest lists none of the gpu label: an error, not an empty success.
expect 2 '^error: no test of the gpu label'
if bash "$script" "$work/nowhere" >/dev/null 2>&1; then
  echo "FAIL: a folder that is not a build was accepted"
  failures=$((failures + 1))
fi
exit $((failures > 0))
