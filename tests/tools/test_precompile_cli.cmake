# fsa-precompile's command line, without NVRTC or a GPU: every case here is a usage error found while
# parsing (exit 2, one line naming the option), so nothing is ever compiled.
#
#   cmake -DPRECOMPILE=<fsa-precompile> -DWORK=<scratch dir> -P test_precompile_cli.cmake

cmake_minimum_required(VERSION 3.21)

if(NOT PRECOMPILE OR NOT WORK)
  message(FATAL_ERROR "usage: cmake -DPRECOMPILE=<tool> -DWORK=<dir> -P test_precompile_cli.cmake")
endif()
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
unset(ENV{FSA_CACHE_DIR})
set(ENV{FSA_CACHE_DIR} "${WORK}/cache")

# SENTINEL ends any command line that parses in a usage error of its own, so that a case that regresses
# fails instead of compiling.
set(SENTINEL --max-bytes 1)

# run(<expected exit code> <args...>): stderr in ERR; a run past 20 s fails the test (a hang, not an answer).
function(run expected)
  execute_process(COMMAND "${PRECOMPILE}" ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT 20)
  string(REPLACE ";" " " shown "${ARGN}")
  string(LENGTH "${shown}" len)
  if(len GREATER 200)
    string(SUBSTRING "${shown}" 0 200 shown)
    set(shown "${shown}...")
  endif()
  message(STATUS "fsa-precompile ${shown} -> ${rc}")
  if(NOT "${rc}" STREQUAL "${expected}")
    message(FATAL_ERROR "fsa-precompile ${shown}: exit code ${rc}, expected ${expected}\n${out}\n${err}")
  endif()
  set(ERR "${err}" PARENT_SCOPE)
endfunction()

function(expect regex what)
  if(NOT ERR MATCHES "${regex}")
    message(FATAL_ERROR "${what}: no match for '${regex}' in:\n${ERR}")
  endif()
endfunction()

# Names in a list are taken as written: a blank around one is a usage error (as in the Python tool).
run(2 --arch " sm_80" --cache-dir "${WORK}/cache" ${SENTINEL})
expect("^fsa-precompile: --arch: blank around an item in ' sm_80'\n" "blank before a target")
run(2 --arch sm_80 --dtype "bf16, fp16" --cache-dir "${WORK}/cache" ${SENTINEL})
expect("^fsa-precompile: --dtype: blank around an item in 'bf16, fp16'\n" "blank before a dtype")

# A list is at most 4096 values, repeats counted: a long list of overlapping ranges is refused at once
# rather than deduplicated value by value (which took minutes).
string(REPEAT "1-4095," 2000 ranges)
run(2 --arch sm_80 --group "${ranges}1" --cache-dir "${WORK}/cache" ${SENTINEL})
expect("^fsa-precompile: --group: more than 4096 values\n" "overlapping ranges refused")
run(2 --arch sm_80 --head-dim "1-4000,1-100" --cache-dir "${WORK}/cache" ${SENTINEL})
expect("^fsa-precompile: --head-dim: more than 4096 values\n" "repeats counted")
# A bad item is quoted alone, not with the rest of the list after it.
run(2 --arch sm_80 --group "4,x,8" --cache-dir "${WORK}/cache" ${SENTINEL})
expect("^fsa-precompile: --group: 'x' is not a number list item" "the bad item named alone")

# A repeated --kind replaces the earlier one, as every other list option does (and the Python
# fsa-precompile's): kvcache is no longer asked for here, so --page-size has nothing to apply to.
run(2 --detect --kind kvcache --kind selected --page-size 64 --cache-dir "${WORK}/cache")
expect("^fsa-precompile: --page-size applies only to --kind kvcache\n" "a later --kind replaces")

# Options of one kind of plan are refused without that kind (they would be dropped): the compression's
# kernel size and stride, the window, and the KV head counts --tune measures at.
run(2 --arch sm_80 --window 7 --cache-dir "${WORK}/cache" ${SENTINEL})
expect("^fsa-precompile: --window applies only to --kind window\n" "--window without the window kind")
run(2 --arch sm_80 --kind window --stride 3 --cache-dir "${WORK}/cache" ${SENTINEL})
expect("^fsa-precompile: --kernel-size and --stride apply only to --kind compressed\n" "--stride without compressed")
run(2 --arch sm_80 --kernel-size 64 --cache-dir "${WORK}/cache" ${SENTINEL})
expect("^fsa-precompile: --kernel-size and --stride apply only to --kind compressed\n" "--kernel-size alone")
run(2 --arch sm_80 --kv-heads 8 --cache-dir "${WORK}/cache" ${SENTINEL})
expect("^fsa-precompile: --kv-heads applies only to --tune" "--kv-heads without --tune")
# --group x --kv-heads query heads past INT_MAX: refused while parsing, before any GPU is looked for.
run(2 --detect --tune --group 1000000 --kv-heads 4096 --cache-dir "${WORK}/cache")
expect("^fsa-precompile: --group 1000000 x --kv-heads 4096 query heads pass INT_MAX\n" "query heads past INT_MAX")
