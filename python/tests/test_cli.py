"""The console commands: option spellings shared with the C tools, exit
status 2 for usage errors and 3 for a target the library rejects, and a
small offline precompile (CPU only)."""

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
])
def test_precompile_usage_errors_exit_2(args, capsys):
    rc, _, err = run(cli.precompile_main, args, capsys)
    assert rc == 2 and "usage:" in err


def test_bench_usage_errors_exit_2(capsys):
    for args in (["--dtype", "float32"], ["--workspace-limit", "2GB"], ["-T", "0"], ["--bogus"]):
        rc, _, err = run(cli.bench_main, args, capsys)
        assert rc == 2 and "usage:" in err, args


def test_lists_and_dtypes_parse_like_the_c_tools():
    assert cli._int_list("64,128") == [64, 128]
    assert cli._int_list("1-4,8") == [1, 2, 3, 4, 8]
    assert cli._int_list("16-64:16") == [16, 32, 48, 64]
    assert cli._dtype_list("half,bfloat16,fp16") == ["f16", "bf16", "f16"]
    assert cli._bytes("2G") == 2 << 30


def test_a_target_the_library_rejects_exits_3(lib, capsys, tmp_path):
    rc, _, err = run(cli.precompile_main, ["--arch", "sm_10", "--cache-dir", str(tmp_path)], capsys)
    assert rc == 3 and "sm_10" in err


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
            "--top-k", "4", "--kind", "kvcache,gate", "--page-size", "1,48", "--cache-dir", str(tmp_path)]
    rc, out, err = run(cli.precompile_main, args, capsys)
    if rc != 0 and "NO_NVRTC" in err:
        pytest.skip("NVRTC not available")
    assert rc == 0, err
    assert "[3/3]" in out
    assert "sm_80 f16 kvcache d32 g2 bk16 k4 page1: ready" in out and "sm_80 f16 gate dv32: ready" in out
    assert "sm_80 f16 kvcache d32 g2 bk16 k4 page48: skipped" in out
    assert " 0 failed, 1 skipped" in out
