"""The console commands: option spellings shared with the C tools, exit
status 2 for usage errors and 3 for a target the library rejects, a small
offline precompile, and the cache's --list, --verify and --prune (CPU only)."""

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fsa_jit import _lib, cli


def run(main, args, capsys):
    try:
        rc = main(args)
    except SystemExit as e:  # argparse: --help, --version and usage errors
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("main", [cli.precompile_main, cli.bench_main])
def test_version_and_help_need_no_library(main, capsys, monkeypatch):
    def reached(*a, **k):
        raise AssertionError("--help / --version loaded libfsa")

    monkeypatch.setattr(_lib, "get", reached)
    rc, out, _ = run(main, ["--version"], capsys)
    assert rc == 0 and out.split()[-1] == _lib.package_version()
    rc, out, _ = run(main, ["--help"], capsys)
    assert rc == 0 and "usage:" in out


@pytest.mark.parametrize("args", [
    ["--arch", "sm_80", "--dtype", "fp8"],
    ["--arch", "sm_80", "--head-dim", "1x"],
    ["--arch", "sm_80", "--group", "8-4"],
    ["--arch", "sm_80", "--no-such-option"],
    ["--head-dim", "64"],  # no target
    ["--arch", "sm_80", "--detect"],
    ["--arch", "sm_80", "--kind", "dense"],
    ["--arch", "sm_80", "--kind", "compressed", "--stride", "0"],
    ["--arch", "sm_80", "--kind", "kvcache", "--page-size", "0"],
    ["--arch", "sm_80", "--kind", "kvcache", "--page-size", "64x"],
    ["--arch", "sm_80", "--value-dim", "0"],  # as the C tool: leave it out for the head dim
])
def test_precompile_usage_errors_exit_2(args, capsys):
    rc, _, err = run(cli.precompile_main, args, capsys)
    assert rc == 2 and "usage:" in err


def test_bench_usage_errors_exit_2(capsys):
    for args in (["--dtype", "float32"], ["--workspace-limit", "2GB"], ["-T", "0"], ["--bogus"]):
        rc, _, err = run(cli.bench_main, args, capsys)
        assert rc == 2 and "usage:" in err, args


@pytest.mark.parametrize("args,match", [
    (["--block-size", "48"], "--block-size: one of 16, 32, 64, 128, 256, got 48"),
    (["-D", "100"], "-D: a multiple of 16 from 16 to 256, got 100"),
    (["--q-heads", "0"], "--q-heads: at least 1, got 0"),
    (["--top-k", "65"], "--top-k: 1..64, got 65"),
])
def test_bench_options_selected_attention_refuses_are_usage_errors(args, match, capsys):
    pytest.importorskip("torch")
    rc, _, err = run(cli.bench_main, args, capsys)
    assert rc == 2 and "usage:" in err and match in err


def test_lists_and_dtypes_parse_like_the_c_tools():
    assert cli._int_list("64,128") == [64, 128]
    assert cli._int_list("1-4,8") == [1, 2, 3, 4, 8]
    assert cli._int_list("16-64:16") == [16, 32, 48, 64]
    assert cli._dtype_list("half,bfloat16,fp16") == ["f16", "bf16", "f16"]
    assert cli._workspace_limit("2G") == 2 << 30


def test_a_target_the_library_rejects_exits_3(lib, capsys, tmp_path):
    rc, _, err = run(cli.precompile_main, ["--arch", "sm_10", "--cache-dir", str(tmp_path)], capsys)
    assert rc == 3 and "sm_10" in err


@pytest.mark.parametrize("mode", [[], ["--list"]])
def test_a_target_name_that_is_not_utf8_is_one_the_library_rejects_exit_3(mode, lib, capsys, tmp_path):
    # A command-line argument that is not UTF-8 reaches Python with surrogates ('sm_8\\xff' as 'sm_8\\udcff'):
    # its encode() failed, and the UnicodeEncodeError was a usage error (exit 2, a codec message).
    rc, _, err = run(cli.precompile_main, mode + ["--arch", "sm_8\udcff", "--cache-dir", str(tmp_path)], capsys)
    assert rc == 3 and "is not a target name" in err, err


def test_precompile_offline_with_progress(lib, capsys, tmp_path):
    args = ["--arch", "sm_80", "--dtype", "half", "--head-dim", "32", "--group", "1,2", "--block-size", "16",
            "--top-k", "4", "-j", "2", "--cache-dir", str(tmp_path)]
    rc, out, err = run(cli.precompile_main, args, capsys)
    if rc != 0 and "NO_NVRTC" in err:
        pytest.skip("NVRTC not available")
    assert rc == 0, err
    assert "[1/2" in out and "[2/2]" in out
    assert "sm_80 f16 d32 g1 bk16 k4" in out and "sm_80 f16 d32 g2 bk16 k4" in out
    assert " 0 failed, 0 skipped" in out


def test_page_size_without_kvcache_kind_exits_2(capsys):
    rc, _, err = run(cli.precompile_main, ["--arch", "sm_80", "--kind", "selected,gate", "--page-size", "16"], capsys)
    assert rc == 2 and "--page-size applies to --kind kvcache" in err


def test_precompile_offline_kvcache_and_gate(lib, capsys, tmp_path):
    args = ["--arch", "sm_80", "--dtype", "f16", "--head-dim", "32", "--group", "2", "--block-size", "16",
            "--top-k", "4", "--kind", "kvcache,gate", "--page-size", "1", "--cache-dir", str(tmp_path)]
    rc, out, err = run(cli.precompile_main, args, capsys)
    if rc != 0 and "NO_NVRTC" in err:
        pytest.skip("NVRTC not available")
    assert rc == 0, err
    assert "[2/2]" in out
    assert "sm_80 f16 kvcache d32 g2 bk16 k4 page1: ready" in out and "sm_80 f16 gate dv32: ready" in out
    assert " 0 failed, 0 skipped" in out


# ------------------------------------------------------------- cache maintenance


def entry_files(cache):
    return sorted(cache.rglob("*.cubin"))


def kernel_name(entry):
    return entry.name.split(".")[0]  # <name>.<key digest>.cubin


def flip_last_byte(path):
    """Corrupts an entry past its header, where only the payload checksum can tell."""
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("args, message", [
    (["--max-bytes", "1G"], "--max-bytes applies only to --prune"),
    (["--list", "--max-bytes", "1G"], "--max-bytes applies only to --prune"),
    (["--prune"], "--prune needs --max-bytes N"),
    (["--prune", "--max-bytes", "2GB"], "'2GB' is not a byte count"),
    (["--prune", "--max-bytes", "16777216T"], "'16777216T' is not a byte count"),  # 2^64
    (["--list", "--verify"], "not allowed with argument --list"),
    (["--verify", "--prune", "--max-bytes", "1G"], "not allowed with argument --verify"),
    (["--list", "--dtype", "f16"], "grid options and -j apply only when compiling"),
    (["--verify", "-j", "2"], "grid options and -j apply only when compiling"),
    (["--prune", "--max-bytes", "0", "--backward"], "grid options and -j apply only when compiling"),
    (["--list", "--device", "1"], "--device needs --detect"),
    (["--arch", "sm_80", "--device", "1"], "--device needs --detect"),
    (["--arch", "sm_80", "--tune"], "--tune needs --detect (it measures on that GPU)"),
    (["--list", "--arch", "sm_80,"], "--arch: empty item"),
    (["--arch", " sm_80"], "--arch: blank around an item"),
    (["--arch", "sm_80", "--dtype", "bf16, fp16"], "--dtype: blank around an item"),
])
def test_maintenance_and_tune_usage_errors_exit_2_before_loading_libfsa(args, message, capsys, monkeypatch):
    def reached(*a, **k):
        raise AssertionError("a usage error loaded libfsa")

    monkeypatch.setattr(_lib, "get", reached)
    rc, out, err = run(cli.precompile_main, args, capsys)
    assert rc == 2 and message in err and out == ""


def test_list_of_an_empty_cache_needs_no_target_and_counts_nothing(lib, capsys, tmp_path):
    rc, out, err = run(cli.precompile_main, ["--list", "--cache-dir", str(tmp_path)], capsys)
    assert rc == 0, err
    assert out.splitlines() == [f"cache: {tmp_path}", "0 entries, 0 bytes (0 B)"]


def test_list_of_a_filled_cache_prints_each_entry_and_the_total(cache, capsys):
    rc, out, err = run(cli.precompile_main, ["--list", "--cache-dir", str(cache)], capsys)
    assert rc == 0, err
    lines = out.splitlines()
    files = entry_files(cache)
    assert lines[0] == f"cache: {cache}" and len(lines) == len(files) + 2
    printed = sorted(tuple(line.split()) for line in lines[1:-1])
    expected = sorted((f.parent.name, kernel_name(f), str(f.stat().st_size),
                       time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(f.stat().st_mtime)))) for f in files)
    assert printed == expected
    total = sum(f.stat().st_size for f in files)
    assert lines[-1] == f"{len(files)} entries, {total} bytes ({total / 1024:.1f} KiB)"


def test_verify_deletes_a_corrupted_entry_reports_it_and_exits_1(cache, capsys):
    files = entry_files(cache)
    bad = files[0]
    flip_last_byte(bad)
    rc, out, err = run(cli.precompile_main, ["--verify", "--cache-dir", str(cache)], capsys)
    assert rc == 1, err
    lines = out.splitlines()
    assert lines[0] == f"cache: {cache}"
    assert f"BAD sm_80    {kernel_name(bad)} (deleted)" in lines
    assert sorted(lines[1:-1]) == sorted([f"BAD sm_80    {kernel_name(bad)} (deleted)"] +
                                         [f"OK  sm_80    {kernel_name(f)}" for f in files[1:]])
    assert lines[-1] == f"{len(files)} entries checked, 1 bad, 1 deleted"  # offline: nothing loads, nothing said
    assert not bad.exists() and entry_files(cache) == files[1:]
    # What is left is sound.
    rc, out, err = run(cli.precompile_main, ["--verify", "--cache-dir", str(cache)], capsys)
    assert rc == 0, err
    assert out.splitlines()[-1] == f"{len(files) - 1} entries checked, 0 bad, 0 deleted"


def test_prune_to_a_byte_budget_removes_the_least_recently_used_entries(cache, capsys):
    files = entry_files(cache)
    assert len(files) >= 3
    for age, f in enumerate(reversed(files)):  # files[0] used longest ago; a day between uses
        os.utime(f, (time.time() - 86400 * (age + 1),) * 2)
    kept = files[-2:]
    budget = sum(f.stat().st_size for f in kept)
    rc, out, err = run(cli.precompile_main, ["--prune", "--max-bytes", str(budget), "--cache-dir", str(cache)],
                       capsys)
    assert rc == 0, err
    assert out.splitlines() == [f"cache: {cache}",
                                f"removed {len(files) - 2} files; {budget} bytes ({budget / 1024:.1f} KiB) left"]
    assert entry_files(cache) == kept
    rc, out, err = run(cli.precompile_main, ["--prune", "--max-bytes", "0", "--cache-dir", str(cache)], capsys)
    assert rc == 0, err
    assert out.splitlines()[-1] == "removed 2 files; 0 bytes (0 B) left" and entry_files(cache) == []


def test_a_prune_that_cannot_delete_a_file_reports_what_it_did_and_exits_1(cache, capsys):
    # A directory with an entry's name is not an entry, and prune deletes it only when empty.
    (cache / "v1" / "sm_80" / f"blocker.{'0' * 32}.cubin").mkdir()
    (cache / "v1" / "sm_80" / f"blocker.{'0' * 32}.cubin" / "file").touch()
    files = entry_files(cache)
    rc, out, err = run(cli.precompile_main, ["--prune", "--max-bytes", "0", "--cache-dir", str(cache)], capsys)
    assert rc == 1
    assert out.splitlines()[-1] == f"removed {len(files) - 1} files; 0 bytes (0 B) left"
    assert "fsa_cache_prune" in err and "not empty" in err


def test_maintenance_with_a_target_the_library_rejects_exits_3(lib, capsys, tmp_path):
    rc, _, err = run(cli.precompile_main, ["--list", "--arch", "sm_10", "--cache-dir", str(tmp_path)], capsys)
    assert rc == 3 and "sm_10" in err


def summary_of(**counts):
    """What precompile() returns, with the counts given and 0 for the rest."""
    return {"failures": [], "cache_dir": "/c", "compiled": 0, "cached": 0, "failed": 0, "skipped": 0,
            "compile_ms": 0.0, "corrupt": 0, "write_failures": 0, **counts}


def test_detect_tune_and_backward_reach_precompile(capsys, monkeypatch):
    seen = {}

    def precompile(**kwargs):
        seen.update(kwargs)
        return summary_of()

    # The module: fsa_jit.precompile is the function.
    monkeypatch.setattr(importlib.import_module("fsa_jit.precompile"), "precompile", precompile)
    rc, _, err = run(cli.precompile_main, ["--detect", "--tune", "--backward"], capsys)
    assert rc == 0, err
    assert seen["detect"] and seen["tune"] and seen["backward"] and seen["arch"] is None and seen["device"] == 0
    assert seen["kv_heads"] == [1]
    rc, _, err = run(cli.precompile_main, ["--detect", "--tune", "--kv-heads", "2,8"], capsys)
    assert rc == 0, err
    assert seen["kv_heads"] == [2, 8]


@pytest.mark.parametrize("args, message", [
    (["--arch", "sm_80", "--kind", "kvcache", "--page-size", "1,48"], "--page-size: 48 is not 1, 16, 32, 64, 128 or 256"),
    (["--list", "--arch", "sm_80,sm_90a"], "--list, --verify and --prune take one --arch"),
    (["--arch", "sm_80", "--head-dim", "16-4096:16", "--group", "1-512"], "more than 100000 combinations"),
    (["--arch", "sm_80", "--window", "7"], "--window applies only to --kind window"),
    (["--arch", "sm_80", "--kind", "window", "--stride", "3"], "--kernel-size and --stride apply only to --kind compressed"),
    (["--arch", "sm_80", "--kernel-size", "64"], "--kernel-size and --stride apply only to --kind compressed"),
    (["--arch", "sm_80", "--kv-heads", "8"], "--kv-heads applies only to --tune"),
])
def test_precompile_refuses_what_the_c_tool_refuses_before_anything_opens(args, message, capsys):
    rc, _, err = run(cli.precompile_main, args, capsys)
    assert rc == 2 and message in err, err


def test_a_grid_whose_every_shape_is_skipped_is_a_failure(capsys, monkeypatch):
    def precompile(**kwargs):
        return summary_of(skipped=3)

    monkeypatch.setattr(importlib.import_module("fsa_jit.precompile"), "precompile", precompile)
    rc, out, err = run(cli.precompile_main, ["--arch", "sm_80", "--head-dim", "100"], capsys)
    assert rc == 1 and "0 kernels compiled" in out and "every shape was skipped as unsupported" in err


def c_tool(lib):
    """The C fsa-precompile of the build that libfsa comes from, or skip."""
    tool = Path(lib.path).resolve().parent / "tools" / "fsa-precompile"
    if not os.access(tool, os.X_OK):
        pytest.skip(f"no C fsa-precompile beside {lib.path}")
    return tool


@pytest.mark.parametrize("args", [["--list"], ["--verify"], ["--prune", "--max-bytes", "200K"]])
def test_maintenance_prints_the_lines_and_exit_status_of_the_c_tool(args, lib, cache, tmp_path, capsys):
    tool = c_tool(lib)
    twin = tmp_path / "twin"
    shutil.copytree(cache, twin)
    for where in (cache, twin):  # something for verify to find
        flip_last_byte(entry_files(where)[0])
    # The same times in both trees, one use order (reading a tree to copy it, or writing the flipped byte,
    # moves access times by the file system's own rules, which prune would rank by).
    start = time.time_ns() - 10**12
    for i, entry in enumerate(entry_files(cache)):
        for where in (cache, twin):
            os.utime(where / entry.relative_to(cache), ns=(start + i * 10**9, start + i * 10**9))
    rc, out, _ = run(cli.precompile_main, args + ["--cache-dir", str(cache)], capsys)
    c = subprocess.run([str(tool), *args, "--cache-dir", str(twin)], capture_output=True, text=True)
    assert (rc, out) == (c.returncode, c.stdout.replace(str(twin), str(cache)))


# ------------------------------------------------------- the C tools' number syntax and limits


@pytest.mark.parametrize("text", ["+1", " 1", "1 ", "1_0", "\u0661", "\u00b2", "1-", "1-8:", "1:2", "1000001",
                                  "1-1000001", "0x10", "", "1-8:1000001"])
def test_number_lists_take_the_c_tools_syntax_only(text):
    # int() also took a sign, spaces, '_' and other scripts' digits ('1_0' was 10), and '1-' was 1. A step past
    # 1000000 was taken ('1-8:9999999' was 1), which the C fsa-precompile refuses.
    with pytest.raises(argparse.ArgumentTypeError):
        cli._int_list(text)


def test_a_number_list_is_at_most_4096_values_repeats_counted():
    assert cli._int_list("1-4096") == list(range(1, 4097))
    assert cli._int_list("4,1-4,2") == [4, 1, 2, 3]
    # The first used to be taken, and a range of millions was deduplicated value by value (for hours).
    for text in ("1-4097", "1-4000,1-100", ",".join(["1-4095"] * 50), "1-1000000"):
        with pytest.raises(argparse.ArgumentTypeError, match="more than 4096 values"):
            cli._int_list(text)


@pytest.fixture
def no_compile(monkeypatch):
    """fsa_jit.precompile fails the test if a command line gets that far (a usage error must not compile)."""
    def reached(**kwargs):
        raise AssertionError(f"parsed and went on to compile: {kwargs}")

    monkeypatch.setattr(importlib.import_module("fsa_jit.precompile"), "precompile", reached)


@pytest.mark.parametrize("args, option", [
    (["--arch", "sm_80", "--group", "1_0"], "--group"),
    (["--arch", "sm_80", "--top-k", "+5"], "--top-k"),
    (["--arch", "sm_80", "--top-k", " 5"], "--top-k"),
    (["--arch", "sm_80", "--window", "5_12"], "--window"),
    (["--arch", "sm_80", "--value-dim", "\u0661\u0662\u0668"], "--value-dim"),
    (["--arch", "sm_80", "--kernel-size", "1000001"], "--kernel-size"),
    (["--arch", "sm_80", "-j", "1025"], "-j"),
    (["--arch", "sm_80", "-j", "100000"], "-j"),
    (["--detect", "--device", "+1"], "--device"),
    (["--detect", "--device", "1024"], "--device"),
])
def test_precompile_numbers_are_digits_in_the_c_tools_range(args, option, capsys, no_compile):
    rc, out, err = run(cli.precompile_main, args, capsys)
    assert rc == 2 and f"argument {option}" in err and out == "", err


@pytest.mark.parametrize("args, option", [
    (["-D", "+64"], "-D"),
    (["--q-heads", " 32"], "--q-heads"),
    (["--top-k", "1_6"], "--top-k"),
    (["--block-size", "\u0666\u0664"], "--block-size"),
])
def test_bench_numbers_are_digits(args, option, capsys):
    rc, _, err = run(cli.bench_main, args, capsys)
    assert rc == 2 and f"argument {option}" in err, err


@pytest.mark.parametrize("kind", ["selected,,window", ",selected", "selected,"])
def test_precompile_kind_has_no_empty_items(kind, capsys, no_compile):
    # Empty items were dropped; the C tool refuses them.
    rc, _, err = run(cli.precompile_main, ["--arch", "sm_80", "--kind", kind], capsys)
    assert rc == 2 and "--kind" in err, err


@pytest.mark.parametrize("args, message", [
    # A warm-up of inf (or 1e300) ms never ended; nan and negative times were taken too.
    (["--warmup-ms", "inf"], "argument --warmup-ms"),
    (["--warmup-ms", "1e300"], "argument --warmup-ms"),
    (["--warmup-ms", "nan"], "argument --warmup-ms"),
    (["--min-ms", "-1"], "argument --min-ms"),
    (["--min-ms", " 5"], "argument --min-ms"),
    (["--min-ms", "1e8"], "argument --min-ms"),
    # A group that does not divide --q-heads was left out silently.
    (["-G", "3"], "-G: every group must divide --q-heads"),
    (["--q-heads", "48", "-G", "1,32"], "-G: every group must divide --q-heads"),
    # An empty --json path failed (a traceback) only after every row had run.
    (["--json", ""], "--json: empty file name"),
])
def test_bench_refuses_before_looking_for_a_gpu(args, message, capsys):
    rc, _, err = run(cli.bench_main, args, capsys)
    assert rc == 2 and message in err, err


def test_bench_timing_options_take_the_c_tools_numbers(capsys):
    p = cli._milliseconds
    assert (p("0"), p(".5"), p("5."), p("1e1"), p("1e7")) == (0.0, 0.5, 5.0, 10.0, 1e7)


def python_m_precompile(args, cache_dir, **kwargs):
    """`python -m fsa_jit.precompile ARGS` in a child that imports the fsa_jit this test imported, wherever
    the test runs from."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(cli.__file__)))
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, FSA_CACHE_DIR=str(cache_dir), PYTHONPATH=path)
    return subprocess.run([sys.executable, "-m", "fsa_jit.precompile", *args], text=True, env=env, timeout=300,
                          **{"capture_output": True, **kwargs})


def test_python_m_fsa_jit_precompile_is_the_command(tmp_path):
    # It imported the module and exited 0 whatever its arguments: a bad command line passed silently.
    bad = python_m_precompile(["--arch", "sm_80", "--group", "0"], tmp_path)
    assert bad.returncode == 2 and "argument --group" in bad.stderr, bad.stderr
    helped = python_m_precompile(["--help"], tmp_path)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: fsa-precompile"), helped.stderr
    # runpy warned on every run that the package had imported the module before running it.
    assert helped.stderr == ""


# ------------------------------------------------------- what the C fsa-precompile reports and how it exits

SMALL_GRID = ["--arch", "sm_80", "--dtype", "f16", "--head-dim", "32", "--group", "1", "--block-size", "16",
              "--top-k", "4"]  # the shape of the filled_cache fixture


def test_a_kernel_that_cannot_be_written_to_the_cache_fails_the_run_as_in_the_c_tool(filled_cache, capsys,
                                                                                      tmp_path):
    # The run exited 0 with the kernel kept in memory only: a deployment step shipped a cache without it.
    entry = next((filled_cache / "v1" / "sm_80").glob("sel_fwd_main_*.cubin")).name
    blocked = tmp_path / "blocked"
    (blocked / "v1" / "sm_80" / entry / "x").mkdir(parents=True)  # publishing renames onto it: refused
    rc, out, err = run(cli.precompile_main, SMALL_GRID + ["--cache-dir", str(blocked)], capsys)
    assert rc == 1, err
    assert out.splitlines()[-1].endswith(", 1 NOT written to the cache"), out
    assert "fsa-precompile: 1 kernels could not be written to the cache (see the warning above)" in err


def test_a_corrupt_entry_the_run_replaces_is_reported_as_in_the_c_tool(cache, tmp_path):
    # A child process: this one has the kernels in memory and would not read the entry.
    flip_last_byte(next((cache / "v1" / "sm_80").glob("sel_fwd_main_*.cubin")))
    r = python_m_precompile(SMALL_GRID + ["--cache-dir", str(cache)], tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1].endswith(", 1 corrupt entries found"), r.stdout


def test_a_kind_named_twice_counts_once_toward_the_combination_limit(capsys, monkeypatch):
    # 64000 shapes, as the C tool counts them (its kinds are flags); counted twice they passed 100000.
    seen = {}

    def precompile(**kwargs):
        seen.update(kwargs)
        return summary_of(compiled=1)

    monkeypatch.setattr(importlib.import_module("fsa_jit.precompile"), "precompile", precompile)
    args = ["--arch", "sm_80", "--kind", "selected,selected", "--group", "1-1000", "--head-dim", "16-1024:16"]
    rc, _, err = run(cli.precompile_main, args, capsys)
    assert rc == 0, err
    assert seen["kinds"] == ["selected"]


def test_output_that_cannot_be_written_is_reported_as_in_the_c_tool(lib, tmp_path):
    # A full disk under --list printed an OSError traceback.
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    with open("/dev/full", "w") as full:
        r = python_m_precompile(["--list", "--cache-dir", str(tmp_path)], tmp_path, stdout=full,
                                stderr=subprocess.PIPE, capture_output=False)
    assert (r.returncode, r.stderr) == (1, "fsa-precompile: cannot write the output\n")


def test_no_stdout_at_all_is_reported_and_a_usage_error_keeps_its_status(tmp_path):
    # Started with stdout closed (`>&-`), sys.stdout is None: every command died of an AttributeError
    # traceback (exit 1, a usage error's 2 lost).
    here = os.path.dirname(os.path.dirname(os.path.abspath(cli.__file__)))
    env = dict(os.environ, FSA_CACHE_DIR=str(tmp_path), PYTHONPATH=here)
    for args, status in ((["--version"], 1), (["--bogus"], 2), (["--list", "--cache-dir", str(tmp_path)], 1)):
        r = subprocess.run(["sh", "-c", 'exec >&-; exec "$0" -m fsa_jit.precompile "$@"', sys.executable, *args],
                           capture_output=False, stderr=subprocess.PIPE, text=True, env=env, timeout=300)
        assert r.returncode == status, (args, r.stderr)
        assert "Traceback" not in r.stderr and "fsa-precompile: cannot write the output" in r.stderr, r.stderr


@pytest.mark.parametrize("args, status", [
    (["--bogus"], 2),
    (["--arch", "sm_10"], 3),  # a target the library rejects
    (["--list", "--cache-dir", "/no/such/directory"], 1),
])
@pytest.mark.parametrize("stderr", ["2>&-", "2>/dev/full"])
def test_a_stderr_that_cannot_be_written_keeps_the_exit_status_and_stdout_clean(args, status, stderr, lib, tmp_path):
    # Started with stderr closed, print(file=sys.stderr) wrote the messages to stdout (and argparse the usage);
    # with stderr on a full disk the OSError of the message turned exit status 3 into 1. The C tool's fprintf
    # to stderr changes neither.
    if stderr.endswith("/dev/full") and not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    here = os.path.dirname(os.path.dirname(os.path.abspath(cli.__file__)))
    env = dict(os.environ, FSA_CACHE_DIR=str(tmp_path), PYTHONPATH=here)
    r = subprocess.run(["sh", "-c", f'exec {stderr}; exec "$0" -m fsa_jit.precompile "$@"', sys.executable, *args],
                       capture_output=True, text=True, env=env, timeout=300)
    assert (r.returncode, r.stdout) == (status, ""), (args, r.stdout)


def test_a_cache_path_stdout_cannot_encode_is_printed_escaped_not_a_usage_error(lib, tmp_path, monkeypatch):
    # With stdout in ASCII (PYTHONIOENCODING, a Latin-1 locale for other names), printing "cache: <path>" raised
    # a UnicodeEncodeError, a ValueError that the command took for a usage error: exit 2 and its usage after
    # the listing (or a whole compile) had been done.
    cache = tmp_path / "caf\u00e9"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("PYTHONIOENCODING", "ascii")
    r = python_m_precompile(["--list", "--cache-dir", str(cache)], tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"cache: {tmp_path}/caf\\xe9", "0 entries, 0 bytes (0 B)"], r.stdout


def test_fsa_bench_reports_output_it_cannot_write_as_the_c_tool(monkeypatch, capsys):
    # Python's fsa-bench exited 0 after --help into a full disk.
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    with open("/dev/full", "w") as full:
        monkeypatch.setattr(sys, "stdout", full)
        with pytest.raises(SystemExit) as e:
            cli.bench_main(["--help"])
    assert e.value.code == 1
    assert capsys.readouterr().err == "fsa-bench: cannot write the output\n"


@pytest.fixture
def fake_gpu(monkeypatch):
    """fsa-bench's rows on the CPU: torch.cuda says there is a GPU, the rows' tensors are made on the CPU and
    every timing is 1 ms. Yields the list of the timings taken."""
    torch = pytest.importorskip("torch")
    timed = []
    real_generator, real_randn, real_tensor = torch.Generator, torch.randn, torch.tensor
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "fake GPU")
    monkeypatch.setattr(torch, "Generator", lambda device=None: real_generator())
    monkeypatch.setattr(torch, "randn", lambda *a, device=None, **k: real_randn(*a, **k))
    monkeypatch.setattr(torch, "tensor", lambda *a, device=None, **k: real_tensor(*a, **k))
    monkeypatch.setattr(cli, "_selection", lambda *a: real_tensor([[[0]]], dtype=torch.int32))
    monkeypatch.setattr(cli, "_median_ms", lambda *a: timed.append(1) or 1.0)
    return timed


def test_a_json_file_fsa_bench_cannot_create_fails_the_run_before_any_row_as_in_the_c_tool(fake_gpu, capsys,
                                                                                         tmp_path):
    # It was opened after every row had run: a FileNotFoundError traceback, the whole run's timings lost.
    path = tmp_path / "no such directory" / "rows.json"
    rc, out, err = run(cli.bench_main, ["-T", "64", "-G", "1,2", "--json", str(path)], capsys)
    assert (rc, err) == (1, f"fsa-bench: cannot write {path}: No such file or directory\n")
    assert fake_gpu == [] and out == ""


def test_a_json_file_fsa_bench_cannot_write_fails_the_run_with_a_message(fake_gpu, capsys):
    # A full disk raised an OSError traceback after the rows.
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    rc, out, err = run(cli.bench_main, ["-T", "64", "-G", "1,2", "--json", "/dev/full"], capsys)
    assert (rc, err) == (1, "fsa-bench: cannot write /dev/full: No space left on device\n")
    assert len(fake_gpu) == 2 and "|     64 |  2 |" in out


def test_fsa_bench_writes_its_rows_to_the_json_file(fake_gpu, capsys, tmp_path):
    path = tmp_path / "rows.json"
    rc, _, err = run(cli.bench_main, ["-T", "64", "-G", "1,2", "--json", str(path)], capsys)
    assert rc == 0, err
    doc = json.loads(path.read_text())
    assert doc["gpu"] == "fake GPU" and [(r["T"], r["G"], r["ms_fwd"]) for r in doc["rows"]] == [(64, 1, 1.0),
                                                                                                (64, 2, 1.0)]


# fsa-bench --workspace-limit as the C tool takes it (tools/bench_options.c, tool_parse_bytes): digits with
# one optional K, M, G or T (any case) up to 2^64 - 1, or exactly 'unlimited'. A cap of 2^63 bytes or more
# binds nothing, so it is no cap, as the operators spell it.
WORKSPACE_LIMITS = [
    ("0", 0), ("00", 0), ("1k", 1 << 10), ("1K", 1 << 10), ("512m", 512 << 20), ("2G", 2 << 30),
    ("3T", 3 << 40), ("9223372036854775807", 2**63 - 1), ("9223372036854775808", "unlimited"),
    ("18446744073709551615", "unlimited"), ("16777215T", "unlimited"), ("unlimited", "unlimited"),
    (" 2G", None), ("2G ", None), ("2 G", None), ("UNLIMITED", None), ("Unlimited", None), (" unlimited", None),
    ("18446744073709551616", None), ("16777216T", None), ("2GB", None), ("2Gb", None), ("2KK", None), ("k", None),
    ("", None), ("+1", None), ("-1", None), ("0x10", None), ("1e3", None), ("1_0", None), ("\u0661", None),
    ("inf", None),
]


@pytest.mark.parametrize("text, limit", WORKSPACE_LIMITS)
def test_bench_workspace_limit_parses_as_the_c_tool_does(text, limit, capsys):
    if limit is None:
        rc, _, err = run(cli.bench_main, ["--workspace-limit", text], capsys)
        assert rc == 2 and "argument --workspace-limit" in err, err
    else:
        assert cli._workspace_limit(text) == limit
        _lib.parse_workspace_limit(limit)  # what selected_attention takes


@pytest.mark.parametrize("text, limit", WORKSPACE_LIMITS)
def test_bench_workspace_limit_table_is_the_c_fsa_bench(text, limit, lib):
    tool = c_tool(lib).parent / "fsa-bench"
    if not os.access(tool, os.X_OK):
        pytest.skip(f"no C fsa-bench beside {lib.path}")
    c = subprocess.run([str(tool), "--dry-run", "--workspace-limit", text], capture_output=True, timeout=60)
    assert c.returncode == (2 if limit is None else 0), c.stderr
