#!/usr/bin/env bash
# The working tree against an earlier commit in the same run on one GPU: both
# built side by side (Release, tools only), each with its own kernel cache,
# then every benchmark run for the tree and for the base one after the other,
# so that both see the same GPU, clocks and temperature. Raw output and JSON go
# to OUT_DIR; a summary of the standard problem at the end.
#
#   bench/against.sh BASE [SUITE ...]
#
# BASE: a commit (or branch, tag) of this repository. SUITE (default: std cap
# cmp decode; bits on request):
#   std     fsa-bench --standard --backward (selected attention, forward and backward)
#   cap     T 65536 without the workspace cap (--workspace-limit unlimited), for the cap's cost
#   cmp     fsa-bench --compressed (compressed attention with its top-k selection), T 8K and 64K
#   decode  fsa-bench --decode at L 32K, B 1 and 64, G 1, 4, 16 (paged KV cache)
#   bits    whether both give the same bits (PyTorch with CUDA; each tree's own binding and scripts):
#           the selected forward's o and lse (bench/fwd_sha.py), the backward's gradients twice each
#           (bench/bwd_bits.py) and the compressed selection's top-k (bench/topk_same.py)
# Environment: FSA_AGAINST_BUILD (the build folder, default build-against), OUT_DIR (default $OUT,
# else <build folder>/against-<base>), FSA_AGAINST_JOBS (compile threads, default nproc), CMAKE_PREFIX_PATH
# (where CMake finds xxHash's header when the system has none). Needs a GPU, CUDA's NVRTC and git.
set -euo pipefail
cd "$(dirname "$0")/.."

[ $# -ge 1 ] || { echo "usage: $0 BASE [std|cap|cmp|decode|bits ...]" >&2; exit 2; }
base=$(git rev-parse --verify --short "$1^{commit}") || { echo "error: $1 is not a commit" >&2; exit 2; }
shift
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(std cap cmp decode)
for s in "${suites[@]}"; do
  case $s in std | cap | cmp | decode | bits) ;; *) echo "error: unknown suite '$s'" >&2; exit 2 ;; esac
done
head=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . && echo "" || echo "+changes")
build=${FSA_AGAINST_BUILD:-build-against}
out=${OUT_DIR:-${OUT:-$build/against-$base}}
jobs=${FSA_AGAINST_JOBS:-$(nproc)}
mkdir -p "$out" "$build"

# The base's tree, as committed.
rm -rf "$build/base-src"
mkdir -p "$build/base-src"
git archive "$base" | tar -x -C "$build/base-src"

build_tree() { # <source> <build folder>
  cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DFSA_BUILD_TESTS=OFF >"$2.configure.log" 2>&1 ||
    { tail -30 "$2.configure.log"; exit 1; }
  cmake --build "$2" -j"$jobs" >"$2.build.log" 2>&1 || { tail -40 "$2.build.log"; exit 1; }
}
build_tree . "$build/head" &
head_build=$!
build_tree "$build/base-src" "$build/base" &
wait "$head_build"
wait $!

echo "head $head, base $base; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)" |
  tee "$out/against.txt"

# Each tree's kernels in its own cache, compiled before anything is timed.
for t in head base; do
  "$build/$t/tools/fsa-precompile" --detect --backward --group 1,2,4,8,16 --kind selected,compressed -j "$jobs" \
    --cache-dir "$build/$t.cache" >"$out/precompile_$t.txt" 2>&1 || { tail -20 "$out/precompile_$t.txt"; exit 1; }
done

# run <suite> <tree> <fsa-bench arguments...>: one benchmark of one tree, its output kept.
run() {
  local suite=$1 tree=$2
  shift 2
  echo "== $suite $tree: fsa-bench $*" | tee -a "$out/against.txt"
  FSA_CACHE_DIR="$build/$tree.cache" "$build/$tree/tools/fsa-bench" "$@" >"$out/${suite}_$tree.txt" 2>&1 ||
    echo "   (exit $?: see $out/${suite}_$tree.txt)" | tee -a "$out/against.txt"
}

# bits_of <tree> <source>: that tree's digests, through its own Python binding and scripts.
bits_of() {
  local t=$1 src=$2
  export FSA_LIBRARY="$build/$t/libfsa.so" FSA_CACHE_DIR="$build/$t.cache"
  echo "== bits $t" | tee -a "$out/against.txt"
  python3 "$src/bench/fwd_sha.py" "$out/fwd_sha_$t.txt" 8192:1 8192:16 3000+70000:4 >"$out/fwd_sha_$t.log" 2>&1 ||
    echo "   (fwd_sha exit $?: see $out/fwd_sha_$t.log)" | tee -a "$out/against.txt"
  python3 "$src/bench/bwd_bits.py" 8192:16:default 65536:1:default 65536:4:default >"$out/bwd_bits_$t.txt" 2>&1 ||
    echo "   (bwd_bits exit $?: see $out/bwd_bits_$t.txt)" | tee -a "$out/against.txt"
  python3 "$src/bench/topk_same.py" save "$out/topk_$t.pt" -T 65536 -G 1,4,16 >"$out/topk_$t.log" 2>&1 ||
    echo "   (topk_same exit $?: see $out/topk_$t.log)" | tee -a "$out/against.txt"
  unset FSA_LIBRARY FSA_CACHE_DIR
}

for s in "${suites[@]}"; do
  if [ "$s" = bits ]; then
    bits_of head .
    bits_of base "$build/base-src"
    for f in fwd_sha bwd_bits; do
      if cmp -s "$out/${f}_head.txt" "$out/${f}_base.txt"; then echo "$f: identical" | tee -a "$out/against.txt"
      else echo "$f: DIFFERENT (diff $out/${f}_head.txt $out/${f}_base.txt)" | tee -a "$out/against.txt"; fi
    done
    python3 bench/topk_same.py compare "$out/topk_head.pt" "$out/topk_base.pt" 2>&1 | tee -a "$out/against.txt" || true
    continue
  fi
  for t in head base; do
    case $s in
    std) run std $t --standard --backward --min-ms 20 --warmup-ms 10 --json "$out/std_$t.json" ;;
    cap) run cap $t -T 65536 -G 1,2,4,8,16 --backward --only fsa --min-ms 30 --warmup-ms 10 \
      --workspace-limit unlimited --json "$out/cap_$t.json" ;;
    cmp) run cmp $t --compressed -T 8192,65536 -G 1,2,4,8,16 --no-backward --reps 3 ;;
    decode) FSA_TUNE=off run decode $t --decode -L 32768 -B 1,64 -G 1,4,16 --reps 11 --no-dense --no-prefill ;;
    esac
  done
done

# Summaries: the tree against the base, and each against its own uncapped call.
if [ -f "$out/std_head.json" ] && [ -f "$out/std_base.json" ]; then
  python3 bench/cap_cost.py --labels head,base "$out/std_head.json" "$out/std_base.json" | tee "$out/std_against.md"
fi
for t in head base; do
  if [ -f "$out/std_$t.json" ] && [ -f "$out/cap_$t.json" ]; then
    echo "-- $t: capped (std) against uncapped (cap)"
    python3 bench/cap_cost.py "$out/std_$t.json" "$out/cap_$t.json" | tee "$out/cap_cost_$t.md"
  fi
done
echo "raw output: $out"
