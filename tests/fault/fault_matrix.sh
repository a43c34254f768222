#!/usr/bin/env bash
# The fault matrix of the kernel cache: damaged, swapped and foreign entries,
# kill -9 at random points of compiles and writes, processes and threads
# racing for one key, hostile and failing directories, planted symlinks and
# FIFOs, a stopped lock holder, a libnvrtc that kills its loader. Every trial
# runs tests/fault_probe (fault_probe.c), which loads a kernel through the
# library and checks its bytes against what the stand-in NVRTC
# (tests/fake/fake_nvrtc.c) compiles, so it needs no GPU and no real NVRTC
# and runs in about a minute on two cores (--quick: a few seconds).
#
#   tests/fault/fault_matrix.sh [--quick] [--seed N] [BUILD_DIR]
#
# BUILD_DIR is a configured and built tree (default: build). Some trials need
# root (other owners, running as another user); they are skipped otherwise.
# The summary counts corrupt loads (a cubin that is not the compiled bytes,
# from the library or left valid-looking on disk), hangs (a trial killed by
# its time limit), crashes (a trial killed by a signal it did not expect) and
# unexpected results (a wrong status or count); the exit status is 0 only
# when all four are 0.
set -u

quick=0
seed=$$
build=build
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=1 ;;
    --seed) seed=$2; shift ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    *) build=$1 ;;
    esac
    shift
done
RANDOM=$seed

probe_bin=$build/tests/fault_probe
fake=$build/tests/fake_nvrtc/libnvrtc_fake.so
crash=$build/tests/fake_nvrtc/libcrash_on_load.so
tool=$build/tools/fsa-precompile
for f in "$probe_bin" "$fake" "$crash"; do
    if [ ! -e "$f" ]; then
        echo "fault_matrix: $f is missing: build the tests first (cmake --build $build)" >&2
        exit 2
    fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/fsa_fault.XXXXXX")
chmod 755 "$work"
trap 'chmod -R u+rwX "$work" 2>/dev/null; rm -rf "$work"' EXIT
unset FSA_CACHE_DIR FSA_CACHE_MODE FSA_JIT FSA_LOG FSA_FAKE_NVRTC_DELAY_MS XDG_CACHE_HOME
export FSA_NVRTC_PATH=$fake FSA_FAKE_NVRTC_BYTES=65536 FSA_CACHE_LOCK_TIMEOUT=20

runs=0 corrupt=0 hangs=0 crashes=0 unexpected=0 skipped=0
declare -A section_runs

note() { printf '  %s\n' "$*"; }

# Records one finished trial: rc is the probe's exit status, want the one
# expected, what names the trial.
judge() {
    local rc=$1 want=$2 what=$3 out=$4
    runs=$((runs + 1))
    section_runs[$section]=$((${section_runs[$section]:-0} + 1))
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        hangs=$((hangs + 1)); note "HANG: $what"
    elif [ "$rc" -gt 128 ]; then
        crashes=$((crashes + 1)); note "CRASH (signal $((rc - 128))): $what: $out"
    elif [ "$rc" -eq 3 ]; then
        corrupt=$((corrupt + 1)); note "CORRUPT LOAD: $what: $out"
    elif [ "$rc" -ne "$want" ]; then
        unexpected=$((unexpected + 1)); note "UNEXPECTED (exit $rc, wanted $want): $what: $out"
    else
        return 0
    fi
    return 1
}

# probe WANT_RC WHAT DIR UNROLL [options]: one trial, at most 30 s. Leaves
# the probe's line in $out.
probe() {
    local want=$1 what=$2
    shift 2
    out=$(timeout -k 2 30 "$probe_bin" "$@" 2>&1)
    local rc=$?
    judge "$rc" "$want" "$what" "$out"
}

# expect_count NAME VALUE WHAT: the last probe line says NAME=VALUE.
expect_count() {
    case " $out " in
    *" $1=$2 "*) ;;
    *) unexpected=$((unexpected + 1)); note "UNEXPECTED ($1 is not $2): $3: $out" ;;
    esac
}

entry_of() { ls "$1"/v1/sm_80/fill_u"$2".*.cubin 2>/dev/null | head -n 1; }
temps_in() { ls -A "$1"/v1/sm_80 2>/dev/null | grep -c '\.tmp\.' ; }
fresh_dir() { local d; d=$(mktemp -d "$work/c.XXXXXX"); echo "$d"; }
checksum() { cksum < "$1"; }
victim=$work/victim
echo "a file the cache must never write" > "$victim"
victim_sum=$(checksum "$victim")
check_victim() {
    if [ "$(checksum "$victim")" != "$victim_sum" ]; then
        unexpected=$((unexpected + 1)); note "UNEXPECTED: $1 wrote through a planted link"
        echo "a file the cache must never write" > "$victim"
    fi
}

# ------------------------------------------------------------ damaged entries
section=damaged
echo "== damaged, swapped and foreign entries"

# damage_trial WHAT COMMAND...: a cached kernel, damaged by COMMAND (run with
# $entry set), is one counted corrupt entry, rebuilt, and read back intact.
damage_trial() {
    local what=$1
    shift
    local dir u
    dir=$(fresh_dir)
    u=$((RANDOM % 50 + 1))
    probe 0 "$what: warm" "$dir" "$u" || return
    entry=$(entry_of "$dir" "$u")
    "$@"
    probe 0 "$what" "$dir" "$u" --check-disk && expect_count corrupt_entries 1 "$what"
    probe 0 "$what: read back" "$dir" "$u" --check-disk && expect_count compiles 0 "$what: read back"
    check_victim "$what"
}

size_of() { stat -c %s "$1"; }
truncate_random() { truncate -s $(((RANDOM * 32768 + RANDOM) % $(size_of "$entry"))) "$entry"; }
flip_at() { # flip_at OFFSET
    local b
    b=$(od -An -tu1 -j "$1" -N1 "$entry" | tr -d ' ')
    printf "$(printf '\\%03o' $(((b ^ 0x5a) & 255)))" | dd of="$entry" bs=1 seek="$1" conv=notrunc status=none
}
# Any byte but the format version's (8-11): another version is not damage.
not_version() { local at=$1; [ "$at" -ge 8 ] && [ "$at" -lt 12 ] && at=$((at + 4)); echo "$at"; }
flip_random() { flip_at "$(not_version $(((RANDOM * 32768 + RANDOM) % $(size_of "$entry"))))"; }
flip_header() { flip_at "$(not_version $((RANDOM % 80)))"; }
swap_with_another_key() { # $dir: the trial's cache
    local u2=$((RANDOM % 50 + 51))
    timeout 30 "$probe_bin" "$dir" "$u2" > /dev/null 2>&1
    cp "$(entry_of "$dir" "$u2")" "$entry"
}
garbage() { head -c $((RANDOM % 70000 + 1)) /dev/urandom > "$entry"; }
append() { printf x >> "$entry"; }
zero() { : > "$entry"; }
plant_symlink() { rm -f "$entry"; ln -s "$victim" "$entry"; }
plant_fifo() { rm -f "$entry"; mkfifo "$entry"; }
plant_dir() { rm -f "$entry"; mkdir "$entry"; }
world_writable() { chmod 666 "$entry"; }
other_owner() { chown 65534:65534 "$entry"; }

n_random=$((quick ? 2 : 20))
for i in $(seq $n_random); do damage_trial "truncated at random" truncate_random; done
for i in $(seq $((n_random * 2))); do damage_trial "a random byte flipped" flip_random; done
for i in $(seq $n_random); do damage_trial "a header byte flipped" flip_header; done
damage_trial "a byte appended" append
damage_trial "emptied" zero
damage_trial "another key's entry in its place" swap_with_another_key
damage_trial "random bytes in its place" garbage
damage_trial "a symlink to another file in its place" plant_symlink
damage_trial "a FIFO in its place" plant_fifo
damage_trial "an empty directory in its place" plant_dir
damage_trial "writable by others" world_writable
if [ "$(id -u)" -eq 0 ]; then
    damage_trial "owned by another user" other_owner
else
    skipped=$((skipped + 1))
fi

# Another format version (another library's entry under the same name): a
# miss that is not counted; the compile's publish replaces it.
dir=$(fresh_dir)
probe 0 "another format version: warm" "$dir" 8
entry=$(entry_of "$dir" 8)
flip_at $((8 + RANDOM % 4))
probe 0 "another format version" "$dir" 8 --check-disk &&
    expect_count corrupt_entries 0 "another format version" && expect_count compiles 1 "another format version"
probe 0 "another format version: read back" "$dir" 8 --check-disk && expect_count compiles 0 "another format version: read back"

# A directory with files in the way: counted once, kept, compiled into memory.
dir=$(fresh_dir)
probe 0 "non-empty directory: warm" "$dir" 7
entry=$(entry_of "$dir" 7)
rm -f "$entry"; mkdir "$entry"; echo keep > "$entry/keep"
probe 0 "a directory with files in the way" "$dir" 7 --check-disk &&
    expect_count corrupt_entries 1 "non-empty directory" && expect_count write_failures 1 "non-empty directory"
[ -f "$entry/keep" ] || { unexpected=$((unexpected + 1)); note "UNEXPECTED: a directory's contents were deleted"; }

# ------------------------------------------------------------ kill -9
section=kill
echo "== kill -9 at random points of compiles and writes"
n_kill=$((quick ? 6 : 150))
dir=$(fresh_dir)
for i in $(seq $n_kill); do
    u=$((200 + i % 5))
    rm -f "$(entry_of "$dir" $u)"
    # Large payloads and a short compile put the kill anywhere from the
    # compile through the write, fsync and rename.
    bytes=$(((RANDOM % 4 + 1) * 1048576))
    FSA_FAKE_NVRTC_BYTES=$bytes FSA_FAKE_NVRTC_DELAY_MS=$((RANDOM % 20)) "$probe_bin" "$dir" $u > /dev/null 2>&1 &
    pid=$!
    sleep "0.0$((RANDOM % 90 + 10))"
    kill -9 $pid 2> /dev/null
    wait $pid 2> /dev/null
    # Whatever the kill left, the cache holds no wrong entry, and the kernel loads.
    FSA_FAKE_NVRTC_BYTES=$bytes probe 0 "after kill -9 ($bytes bytes): cache read only" "$dir" $u --mode ro --jit off --expect any --check-disk
    FSA_FAKE_NVRTC_BYTES=$bytes probe 0 "after kill -9 ($bytes bytes)" "$dir" $u --check-disk
done
left=$(temps_in "$dir")
note "kill -9 left $left temporary file(s)"
# A killed writer's flock is gone with it: the next publish of its key (each
# trial's second probe) deletes its leftovers at once, unless it died before
# writing a byte: such an empty one waits a minute (here: dated back).
nonempty=$(find "$dir" -name '*.tmp.*' -size +0 | wc -l)
if [ "$nonempty" -ne 0 ]; then
    unexpected=$((unexpected + 1)); note "UNEXPECTED: $nonempty temporary file(s) with bytes left after a publish of their key"
fi
find "$dir" -name '*.tmp.*' -exec touch -d '2 minutes ago' {} +
for u in 200 201 202 203 204; do
    rm -f "$(entry_of "$dir" $u)"
    FSA_FAKE_NVRTC_BYTES=65536 probe 0 "publish after kill -9 trials" "$dir" $u --check-disk
done
left=$(temps_in "$dir")
if [ "$left" -ne 0 ]; then
    unexpected=$((unexpected + 1)); note "UNEXPECTED: $left temporary file(s) of killed writers left after a publish"
fi

# ------------------------------------------------------------ concurrency
section=concurrent
echo "== processes and threads racing for one key"
n_rounds=$((quick ? 1 : 10))
for r in $(seq $n_rounds); do
    dir=$(fresh_dir)
    pids=()
    for p in 1 2 3 4; do
        FSA_FAKE_NVRTC_DELAY_MS=50 timeout -k 2 60 "$probe_bin" "$dir" 300 --threads 8 --check-disk > "$work/race.$p" 2>&1 &
        pids+=($!)
    done
    compiles=0
    for p in 1 2 3 4; do
        wait "${pids[$((p - 1))]}"
        rc=$?
        out=$(cat "$work/race.$p")
        judge $rc 0 "race round $r, process $p" "$out" &&
            compiles=$((compiles + $(echo "$out" | sed -n 's/.*compiles=\([0-9]*\).*/\1/p')))
    done
    n=$(ls "$dir"/v1/sm_80/*.cubin 2> /dev/null | wc -l)
    if [ "$compiles" -ne 1 ] || [ "$n" -ne 1 ] || [ "$(temps_in "$dir")" -ne 0 ]; then
        unexpected=$((unexpected + 1)); note "UNEXPECTED: race round $r: $compiles compiles, $n entries, $(temps_in "$dir") temporary files"
    fi
done

# ------------------------------------------------------------ hostile directories
section=hostile
echo "== hostile, read-only and failing directories"
dir=$(fresh_dir); chmod 777 "$dir"
probe 0 "cache writable by others: refused, kept in memory" "$dir" 11 --check-disk && expect_count compiles 1 "refused cache"
[ -z "$(ls -A "$dir")" ] || { unexpected=$((unexpected + 1)); note "UNEXPECTED: a refused cache was written"; }

dir=$(fresh_dir)
probe 0 "read-only mode on an empty cache" "$dir" 12 --mode ro && expect_count write_failures 0 "read-only mode"
[ -z "$(ls -A "$dir")" ] || { unexpected=$((unexpected + 1)); note "UNEXPECTED: read-only mode wrote"; }

dir=$(fresh_dir); rmdir "$dir"; echo file > "$dir"
probe 0 "cache path is a regular file" "$dir" 13 && expect_count compiles 1 "cache path is a file"

dir=$(fresh_dir)
probe 0 "full disk: warm the directories" "$dir" 14
rm -f "$(entry_of "$dir" 14)"
out=$( (ulimit -f 64; trap '' XFSZ; FSA_FAKE_NVRTC_BYTES=1048576 timeout -k 2 30 "$probe_bin" "$dir" 14 --check-disk) 2>&1)
judge $? 0 "full disk (file size limit)" "$out" && expect_count write_failures 1 "full disk"
[ -z "$(entry_of "$dir" 14)" ] && [ "$(temps_in "$dir")" -eq 0 ] ||
    { unexpected=$((unexpected + 1)); note "UNEXPECTED: a failed write left a file"; }

dir=$(fresh_dir)
probe 0 "planted lock: warm" "$dir" 15
entry=$(entry_of "$dir" 15); lock=${entry%.cubin}.lock
rm -f "$entry" "$lock"; ln -s "$victim" "$lock"
probe 0 "a symlink to another file at the lock path" "$dir" 15 --check-disk
check_victim "lock symlink"
rm -f "$(entry_of "$dir" 15)" "$lock"; mkfifo "$lock"
probe 0 "a FIFO at the lock path" "$dir" 15 --check-disk

dir=$(fresh_dir)
probe 0 "stopped holder: warm" "$dir" 16
entry=$(entry_of "$dir" 16); rm -f "$entry"
FSA_FAKE_NVRTC_DELAY_MS=5000 "$probe_bin" "$dir" 16 > /dev/null 2>&1 &
holder=$!
for t in $(seq 100); do grep -q "pid $holder " "${entry%.cubin}.lock" 2> /dev/null && break; sleep 0.05; done
kill -STOP $holder
start=$(date +%s)
probe 0 "the lock's holder is stopped" "$dir" 16 --check-disk
waited=$(($(date +%s) - start))
kill -9 $holder; wait $holder 2> /dev/null
if [ "$waited" -gt 10 ]; then
    unexpected=$((unexpected + 1)); note "UNEXPECTED: waited ${waited}s for a stopped lock holder"
fi

dir=$(fresh_dir)
probe 0 "broken NVRTC: warm" "$dir" 17
FSA_NVRTC_PATH=$crash probe 0 "JIT off with a libnvrtc that kills its loader" "$dir" 17 --jit off --check-disk
FSA_NVRTC_PATH=$crash probe 0 "read-only, JIT off with a libnvrtc that kills its loader" "$dir" 17 --jit off --mode ro
if [ -x "$tool" ]; then
    for op in --list --verify; do
        out=$(FSA_NVRTC_PATH=$crash timeout -k 2 30 "$tool" $op --cache-dir "$dir" 2>&1)
        judge $? 0 "fsa-precompile $op with a libnvrtc that kills its loader" "$out"
    done
else
    skipped=$((skipped + 2)) # (tools not built: their two trials did not run)
fi

if [ "$(id -u)" -eq 0 ] && command -v setpriv > /dev/null; then
    # A cache of root, readable by all: what an image build leaves.
    dir=$(fresh_dir)
    probe 0 "image cache: warm" "$dir" 18
    chmod -R a+rX "$dir"
    as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
    out=$(as_nobody timeout -k 2 30 "$probe_bin" "$dir" 18 --mode ro --jit off --check-disk 2>&1)
    judge $? 0 "root's cache read by another user, read-only, JIT off" "$out" && expect_count disk 1 "image cache"
    out=$(as_nobody timeout -k 2 30 "$probe_bin" "$dir" 19 --check-disk 2>&1)
    judge $? 0 "root's cache, a new kernel by another user: kept in memory" "$out" &&
        expect_count write_failures 1 "image cache, new kernel"
    out=$(as_nobody timeout -k 2 30 "$probe_bin" "$dir" 19 --jit off --mode ro --expect jit-disabled 2>&1)
    judge $? 0 "root's cache lacks a kernel, JIT off" "$out"
    dir=$(fresh_dir); chown 65534:65534 "$dir"
    probe 0 "cache owned by another user: refused" "$dir" 20 && expect_count compiles 1 "cache of another user"
else
    skipped=$((skipped + 1))
fi

# ------------------------------------------------------------ summary
echo
for s in damaged kill concurrent hostile; do printf '  %-10s %4d trials\n' "$s" "${section_runs[$s]:-0}"; done
[ "$skipped" -eq 0 ] || echo "  ($skipped group(s) of trials skipped: they need root, or fsa-precompile built)"
echo "fault matrix: $runs trials, $corrupt corrupt loads, $hangs hangs, $crashes crashes, $unexpected unexpected results"
[ $((corrupt + hangs + crashes + unexpected)) -eq 0 ]
