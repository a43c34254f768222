#!/usr/bin/env bash
# Stands in for compute-sanitizer in tests of tests/gpu/sanitize.sh: called as
# `fake_sanitizer.sh --tool T --error-exitcode N --print-limit M EXE`, it acts
# out what the test executable's name asks for (its part after the last '_').
echo "========= COMPUTE-SANITIZER"
exe=${*: -1}
case "${exe##*_}" in
  clean) printf '[ RUN      ] a\n[       OK ] a\n[ RUN      ] b\n[       OK ] b\n'
         echo "========= ERROR SUMMARY: 0 errors"; exit 0 ;;
  errors) echo "========= Invalid __global__ read of size 4 bytes"
          echo "========= ERROR SUMMARY: 1 error"; exit 99 ;;
  fails) echo "[  FAILED  ] a"; echo "========= ERROR SUMMARY: 0 errors"; exit 1 ;;
  races) echo "========= Error: Race reported between Write access at k+0x10 in k.cu:3"
         echo "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)"; exit 99 ;;
  norace) echo "[       OK ] a"; echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"; exit 0 ;;
  skips) exit 77 ;;
  slow) echo "[       OK ] a"; exec sleep 60 ;;
  slowbad) echo "========= Invalid __global__ write of size 8 bytes"; exec sleep 60 ;;
esac
echo "fake_sanitizer.sh: no act for $exe" >&2
exit 3
