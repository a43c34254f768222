# fsa-precompile end to end, offline (no GPU; NVRTC needed): warm a fresh
# cache for sm_80 and sm_90a, warm it again (all hits), a value head dim of its own, list, verify, detect
# a corrupted entry, prune, and the exit codes for bad and unsupported input.
#
#   cmake -DPRECOMPILE=<fsa-precompile> -DWORK=<scratch dir> [-DCRASH_NVRTC=<library>] -P test_precompile.cmake
#
# CRASH_NVRTC: a library that kills the process that loads it (tests/fake/crash_on_load.c).

cmake_minimum_required(VERSION 3.21)

if(NOT PRECOMPILE OR NOT WORK)
  message(FATAL_ERROR "usage: cmake -DPRECOMPILE=<tool> -DWORK=<dir> -P test_precompile.cmake")
endif()

set(CACHE_DIR "${WORK}/cache")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
# The tool sets its own cache and JIT modes; keep the user's log setting and
# default cache out of the way all the same.
unset(ENV{FSA_CACHE_DIR})

# Kept small: every kernel is a real NVRTC compilation (about a second).
set(GRID --dtype bf16 --head-dim 64 --group 1,8 --block-size 64)

set(STEP 0)

# run(<expected exit code> <args...>): runs the tool, fails the test on any
# other exit code; the merged stdout and stderr are left in OUT.
function(run expected)
  math(EXPR step "${STEP} + 1")
  set(STEP ${step} PARENT_SCOPE)
  execute_process(COMMAND "${PRECOMPILE}" ${ARGN}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  string(REPLACE ";" " " shown "${ARGN}")
  message(STATUS "[${step}] fsa-precompile ${shown} -> ${rc}\n${out}")
  if(NOT "${rc}" STREQUAL "${expected}")
    message(FATAL_ERROR "step ${step}: exit code ${rc}, expected ${expected}\n${out}")
  endif()
  set(OUT "${out}" PARENT_SCOPE)
endfunction()

function(expect_match regex what)
  if(NOT OUT MATCHES "${regex}")
    message(FATAL_ERROR "step ${STEP}: ${what}: no match for '${regex}' in:\n${OUT}")
  endif()
endfunction()

function(cubins var target)
  file(GLOB found "${CACHE_DIR}/v1/${target}/*.cubin")
  list(SORT found)
  set(${var} "${found}" PARENT_SCOPE)
endfunction()

# --- 1. fresh cache: everything compiles and lands on disk
run(0 --arch sm_80,sm_90a ${GRID} -j 2 --cache-dir "${CACHE_DIR}")
expect_match("cache: ${CACHE_DIR}" "cache directory printed")
expect_match("\n[1-9][0-9]* kernels compiled, 0 already cached, 0 failed, 0 skipped" "summary of the first run")
cubins(sm80 sm_80)
cubins(sm90 sm_90a)
if(NOT sm80 OR NOT sm90)
  message(FATAL_ERROR "no cubins under ${CACHE_DIR}/v1/sm_80 or v1/sm_90a")
endif()
list(LENGTH sm80 n80)
list(LENGTH sm90 n90)
math(EXPR n_entries "${n80} + ${n90}")

# --- 2. same grid again: all disk hits, nothing compiled
run(0 --arch sm_80,sm_90a ${GRID} -j 2 --cache-dir "${CACHE_DIR}")
expect_match("\n0 kernels compiled, ${n_entries} already cached, 0 failed, 0 skipped" "second run is all hits")
expect_match("sm_80: 0 compiled" "sm_80 total")
expect_match("sm_90a: 0 compiled" "sm_90a total")

# --- 2b. a value head dim of its own: the shape and its kernels say dv (another cache: the counts above stay)
run(0 --arch sm_90a --head-dim 64 --value-dim 32 --group 1 --algorithm nsa -j 2 --cache-dir "${WORK}/dv")
expect_match("sm_90a bf16 d64 dv32 g1 bk64" "the shape names its value head dim")
run(0 --list --cache-dir "${WORK}/dv")
expect_match("sm_90a +sel_fwd_nsa_bf16_d64_dv32_g1_bk64 " "the kernel names its value head dim")

# --- 2c. maintenance of a cache directory that is not there fails, and creates nothing (a mistyped
# --cache-dir would otherwise become an empty cache that lists 0 entries, or prunes to nothing)
run(1 --list --cache-dir "${WORK}/no-such-cache")
expect_match("--cache-dir .*/no-such-cache: No such file or directory" "list of a missing cache")
run(1 --prune --max-bytes 0 --cache-dir "${WORK}/no-such-cache")
if(EXISTS "${WORK}/no-such-cache")
  message(FATAL_ERROR "maintenance created the cache directory it was given")
endif()
file(WRITE "${WORK}/a-file" "x")
run(1 --verify --cache-dir "${WORK}/a-file")
expect_match("--cache-dir .*/a-file: not a directory" "verify of a file")
# ... while an existing directory that holds nothing is an empty cache, which list, verify and prune
# leave as empty as they found it (no v1/ made for nothing)
file(MAKE_DIRECTORY "${WORK}/empty-cache")
run(0 --list --cache-dir "${WORK}/empty-cache")
expect_match("\n0 entries, 0 bytes" "list of an empty cache")
run(0 --verify --cache-dir "${WORK}/empty-cache")
expect_match("\n0 entries checked, 0 bad, 0 deleted" "verify of an empty cache")
run(0 --prune --max-bytes 0 --cache-dir "${WORK}/empty-cache")
file(GLOB made "${WORK}/empty-cache/*")
if(made)
  message(FATAL_ERROR "maintenance of an empty cache created ${made}")
endif()

# --- 3. list: every entry by its readable name, and the total
run(0 --list --cache-dir "${CACHE_DIR}")
foreach(target sm_80 sm_90a)
  foreach(name sel_index_bk64_k16 sel_fwd_main_bf16_d64_dv64_g1_bk64 sel_fwd_main_bf16_d64_dv64_g8_bk64
               sel_fwd_reduce_bf16_dv64_g1 sel_fwd_reduce_bf16_dv64_g8)
    expect_match("${target} +${name} +[0-9]+ +[0-9-]+T[0-9:]+Z" "list entry ${target} ${name}")
  endforeach()
endforeach()
expect_match("\n${n_entries} entries, [0-9]+ bytes" "list total")

# --- 4. verify a good cache
run(0 --verify --cache-dir "${CACHE_DIR}")
expect_match("${n_entries} entries checked, 0 bad, 0 deleted\n" "verify summary (offline: no count of loads)")

# --- 4b. list and verify never load NVRTC: a libnvrtc that kills whoever loads it harms neither
if(CRASH_NVRTC)
  set(ENV{FSA_NVRTC_PATH} "${CRASH_NVRTC}")
  run(0 --list --cache-dir "${CACHE_DIR}")
  expect_match("\n${n_entries} entries, [0-9]+ bytes" "list with a broken NVRTC")
  run(0 --verify --cache-dir "${CACHE_DIR}")
  expect_match("${n_entries} entries checked, 0 bad" "verify with a broken NVRTC")
  unset(ENV{FSA_NVRTC_PATH})
endif()

# --- 5. a damaged entry is reported, counted and deleted
list(GET sm80 0 victim)
file(WRITE "${victim}" "this is not a cache entry")
run(1 --verify --cache-dir "${CACHE_DIR}")
expect_match("BAD +sm_80 " "bad entry reported")
expect_match("${n_entries} entries checked, 1 bad" "verify summary with one bad entry")
if(EXISTS "${victim}")
  message(FATAL_ERROR "verify kept the damaged entry ${victim}")
endif()

# --- 5b. a directory with files at an entry path is bad but cannot be deleted: said so
set(blocker "${CACHE_DIR}/v1/sm_90a/sel_blocked.0123456789abcdef0123456789abcdef.cubin")
file(WRITE "${blocker}/keep" "not a cache entry")
run(1 --verify --cache-dir "${CACHE_DIR}")
expect_match("BAD +sm_90a +sel_blocked \\(NOT deleted\\)" "kept directory reported as not deleted")
expect_match("entries checked, 1 bad, 0 deleted" "verify summary with a kept directory")

# --- 5c. a target directory that is a symbolic link fails list and verify with the reason, after what they
# printed of the targets before it (sorted: sm_99 comes last)
file(CREATE_LINK "${CACHE_DIR}/v1/sm_80" "${CACHE_DIR}/v1/sm_99" SYMBOLIC)
run(1 --list --cache-dir "${CACHE_DIR}")
expect_match("\nsm_90a +[^\n]*\nfsa-precompile: list: [^\n]*symbolic link" "list's error after its lines")
run(1 --verify --cache-dir "${CACHE_DIR}")
expect_match("\nOK +sm_90a +[^\n]*\nfsa-precompile: verify: [^\n]*symbolic link" "verify's error after its lines")
file(REMOVE "${CACHE_DIR}/v1/sm_99")

# --- 6. prune to nothing: it goes on past the directory, then reports it
run(1 --prune --max-bytes 0 --cache-dir "${CACHE_DIR}")
expect_match("bytes \\(0 B\\) left" "prune summary")
expect_match("not empty" "kept directory reported by prune")
if(NOT EXISTS "${blocker}/keep")
  message(FATAL_ERROR "prune deleted the contents of ${blocker}")
endif()
file(REMOVE_RECURSE "${blocker}")
cubins(sm80 sm_80)
cubins(sm90 sm_90a)
if(sm80 OR sm90)
  message(FATAL_ERROR "prune --max-bytes 0 left cubins: ${sm80} ${sm90}")
endif()

# --- 6b. an empty --cache-dir means the default directory, as FSA_CACHE_DIR="" does
set(ENV{FSA_CACHE_DIR} "${CACHE_DIR}")
run(0 --list --cache-dir=)
expect_match("cache: ${CACHE_DIR}\n" "empty --cache-dir uses FSA_CACHE_DIR")
unset(ENV{FSA_CACHE_DIR})

# --- 7. usage errors: exit 2, nothing compiled
run(2 --arch sm_80 --head-dim 1x --cache-dir "${CACHE_DIR}")
expect_match("--head-dim" "bad list named")
run(2 --arch sm_80 --group 4- --cache-dir "${CACHE_DIR}")
run(2 --arch sm_80 --no-such-option)
run(2 --head-dim 64 --cache-dir "${CACHE_DIR}")
expect_match("--arch" "missing target explained")
run(2 --prune --cache-dir "${CACHE_DIR}")
run(2 --arch sm_80 --dtype fp8 --cache-dir "${CACHE_DIR}")
expect_match("bf16, bfloat16, fp16, f16, float16, half" "dtype spellings listed")
run(2 --arch sm_80 --tune --cache-dir "${CACHE_DIR}")
expect_match("--tune needs --detect" "tuning needs a GPU")
run(0 --help)
expect_match("Usage: fsa-precompile" "help text")
expect_match("--tune" "help names --tune")
run(0 --version)
expect_match("^fsa-precompile [0-9]+\\.[0-9]+\\.[0-9]+\n$" "version")
# The grid is counted while parsing: too large a grid is a usage error even for --detect without a GPU.
run(2 --detect --head-dim 1-4096 --group 1-4096 --cache-dir "${CACHE_DIR}")
expect_match("more than 100000 combinations" "grid too large")
# The refused option is named: a short one by its letter (even in a cluster), a long one by its word.
run(2 -zq)
expect_match("unknown option '-z'" "short option named")
run(2 --help=1)
expect_match("no value taken by option '--help=1'" "long option with a value named, with why")
run(2 --d)
expect_match("ambiguous option '--d'" "an ambiguous prefix said so")
run(2 --jobs)
expect_match("option '--jobs' needs a value" "long option without its value named")
# Maintenance works on one target's context: a second --arch would be ignored.
run(2 --list --arch sm_80,sm_90a --cache-dir "${CACHE_DIR}")
expect_match("one --arch target" "one target for maintenance")
# Numbers are digits only.
run(2 --arch sm_80 --top-k +16 --cache-dir "${CACHE_DIR}")
run(2 --arch sm_80 -j " 2" --cache-dir "${CACHE_DIR}")

# --- 7b. a target the library rejects parses fine: exit 3, not a usage error
run(3 --arch sm_10 --cache-dir "${CACHE_DIR}")
expect_match("target sm_10" "rejected target named")

# --- 8. a shape the library does not support is skipped, not failed; a run where every shape is skipped
# compiles nothing and says so (exit 1)
run(1 --arch sm_80 --head-dim 100 --group 1 -j 1 --cache-dir "${CACHE_DIR}")
expect_match("\\[1/1\\] sm_80 bf16 d100 g1 bk64: skipped \\(unsupported: [^)]" "unsupported shape reported")
expect_match("\n0 kernels compiled, 0 already cached, 0 failed, 1 skipped" "summary with a skipped shape")
expect_match("every shape was skipped as unsupported" "all skipped said")
run(0 --arch sm_80 --head-dim 64,100 --group 1 --block-size 64 -j 1 --cache-dir "${CACHE_DIR}")
expect_match("0 failed, 1 skipped \\(2 shapes" "one shape of two skipped")

# --- 9. every dtype spelling, and progress counts over several shapes
run(1 --arch sm_80 --dtype half,BFloat16 --head-dim 100 --group 1,2 -j 1 --cache-dir "${CACHE_DIR}")
expect_match("\\[1/4[],]" "first of four counted")
expect_match("\\[4/4\\] " "last of four counted")
expect_match("sm_80 f16 d100 g1 bk64: skipped" "half is f16")
expect_match("sm_80 bf16 d100 g2 bk64: skipped" "BFloat16 is bf16")

# --- 10. the other NSA branches: compressed attention (with its selection) and window plans, and the
# gates (one plan per dtype and value dim, whatever the groups)
run(0 --arch sm_80 --kind compressed,window,gate --head-dim 64 --value-dim 32 --group 2,4 -j 2 --cache-dir "${CACHE_DIR}")
expect_match("sm_80 compressed bf16 d64 dv32 g2 l32 s16 bk64 k16: " "compressed plan made")
expect_match("sm_80 window bf16 d64 dv32 g2 w512: " "window plan made")
expect_match("sm_80 gate bf16 dv32: " "gate plan made")
expect_match("\n[1-9][0-9]* kernels compiled, [0-9]+ already cached, 0 failed, 0 skipped \\(5 shapes" "branch summary")
run(0 --list --cache-dir "${CACHE_DIR}")
foreach(name cmp_fwd_bf16_d64_dv32_g2_wg0 cmp_select_bf16_d64_g2_bk64_k16_l32_s16_wg0_sv0 swa_fwd_bf16_d64_dv32_g2_wg0
        nsa_gate_bf16_dv32)
  expect_match("sm_80 +${name} +[0-9]+ " "list entry ${name}")
endforeach()
run(2 --arch sm_80 --kind compressed,bogus --cache-dir "${CACHE_DIR}")
expect_match("--kind: 'bogus'" "unknown kind named")
run(2 --arch sm_80 --kind window --window 0 --cache-dir "${CACHE_DIR}")

# --- 11. the paged KV cache's plans (serving), one per page size: its attention kernel and, for servers
# that run in check mode, its metadata check; a second run finds everything cached; a page size outside
# those --help lists is a usage error
set(KV --arch sm_80 --kind kvcache --head-dim 64 --group 4 --top-k 8 --page-size 1,64 -j 2 --cache-dir "${WORK}/kv")
run(0 ${KV})
expect_match("sm_80 kvcache bf16 d64 dv64 g4 bk64 k8 page1: " "page 1 plan made")
expect_match("sm_80 kvcache bf16 d64 dv64 g4 bk64 k8 page64: " "page 64 plan made")
expect_match("\n3 kernels compiled, 0 already cached, 0 failed, 0 skipped \\(2 shapes" "kvcache summary")
run(0 --list --cache-dir "${WORK}/kv")
foreach(name kvc_fwd_bf16_d64_dv64_g4_bk64_k8_p1_tma0 kvc_fwd_bf16_d64_dv64_g4_bk64_k8_p64_tma0 kvc_check)
  expect_match("sm_80 +${name} +[0-9]+ " "list entry ${name}")
endforeach()
run(0 ${KV})
expect_match("\n0 kernels compiled, 3 already cached, 0 failed, 0 skipped" "kvcache second run is all hits")
foreach(size 48 7)
  run(2 --arch sm_80 --kind kvcache --page-size 1,${size} --cache-dir "${WORK}/kv")
  expect_match("--page-size: ${size} is not 1, 16, 32, 64, 128 or 256" "page size ${size} refused")
endforeach()
# The largest byte count (2^64 - 1) is a byte count; one more is not.
run(0 --prune --max-bytes 18446744073709551615 --cache-dir "${WORK}/kv")
expect_match("removed 0 files" "prune to the largest byte count keeps everything")
run(2 --prune --max-bytes 18446744073709551616 --cache-dir "${WORK}/kv")
run(2 --arch sm_80 --page-size 64 --cache-dir "${WORK}/kv")
expect_match("--page-size applies only to --kind kvcache" "page size without the kvcache kind")
run(2 --arch sm_80 --kind kvcache --page-size 0 --cache-dir "${WORK}/kv")
expect_match("--page-size" "bad page size list named")

# --- 12. started without stdout (`>&-`): the run fails as one with a full stdout does, its kernels compiled
# all the same, and no cache file holds progress text. (Whether a lock file opened by one compile thread
# takes the free descriptor 1 while another prints is up to timing: test_tool_streams checks the function
# that prevents it, and test_bench_checks, on a GPU, a --json file that would take it every time.)
math(EXPR STEP "${STEP} + 1")
execute_process(COMMAND sh -c "exec >&-; exec \"$0\" \"$@\"" "${PRECOMPILE}" --arch sm_80 ${GRID} --group 1
                        --cache-dir "${WORK}/closed" RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "cannot write the output")
  message(FATAL_ERROR "step ${STEP}: without stdout: exit code ${rc}, expected 1 saying so\n${err}")
endif()
file(GLOB_RECURSE closed_files "${WORK}/closed/*")
set(cubins 0)
foreach(f ${closed_files})
  file(READ "${f}" text LIMIT 4096)
  if(text MATCHES "ready in|kernels compiled")
    message(FATAL_ERROR "step ${STEP}: the progress went into ${f}:\n${text}")
  endif()
  if(f MATCHES "\\.cubin$")
    math(EXPR cubins "${cubins} + 1")
  endif()
endforeach()
if(cubins EQUAL 0)
  message(FATAL_ERROR "step ${STEP}: without stdout nothing was compiled into ${WORK}/closed")
endif()
run(0 --verify --cache-dir "${WORK}/closed")

# --- 13. a cache that refuses every write (its target directory is writable by others): each kernel compiled
# is counted once as not written, however many shapes use it (a shape that finds it in memory tries again)
file(MAKE_DIRECTORY "${WORK}/refused/v1/sm_80")
file(CHMOD "${WORK}/refused/v1/sm_80" DIRECTORY_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ
     GROUP_WRITE GROUP_EXECUTE WORLD_READ WORLD_WRITE WORLD_EXECUTE)
run(1 --arch sm_80 ${GRID} -j 1 --cache-dir "${WORK}/refused")
if(NOT OUT MATCHES "\n([0-9]+) kernels compiled, 0 already cached, 0 failed")
  message(FATAL_ERROR "step ${STEP}: no summary in:\n${OUT}")
endif()
set(compiled ${CMAKE_MATCH_1})
expect_match("sm_80: ${compiled} compiled [^\n]*, [1-9][0-9]* in memory, ${compiled} NOT written to the cache\n"
             "every kernel counted once as not written")
expect_match("fsa-precompile: ${compiled} kernels could not be written to the cache" "the message counts kernels")

message(STATUS "fsa-precompile: all ${STEP} steps passed")
