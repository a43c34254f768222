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
foreach(mode --decode --compressed --window)  # every mode's options take it too
  run(0 ${mode} --version)
  expect("${OUT}" "^fsa-bench [0-9]+\\.[0-9]+\\.[0-9]+\n$" "${mode} --version")
endforeach()

# Usage errors: exit 2, message and usage on stderr, nothing on stdout.
# Also: a group that does not divide --q-heads (its rows would be left out); --standard with heads its
# groups 1..16 do not divide, or with -D (it has its own); --jit with options it would ignore; numbers
# with a space, a sign or hex. All before any driver is loaded (exit 2, not 3).
foreach(args "--bogus" "--dtype;fp8" "--dtype;float32" "--workspace-limit;2GB" "-T;8192,x" "-G;0"
             "--only;both" "-D" "--min-ms;-1" "--standard;--jit" "--standard;-T;8192" "extra"
             "-G;3" "--q-heads;24;-G;16" "--standard;--q-heads;12" "--standard;-D;64" "--jit;--json;x.json"
             "--jit;--dtype;f16" "--jit;-D;64" "--jit;--tune" "--jit;--cache-dir;x" "--jit;--backward"
             "--min-ms; 5" "--min-ms;0x10" "--min-ms;inf" "-T;+8" "-D;+64" "--q-heads; 32"
             "--tolerance;x" "--tolerance;-1" "--tolerance;nan")
  run(2 ${args})
  expect("${ERR}" "^fsa-bench: .*\nUsage: fsa-bench" "usage error for ${args}")
  if(NOT OUT STREQUAL "")
    message(FATAL_ERROR "usage error for ${args} wrote to stdout:\n${OUT}")
  endif()
endforeach()

# An empty --json path (a variable that was never set) is a usage error, not a file that cannot be opened
# after the GPU is set up: "--json=" gives the empty word, which a CMake list cannot hold.
run(2 --json= --dry-run)
expect("${ERR}" "^fsa-bench: --json: empty file name\nUsage: fsa-bench" "empty --json refused")
foreach(mode compressed window)
  run(2 --${mode} --json= --dry-run)
  expect("${ERR}" "^fsa-bench --${mode}: --json: empty file name\nUsage: fsa-bench --${mode}" "${mode}: empty --json refused")
endforeach()

# Shapes every plan would refuse are usage errors when parsed, so --dry-run catches them; the message names
# the option and what the library takes.
run(2 -D 65536 --dry-run)
expect("${ERR}" "^fsa-bench: -D 65536: the library takes a multiple of 16 from 16 to 256\n" "-D out of the library's range")
run(2 --top-k 65 --dry-run)
expect("${ERR}" "^fsa-bench: --top-k 65: the library takes 1 to 64\n" "--top-k out of the library's range")
run(2 --block-size 48 --dry-run)
expect("${ERR}" "^fsa-bench: --block-size 48: the library takes 16, 32," "--block-size not a block size")
run(2 --value-dim 100 --dry-run)
expect("${ERR}" "^fsa-bench: --value-dim 100: the library takes" "--value-dim not a multiple of 16")
run(2 --window -D 1024 --dry-run)
expect("${ERR}" "^fsa-bench --window: -D 1024: the library takes" "--window -D out of the library's range")
run(2 --compressed -G 32 --dry-run)
expect("${ERR}" "^fsa-bench --compressed: -G 32: the library takes groups 1 to 16\n" "--compressed group over 16")
foreach(args "--kernel-size;5000" "--stride;40" "--top-k;65" "--block-size;48" "--kernel-size;2048")
  run(2 --compressed ${args} --dry-run)
  list(GET args 0 option)
  expect("${ERR}" "^fsa-bench --compressed: ${option} [0-9]+: the library takes" "--compressed ${args} refused")
endforeach()
run(0 --compressed --top-k 0 --block-size 48 --dry-run)  # no selection: the block size is not used
run(0 -D 192 --value-dim 128 --dry-run)

# A mode word (--decode, --compressed, --window) after another option is named as such.
run(2 --dry-run --window)
expect("${ERR}" "^fsa-bench: --window: the mode word must come first" "mode word not first")
if(NOT OUT STREQUAL "")
  message(FATAL_ERROR "a mode word not first wrote to stdout:\n${OUT}")
endif()

run(2 --jit --json x.json)
expect("${ERR}" "option not taken by --jit: --json" "--jit names the option it does not take")
run(0 --jit --dry-run)
run(0 --standard --q-heads 48 --dry-run)
expect("${OUT}" "--standard, D 128 \\(and 64, 256 at T 16384\\), Hq 48," "--standard with a multiple of 16 heads")
run(0 --min-ms .5 --warmup-ms 1e1 --dry-run)
run(0 -T 8192 -G 3 --q-heads 48 --dry-run)
expect("${OUT}" "# T 8192; G 3\n" "a group that divides --q-heads")

# The refused option is named: a short one by its letter, even inside a cluster.
foreach(args "-zq" "-T8;-zq")
  run(2 ${args})
  expect("${ERR}" "^fsa-bench: unknown option '-z'\n" "short option named for ${args}")
endforeach()
run(2 --help=1)
expect("${ERR}" "^fsa-bench: no value taken by option '--help=1'\n" "long option named by its word, with why")
# A prefix of several long options is ambiguous, not unknown; a unique prefix is taken.
run(2 --j)
expect("${ERR}" "^fsa-bench: ambiguous option '--j'\n" "an ambiguous prefix said so")
run(2 --bogus)
expect("${ERR}" "^fsa-bench: unknown option '--bogus'\n" "an unknown word said so")
run(0 --dry --stand)
run(2 --decode --no)
expect("${ERR}" "^fsa-bench --decode: ambiguous option: --no\n" "--decode: an ambiguous prefix said so")
run(2 --decode --hnd=1)
expect("${ERR}" "^fsa-bench --decode: no value taken by option: --hnd=1\n" "--decode: a value for a flag said so")
run(2 --decode --reps)
expect("${ERR}" "^fsa-bench --decode: option needs a value: --reps\n" "--decode: a missing value said so")
run(2 --window --dry-run=1)
expect("${ERR}" "^fsa-bench --window: no value taken by option: --dry-run=1\n" "--window: a value for a flag said so")

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
run(0 --dry-run)
expect("${OUT}" "workspace limit default\n" "no option is the library's default cap")
run(0 --workspace-limit unlimited --dry-run)
expect("${OUT}" "workspace limit unlimited" "'unlimited' is no cap")

message(STATUS "fsa-bench command line: all checks passed")

# --decode: the same conventions (help on stdout, usage errors exit 2 with the usage on stderr).
run(0 --decode --help)
expect("${OUT}" "^Usage: fsa-bench --decode" "decode help on stdout")
expect("${OUT}" "Exit status: 0 success; 1 .*; 2 usage error; 3 no CUDA driver, no\nusable GPU, or a library setting" "decode exit codes: 3 also without a usable GPU or with a refused setting")
# Also: a group that does not divide the 32 query heads, a batch over the plan's 256, a number with a space.
foreach(args "--decode;--bogus" "--decode;-L;1,x" "--decode;-B;0" "--decode;-G;1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17"
             "--decode;--reps;0" "--decode;--splits;-1" "--decode;--value-dim;100" "--decode;--value-dim;512"
             "--decode;extra" "--decode;-G;3" "--decode;-B;300" "--decode;-B;1048576;-L;1073741824"
             "--decode;--max-gb; 1" "--decode;--reps;+3" "--decode;--stamps=")
  run(2 ${args})
  expect("${ERR}" "^fsa-bench --decode: .*\nUsage: fsa-bench --decode" "decode usage error for ${args}")
  if(NOT OUT STREQUAL "")
    message(FATAL_ERROR "decode usage error for ${args} wrote to stdout:\n${OUT}")
  endif()
endforeach()

run(2 --decode -zq)
expect("${ERR}" "^fsa-bench --decode: [^\n]*: -z\n" "decode names the short option")
run(2 --decode -G 3)
expect("${ERR}" "-G \\(every group must divide the 32 query heads\\)" "decode says why -G is refused")

# --compressed and --window: the same conventions; --dry-run prints the problem without a GPU.
foreach(mode compressed window)
  run(0 --${mode} --help)
  expect("${OUT}" "^Usage: fsa-bench --${mode}" "${mode} help on stdout")
  foreach(args "--bogus" "-T;1,x" "-G;0" "--reps;0" "--dtype;fp8" "--batch" "extra" "-G;3")
    run(2 --${mode} ${args})
    expect("${ERR}" "^fsa-bench --${mode}: .*\nUsage: fsa-bench --${mode}" "${mode} usage error for ${args}")
    if(NOT OUT STREQUAL "")
      message(FATAL_ERROR "${mode} usage error for ${args} wrote to stdout:\n${OUT}")
    endif()
  endforeach()
endforeach()
foreach(mode compressed window)
  run(2 --${mode} -zq)
  expect("${ERR}" "^fsa-bench --${mode}: unknown option: -z\n" "${mode} names the short option")
endforeach()
run(2 --window --top-k 4)
expect("${ERR}" "option not taken by --window: --top-k" "compressed-only options are refused by --window")
run(0 --compressed --dry-run -T 4096 -G 4,16 -D 192 --value-dim 128 --kernel-size 16 --stride 8 --top-k 0 --dtype fp16)
expect("${OUT}" "dtype f16, Hq 32, Dk 192, Dv 128, batch 1, l 16, d 8, BK 64, K 0, .*; T 4096; G 4,16;" "compressed problem")
run(0 --window --dry-run -W 128,512 --batch 4)
expect("${OUT}" "batch 4, forward and backward; T 8192,65536; G 1,2,4,8,16; W 128,512;" "window problem")
run(0 --window --dry-run --no-backward)
expect("${OUT}" "batch 1, forward only; T" "window forward only")

# A refused value is named with what the option takes (the range, or what kind of value).
run(2 --min-ms -1 --dry-run)
expect("${ERR}" "^fsa-bench: --min-ms: '-1' is not a number of milliseconds from 0 to 1e7\n" "--min-ms range")
run(2 -T 1073741825 --dry-run)
expect("${ERR}" "^fsa-bench: -T: '1073741825' is not a list of numbers from 1 to 2\\^30\n" "-T range")
run(2 --q-heads 65537 --dry-run)
expect("${ERR}" "^fsa-bench: --q-heads: '65537' is not a number from 1 to 65536\n" "--q-heads range")
run(2 --decode -L 3)
expect("${ERR}" "^fsa-bench --decode: -L: '3' is not a list of cache lengths from 4 to 2\\^30" "--decode -L below the 4 new tokens")
run(2 --decode --reps 0)
expect("${ERR}" "^fsa-bench --decode: --reps: '0' is not a number from 1 to 1000000\n" "--decode --reps range")
run(2 --compressed --stride 0 --dry-run)
expect("${ERR}" "^fsa-bench --compressed: --stride: '0' is not a number from 1 to 2\\^20\n" "--stride range")

# Shapes the library refuses are usage errors at parse time, --dry-run included: with --backward, Dk + Dv over
# 320 needs both multiples of 32 (every D a row runs: -D, or --standard's 128, 64 and 256).
run(2 -D 208 --value-dim 144 --backward --dry-run)
expect("${ERR}" "^fsa-bench: --backward at Dk 208 and Dv 144: over 320 together, both must be multiples of 32\n"
       "refused backward dims")
run(2 --standard --value-dim 80 --backward --dry-run)
expect("${ERR}" "^fsa-bench: --backward at Dk 256 and Dv 80:" "--standard's D 256 row with Dv 80")
run(0 -D 208 --value-dim 144 --dry-run)  # the forward alone takes them
run(0 --standard --value-dim 64 --backward --dry-run)
run(2 --window -G 0 --dry-run)
expect("${ERR}" "^fsa-bench --window: -G: '0' is not a list of groups from 1 to 16\n" "branch groups 1 to 16")

# Output that cannot be written (a full disk) fails the run, in every mode.
if(EXISTS /dev/full)
  foreach(args "--dry-run" "--help" "--compressed;--dry-run" "--decode;--help")
    execute_process(COMMAND "${BENCH}" ${args} RESULT_VARIABLE rc OUTPUT_FILE /dev/full ERROR_VARIABLE err)
    if(NOT rc EQUAL 1 OR NOT err MATCHES "cannot write the output")
      message(FATAL_ERROR "fsa-bench ${args} > /dev/full: exit ${rc}, expected 1 with a message\n${err}")
    endif()
  endforeach()
endif()

# A repeated list value is kept once (its rows would run again); --jit's dry run says what it runs.
run(0 --dry-run -G 1,1,4,1 -T 8192,8192)
expect("${OUT}" "# T 8192; G 1,4\n" "repeats dropped")
run(0 --jit --dry-run)
expect("${OUT}" "--jit: compiles D 64, 128, 256 at G 4; times Hq 32, Hkv 8, D 128, T 256" "--jit's own problem")
run(0 --standard --dry-run)
expect("${OUT}" "--standard, D 128 \\(and 64, 256 at T 16384\\)" "--standard's head dims")
# The --jit run's second process takes nothing else (it would open a cache anywhere).
# whatever the order of the other options
foreach(args "--jit-child;/tmp/x;--dry-run" "--dry-run;--jit-child=/tmp/x" "-T5;--jit-child;/tmp/x"
             "--jit-child;/tmp/x;--jit-child;/tmp/y")
  run(2 ${args})
  expect("${ERR}" "--jit-child is --jit's own process: no other option" "--jit-child alone (${args})")
endforeach()
