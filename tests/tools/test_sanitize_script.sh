#!/usr/bin/env bash
# tests/gpu/sanitize.sh against a stand-in sanitizer (tests/fake/
# fake_sanitizer.sh, and the acts below): each outcome gets its line, and the
# exit status is 1 exactly when a test reported errors, failed or ran no test,
# or when no test ran at all (every one skipped).
#
# Then the GPU tests' own skip (exit 77) against FSA_TEST_REQUIRE_GPU, with
# real GPU test binaries of the build (BUILD/tests: the first argument, else
# $FSA_TEST_BINARY_DIR, else the current directory, where ctest runs this) on
# stand-in drivers, so that the outcome is the same with or without a GPU.
#
#   tests/tools/test_sanitize_script.sh [BUILD/tests]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
script=$here/../gpu/sanitize.sh
bin=${1:-${FSA_TEST_BINARY_DIR:-$PWD}}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/build/tests"
for name in clean errors races norace fails skips slow slowbad norun allskip idle; do
  printf '#!/bin/sh\nexit 0\n' >"$work/build/tests/test_$name"
  chmod +x "$work/build/tests/test_$name"
done
# Three more acts, as cmocka prints them: norun (its filter matched no test) and allskip (every test
# called skip()), both exit 0, and idle (cut before any test passed); the rest as fake_sanitizer.sh
# acts them.
cat >"$work/sanitizer.sh" <<'EOF'
#!/usr/bin/env bash
exe=${*: -1}
case "${exe##*_}" in
  norun) echo "========= COMPUTE-SANITIZER"
         printf '[==========] Running 0 test(s).\n[==========] 0 test(s) run.\n[  PASSED  ] 0 test(s).\n'
         echo "========= ERROR SUMMARY: 0 errors"; exit 0 ;;
  allskip) echo "========= COMPUTE-SANITIZER"
           printf '[ RUN      ] a\n[  SKIPPED ] a\n[==========] 1 test(s) run.\n[  PASSED  ] 0 test(s).\n'
           echo "========= ERROR SUMMARY: 0 errors"; exit 0 ;;
  idle) echo "========= COMPUTE-SANITIZER"; exec sleep 60 ;;
esac
exec "$FSA_FAKE_SANITIZER" "$@"
EOF
chmod +x "$work/sanitizer.sh"
export COMPUTE_SANITIZER=$work/sanitizer.sh FSA_FAKE_SANITIZER=$here/../fake/fake_sanitizer.sh
export FSA_SANITIZE_SECONDS=1 FSA_SANITIZE_LOGS=$work/logs
failures=0

judge() { # <what ran> <exit status wanted> <line wanted (grep pattern)> <exit status> <output>
  local what=$1 want_rc=$2 want_line=$3 rc=$4 out=$5
  if [ "$rc" -ne "$want_rc" ] || ! grep -q -- "$want_line" <<<"$out"; then
    echo "FAIL: $what: wanted exit $want_rc and a line matching '$want_line', got exit $rc:"
    echo "$out"
    failures=$((failures + 1))
  else
    echo "ok: $what -> exit $rc: $(grep -- "$want_line" <<<"$out" | head -1)"
  fi
}

expect() { # <exit status wanted> <line wanted (grep pattern)> <test names...>
  local want_rc=$1 want_line=$2 out rc
  shift 2
  out=$(bash "$script" "$work/build" "$@" 2>&1)
  rc=$?
  judge "$*" "$want_rc" "$want_line" "$rc" "$out"
}

expect 0 '^test_clean: clean, ERROR SUMMARY: 0 errors, 2 tests passed' test_clean
expect 1 '^test_errors: errors, ERROR SUMMARY: 1 error' test_errors
# racecheck ends with its own summary line.
expect 1 '^test_races: errors, RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)' test_races
expect 0 '^test_norace: clean, RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings), 1 tests passed' test_norace
expect 1 '^test_fails: failed with exit status 1' test_fails
expect 0 '^test_slow: cut after 1 s, no error reported before (1 tests passed)' test_slow
expect 1 '^test_slowbad: reports before the limit' test_slowbad
expect 1 '^test_missing: failed (no executable' test_missing
# One bad test among clean ones still fails the run, and every test gets its line.
expect 1 '^test_skips: skipped' test_clean test_errors test_skips
# Every test skipped (or cut before one passed) is not a clean run; a skip among clean tests
# (test_multi_gpu on a one-GPU machine) is.
expect 1 '^test_skips: skipped' test_skips
expect 1 '^no test ran: all 2 skipped' test_skips test_idle
expect 0 '^test_skips: skipped' test_clean test_skips
# Exit 0 without a passed test: a filter that matched nothing, or every test skipped inside.
expect 1 '^test_norun: ran no test' test_norun
expect 1 '^test_allskip: ran no test' test_clean test_allskip
# No test named and CTest lists none of the gpu label: an error, not an empty success.
expect 2 '^error: no test of the gpu label'
if bash "$script" "$work/nowhere" >/dev/null 2>&1; then
  echo "FAIL: a folder that is not a build was accepted"
  failures=$((failures + 1))
fi

# FSA_TEST_REQUIRE_GPU: a GPU test that finds no usable GPU skips (77) by default and fails (1) with
# the variable set. The drivers: a libcuda.so.1 that is no driver (the stand-in NVRTC under that
# name: no cuGetProcAddress, FSA_STATUS_NO_DRIVER), and the fake driver (tests/fake/fake_cuda.c)
# with no device (FSA_STATUS_NO_DEVICE), a compute capability 7.5 device
# (FSA_STATUS_UNSUPPORTED_DEVICE) or one device (test_multi_gpu needs two: a skip even with the
# variable set).
gpu_expect() { # <exit status wanted> <stderr wanted (grep pattern)> <driver folder> <test> [NAME=value ...]
  local want_rc=$1 want_line=$2 driver=$3 test=$4 out rc
  shift 4
  out=$(env "$@" FSA_TEST_TMPDIR="$work/tmp" LD_LIBRARY_PATH="$driver${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        "$bin/$test" 2>&1 >/dev/null)
  rc=$?
  judge "$test with $* on $(basename "$driver")" "$want_rc" "$want_line" "$rc" "$out"
}
missing=""
for f in test_fill test_multi_gpu test_kvcache test_window fake_cuda/libcuda.so.1 fake_nvrtc/libnvrtc_fake.so; do
  [ -e "$bin/$f" ] || missing="$missing $f"
done
if [ -n "$missing" ]; then
  echo "FAIL: $bin is not a build's tests folder (it lacks$missing): pass BUILD/tests, or run through ctest"
  failures=$((failures + 1))
else
  mkdir -p "$work/nodriver" "$work/tmp"
  ln -s "$bin/fake_nvrtc/libnvrtc_fake.so" "$work/nodriver/libcuda.so.1"
  none=$work/nodriver fake=$bin/fake_cuda
  required='FSA_TEST_REQUIRE_GPU=1 says there is one'
  gpu_expect 77 '^skipping: no usable GPU .*FSA_STATUS_NO_DRIVER' "$none" test_fill FSA_TEST_REQUIRE_GPU=
  gpu_expect 77 '^skipping: no usable GPU .*FSA_STATUS_NO_DRIVER' "$none" test_fill FSA_TEST_REQUIRE_GPU=0
  gpu_expect 1 "$required.*FSA_STATUS_NO_DRIVER" "$none" test_fill FSA_TEST_REQUIRE_GPU=1
  # the library's switch words: "false" is off (it read as on), "maybe" an error
  gpu_expect 77 '^skipping: no usable GPU .*FSA_STATUS_NO_DRIVER' "$none" test_fill FSA_TEST_REQUIRE_GPU=false
  gpu_expect 1 'FSA_TEST_REQUIRE_GPU=yes says there is one.*FSA_STATUS_NO_DRIVER' "$none" test_fill FSA_TEST_REQUIRE_GPU=yes
  gpu_expect 1 '^FSA_TEST_REQUIRE_GPU=maybe: expected 1, on' "$none" test_fill FSA_TEST_REQUIRE_GPU=maybe
  gpu_expect 1 "$required.*FSA_STATUS_NO_DEVICE" "$fake" test_fill FSA_TEST_REQUIRE_GPU=1 FSA_FAKE_CUDA_DEVICES=0
  gpu_expect 77 '^skipping: no usable GPU .*FSA_STATUS_UNSUPPORTED_DEVICE' "$fake" test_fill FSA_FAKE_CUDA_CC=75
  gpu_expect 1 "$required.*FSA_STATUS_UNSUPPORTED_DEVICE" "$fake" test_fill FSA_TEST_REQUIRE_GPU=1 FSA_FAKE_CUDA_CC=75
  # The paged-cache fixture makes its context through the same check.
  gpu_expect 1 "$required.*FSA_STATUS_NO_DRIVER" "$none" test_kvcache FSA_TEST_REQUIRE_GPU=1
  gpu_expect 77 '^skipping: .*FSA_STATUS_NO_DRIVER' "$none" test_multi_gpu FSA_TEST_REQUIRE_GPU=
  gpu_expect 1 "$required.*FSA_STATUS_NO_DRIVER" "$none" test_multi_gpu FSA_TEST_REQUIRE_GPU=1
  gpu_expect 1 "$required: the driver counts no device" "$fake" test_multi_gpu FSA_TEST_REQUIRE_GPU=1 \
    FSA_FAKE_CUDA_DEVICES=0
  gpu_expect 77 '^skipping: needs 2 GPUs (1 present)' "$fake" test_multi_gpu FSA_TEST_REQUIRE_GPU=1 \
    FSA_FAKE_CUDA_DEVICES=1
  # A case list that names no case fails before any GPU is looked for.
  gpu_expect 1 'no case is named "no_such_case"' "$none" test_kvcache \
    FSA_TEST_CASES=bf16_d128_g1_prefill1000,no_such_case
  gpu_expect 1 'FSA_TEST_CASES is set but names no case' "$none" test_kvcache FSA_TEST_CASES=
  # So does a layout list that names no layout (1 or 2).
  gpu_expect 1 'FSA_TEST_LAYOUTS=1,3: no layout (1 or 2) is named "3"' "$none" test_window FSA_TEST_LAYOUTS=1,3
  gpu_expect 1 'FSA_TEST_LAYOUTS is set but names no layout' "$none" test_window FSA_TEST_LAYOUTS=,
fi
exit $((failures > 0))
