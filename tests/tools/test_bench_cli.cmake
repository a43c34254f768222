# fsa-bench's command line, without a GPU: --help and --version need no
# driver, usage errors exit 2 with the usage on stderr, lists and byte
# counts parse as documented (--dry-run prints what would run).
#
#   cmake -DBENCH=<fsa-bench> -P test_bench_cli.cmake

cmake_minimum_required(VERSION 3.21)

# run(<expected exit code> <args...>): OUT and ERR hold stdout and stderr.
function(run expected)
  execute_process(COMMAND "${BENCH}" ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REPLACE ";" " " shown "${ARGN}")
  message(STATUS "fsa-bench ${shown} -> ${rc}")
  if(NOT "${rc}" STREQUAL "${expected}")
    message(FATAL_ERROR "fsa-bench ${shown}: exit code ${rc}, expected ${expected}\n${out}\n${err}")
  endif()
  set(OUT "${out}" PARENT_SCOPE)
  set(ERR "${err}" PARENT_SCOPE)
endfunction()

function(expect text regex what)
  if(NOT text MATCHES "${regex}")
    message(FATAL_ERROR "${what}: no match for '${regex}' in:\n${text}")
  endif()
endfunction()

# Help and version: stdout, exit 0, no driver involved.
run(0 --help)
expect("${OUT}" "^Usage: fsa-bench" "help on stdout")
expect("${OUT}" "Exit status: 0 success; 1 .*; 2 usage error; 3 " "exit codes documented")
run(0 --version)
expect("${OUT}" "^fsa-bench [0-9]+\\.[0-9]+\\.[0-9]+\n$" "version")

# Usage errors: exit 2, message and usage on stderr, nothing on stdout.
foreach(args "--bogus" "--dtype;fp8" "--dtype;float32" "--workspace-limit;2GB" "-T;8192,x" "-G;0"
             "--only;both" "-D" "--min-ms;-1" "--standard;--jit" "--standard;-T;8192" "extra")
  run(2 ${args})
  expect("${ERR}" "^fsa-bench: .*\nUsage: fsa-bench" "usage error for ${args}")
  if(NOT OUT STREQUAL "")
    message(FATAL_ERROR "usage error for ${args} wrote to stdout:\n${OUT}")
  endif()
endforeach()

# Lists are never cut: 64 values are taken, 65 refused.
set(values "")
foreach(i RANGE 1 65)
  list(APPEND values ${i})
endforeach()
list(JOIN values "," list65)
list(REMOVE_AT values 64)
list(JOIN values "," list64)
run(2 -T ${list65} --dry-run)
expect("${ERR}" "-T: more than 64 values" "list over the maximum")
run(0 -T ${list64} --dry-run)
expect("${OUT}" "# T 1,2,[0-9,]*,63,64; G" "64 values kept")

# One set of dtype spellings; byte counts with suffixes.
foreach(spelling fp16 f16 float16 half FP16)
  run(0 --dtype ${spelling} --dry-run)
  expect("${OUT}" "dtype f16," "${spelling} is f16")
endforeach()
foreach(spelling bf16 bfloat16)
  run(0 --dtype ${spelling} --dry-run)
  expect("${OUT}" "dtype bf16," "${spelling} is bf16")
endforeach()
run(0 --workspace-limit 2G --dry-run)
expect("${OUT}" "workspace limit 2147483648 B" "2G is 2 GiB")
run(0 --workspace-limit 512m --dry-run)
expect("${OUT}" "workspace limit 536870912 B" "512m is 512 MiB")

message(STATUS "fsa-bench command line: all checks passed")

# --decode and --window: the same conventions (help on stdout, usage errors
# exit 2 with the mode's usage on stderr); each further argument is one
# command line after the mode.
function(check_mode mode)
  run(0 ${mode} --help)
  expect("${OUT}" "^Usage: fsa-bench ${mode}" "${mode} help on stdout")
  math(EXPR last "${ARGC} - 1")
  foreach(i RANGE 1 ${last})
    set(args "${ARGV${i}}")
    run(2 ${mode} ${args})
    expect("${ERR}" "^fsa-bench ${mode}: .*\nUsage: fsa-bench ${mode}" "${mode} usage error for ${args}")
    if(NOT OUT STREQUAL "")
      message(FATAL_ERROR "${mode} usage error for ${args} wrote to stdout:\n${OUT}")
    endif()
  endforeach()
endfunction()
check_mode(--decode "--bogus" "-L;1,x" "-B;0" "-G;1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17" "--reps;0" "--splits;-1"
           "extra")
check_mode(--window "--bogus" "-T;1,x" "-T;0" "--reps;0" "--window;-1" "--dtype;fp8" "extra")
