#!/bin/bash
# fsa-bench's checks on a GPU: a small row passes them (exit 0, "failed": false in the JSON) and the same row
# with --tolerance 0, which no 16-bit result meets, fails the run (exit 1, the row's reason on stderr,
# "failed": true), so that a wrong result can never stand behind a timing; --compressed's rows (their
# selections' rules among the checks) pass, over one sequence and over three. Exit 77 without a usable GPU
# (fsa-bench's exit 3), unless FSA_TEST_REQUIRE_GPU says there is one.
#
#   test_bench_checks.sh <fsa-bench> <work dir>
set -u
bench=$1
work=$2
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAILED: $*"; exit 1; }

args=(-T 1024 -G 4 --min-ms 1 --warmup-ms 1)
"$bench" "${args[@]}" --json "$work/ok.json" > "$work/ok.out" 2> "$work/ok.err"
rc=$?
if [ $rc = 3 ]; then
    # The library's switch words, as the C and Python tests read them.
    case "$(printf '%s' "${FSA_TEST_REQUIRE_GPU:-}" | tr 'A-Z' 'a-z')" in
        1 | on | true | yes)
            fail "no usable GPU, and FSA_TEST_REQUIRE_GPU=$FSA_TEST_REQUIRE_GPU says there is one: $(cat "$work/ok.err")" ;;
        "" | 0 | off | false | no) ;;
        *) fail "FSA_TEST_REQUIRE_GPU=$FSA_TEST_REQUIRE_GPU: expected 1, on, true, yes or 0, off, false, no" ;;
    esac
    echo "no usable GPU: skipped"
    exit 77
fi
[ $rc = 0 ] || fail "the default tolerance: exit $rc: $(cat "$work/ok.err")"
grep -q '"failed": false' "$work/ok.json" || fail "the passing row's JSON lacks \"failed\": false: $(cat "$work/ok.json")"
grep -q '"failed": true' "$work/ok.json" && fail "a passing row marked failed"
echo "default tolerance: exit 0, \"failed\": false"

"$bench" "${args[@]}" --tolerance 0 --json "$work/bad.json" > "$work/bad.out" 2> "$work/bad.err"
rc=$?
[ $rc = 1 ] || fail "--tolerance 0: exit $rc, expected 1: $(cat "$work/bad.err")"
grep -q "fsa-bench: forward T=1024 G=4 D=128 on the fsa path: a sampled row's error .* against float64 (over 0)" \
    "$work/bad.err" || fail "--tolerance 0: no sampled-row failure on stderr: $(cat "$work/bad.err")"
grep -q '"failed": true' "$work/bad.json" || fail "--tolerance 0: the JSON lacks \"failed\": true: $(cat "$work/bad.json")"
echo "--tolerance 0: exit 1, the reasons on stderr, \"failed\": true:"
sed 's/^/  /' "$work/bad.err"

for batch in 1 3; do
    "$bench" --compressed -T 6000 -G 1,4,16 --batch $batch --reps 2 --no-backward --json "$work/cmp.json" \
        > "$work/cmp.out" 2> "$work/cmp.err"
    rc=$?
    [ $rc = 0 ] || fail "--compressed --batch $batch: exit $rc: $(cat "$work/cmp.err")"
    [ "$(grep -o '"failed": false' "$work/cmp.json" | wc -l)" = 3 ] ||
        fail "--compressed --batch $batch: three rows with \"failed\": false expected: $(cat "$work/cmp.json")"
done
echo "--compressed (one and three sequences): exit 0, every selection checked"

# A JSON file that cannot be written (a full disk) fails the run, saying so.
for mode in "" --window; do
    extra=(); [ -n "$mode" ] && extra=(--window -T 1024 -G 4 --reps 2) || extra=("${args[@]}")
    "$bench" "${extra[@]}" --json /dev/full > "$work/full.out" 2> "$work/full.err"
    rc=$?
    [ $rc = 1 ] || fail "${mode:-grid} --json /dev/full: exit $rc, expected 1: $(cat "$work/full.err")"
    grep -q "cannot write /dev/full" "$work/full.err" || fail "${mode:-grid} --json /dev/full: silent: $(cat "$work/full.err")"
done
echo "--json /dev/full: exit 1, \"cannot write /dev/full\""

# Started without stdout (`>&-`): the JSON file, opened before the table is printed, took the free descriptor 1
# and received the table (exit 0). Now the table goes nowhere, the JSON holds the rows alone, the run fails.
"$bench" "${args[@]}" --json "$work/closed.json" >&- 2> "$work/closed.err"
rc=$?
[ $rc = 1 ] || fail "without stdout: exit $rc, expected 1: $(cat "$work/closed.err")"
grep -q "cannot write the output" "$work/closed.err" || fail "without stdout: not said: $(cat "$work/closed.err")"
grep -q '^|' "$work/closed.json" && fail "without stdout: the table went into the JSON file: $(cat "$work/closed.json")"
grep -q '"failed": false' "$work/closed.json" || fail "without stdout: the JSON lacks its row: $(cat "$work/closed.json")"
echo "without stdout: exit 1, the JSON file holds the rows alone"
