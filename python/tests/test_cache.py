"""The disk cache's maintenance from Python: cache_entries, verify_cache and prune_cache (CPU only: an
offline context reaches the cache)."""

from pathlib import Path

import pytest

import fsa_jit
from fsa_jit import _lib, cache as cache_module


def entry_files(where):
    return sorted(where.rglob("*.cubin"))


def test_cache_entries_are_copies_that_outlive_the_call(cache):
    listing = fsa_jit.cache_entries(cache_dir=str(cache))
    files = entry_files(cache)
    assert listing["cache_dir"] == str(cache)
    assert sorted(e.path for e in listing["entries"]) == [str(f) for f in files]
    for e in listing["entries"]:
        assert e.target == "sm_80" and e.path.endswith(".cubin") and e.name == e.path.split("/")[-1].split(".")[0]
        assert e.bytes == Path(e.path).stat().st_size and e.valid is None and e.deleted is None
        assert e.loaded is None
    assert listing["bytes"] == sum(f.stat().st_size for f in files)


def test_verify_cache_marks_and_deletes_the_bad_entry(cache):
    files = entry_files(cache)
    data = bytearray(files[0].read_bytes())
    data[-1] ^= 0xFF
    files[0].write_bytes(bytes(data))
    result = fsa_jit.verify_cache(cache_dir=str(cache))
    assert result["bad"] == 1 and result["deleted"] == 1 and len(result["entries"]) == len(files)
    by_path = {e.path: e for e in result["entries"]}
    assert (by_path[str(files[0])].valid, by_path[str(files[0])].deleted) == (False, True)
    assert all((by_path[str(f)].valid, by_path[str(f)].deleted) == (True, False) for f in files[1:])
    assert entry_files(cache) == files[1:]
    # An offline context reads the disk only: nothing was loaded on a GPU.
    assert result["loaded"] == 0 and all(e.loaded is False for e in result["entries"])
    assert result["target"] == "sm_80"


def test_tuning_records_are_listed_and_verified_on_disk_only(cache):
    # A record is an entry file named .tune; an intact entry under that name stands in for one.
    cubin = entry_files(cache)[0]
    record = cubin.with_suffix(".tune")
    record.write_bytes(cubin.read_bytes())
    listing = {e.path: e for e in fsa_jit.cache_entries(cache_dir=str(cache))["entries"]}
    assert listing[str(record)].record is True and listing[str(cubin)].record is False
    result = fsa_jit.verify_cache(cache_dir=str(cache))
    e = {e.path: e for e in result["entries"]}[str(record)]
    assert (e.valid, e.deleted, e.loaded, e.record) == (True, False, False, True) and result["bad"] == 0
    data = bytearray(record.read_bytes())
    data[-1] ^= 0xFF
    record.write_bytes(bytes(data))
    result = fsa_jit.verify_cache(cache_dir=str(cache))
    assert result["bad"] == 1 and not record.exists() and cubin.exists()


def test_prune_cache_to_zero_empties_the_cache(cache):
    n = len(entry_files(cache))
    assert fsa_jit.prune_cache(0, cache_dir=str(cache)) == {"cache_dir": str(cache), "removed": n, "bytes_left": 0}
    assert entry_files(cache) == []


def test_a_prune_that_cannot_delete_a_file_deletes_the_rest_and_says_so_on_the_error(cache):
    # A directory with an entry's name is not an entry, and prune deletes it only when empty.
    blocker = cache / "v1" / "sm_80" / f"blocker.{'0' * 32}.cubin"
    blocker.mkdir()
    (blocker / "file").touch()
    n = len(entry_files(cache)) - 1
    with pytest.raises(fsa_jit.FsaError, match="not empty") as caught:
        fsa_jit.prune_cache(0, cache_dir=str(cache))
    e = caught.value
    assert (e.status, e.cache_dir, e.removed, e.bytes_left) == (_lib.FSA_STATUS_CACHE_IO, str(cache), n, 0)
    assert entry_files(cache) == [blocker]


@pytest.mark.parametrize("max_bytes, error", [(None, TypeError), ("2GB", ValueError), (-1, ValueError),
                                              (1 << 64, ValueError), ("16777216T", ValueError)])
def test_prune_cache_refuses_what_is_not_a_byte_count_before_loading_libfsa(max_bytes, error, monkeypatch):
    def reached(*a, **k):
        raise AssertionError("loaded libfsa")

    monkeypatch.setattr(_lib, "get", reached)
    with pytest.raises(error, match="max_bytes"):
        fsa_jit.prune_cache(max_bytes)


def test_an_error_while_copying_an_entry_stops_the_walk_and_reaches_the_caller(cache, monkeypatch):
    copied = []

    def failing_entry(*fields):
        copied.append(fields)
        raise KeyError("copy failed")

    monkeypatch.setattr(cache_module, "CacheEntry", failing_entry)
    with pytest.raises(KeyError, match="copy failed"):
        fsa_jit.cache_entries(cache_dir=str(cache))
    assert len(copied) == 1  # the callback returned non-zero: no further entries


def test_arch_and_detect_exclude_each_other():
    with pytest.raises(ValueError, match="exclude"):
        fsa_jit.cache_entries(arch="sm_80", detect=True)


@pytest.mark.parametrize("call", [fsa_jit.cache_entries, fsa_jit.verify_cache,
                                  lambda **kw: fsa_jit.prune_cache(0, **kw)])
def test_maintenance_of_a_missing_cache_dir_fails_and_creates_nothing(call, tmp_path):
    # A context creates its cache directory: a mistyped cache_dir would become an empty cache.
    missing = tmp_path / "no-such-cache"
    with pytest.raises(RuntimeError, match="no such directory"):
        call(cache_dir=missing)
    assert not missing.exists()
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(RuntimeError, match="not a directory"):
        call(cache_dir=tmp_path / "a-file")


def test_cache_entries_take_a_pathlib_cache_dir(lib, tmp_path):
    assert fsa_jit.cache_entries(cache_dir=tmp_path) == {"cache_dir": str(tmp_path), "entries": [], "bytes": 0}


@pytest.mark.parametrize("call,match", [
    (dict(arch=["sm_80"]), r"arch must be one target such as 'sm_80' \(a string\), got \['sm_80'\]"),
    (dict(detect=True, device="cuda:0"), r"device must be a CUDA device ordinal"),
    (dict(cache_dir=3), r"cache_dir must be a path"),
])
def test_cache_functions_refuse_arguments_of_the_wrong_type_by_name(call, match, monkeypatch):
    def reached(*a, **k):
        raise AssertionError("a bad argument reached libfsa")

    monkeypatch.setattr(_lib, "get", reached)
    for function in (fsa_jit.cache_entries, fsa_jit.verify_cache):
        with pytest.raises(TypeError, match=match):
            function(**call)
    with pytest.raises(TypeError, match=match):
        fsa_jit.prune_cache("1G", **call)


@pytest.mark.parametrize("call", [dict(cache_dir="/tmp/fsa-cache\0/elsewhere"), dict(cache_dir=b"/tmp/fsa\0x"),
                                  dict(arch="sm_80\0sm_90a")])
def test_a_path_or_target_with_a_nul_character_is_refused_before_libfsa_reads_it_cut_short(call, monkeypatch):
    # libfsa takes C strings: "/tmp/fsa-cache\0/elsewhere" would be the directory /tmp/fsa-cache (a prune
    # deleting entries there), "sm_80\0sm_90a" the target sm_80.
    def reached(*a, **k):
        raise AssertionError("a path cut short at its NUL reached libfsa")

    monkeypatch.setattr(_lib, "get", reached)
    name = next(iter(call))
    for function in (fsa_jit.cache_entries, fsa_jit.verify_cache):
        with pytest.raises(ValueError, match=rf"{name}.*NUL"):
            function(**call)
    with pytest.raises(ValueError, match=rf"{name}.*NUL"):
        fsa_jit.prune_cache(0, **call)
    with pytest.raises(ValueError, match=rf"{name}.*NUL"):
        fsa_jit.precompile(**{"arch": "sm_80"} | call)


@pytest.mark.parametrize("max_bytes", ["²G", "١٢", "３M"])
def test_byte_counts_take_ascii_digits_only_and_name_the_argument(max_bytes, monkeypatch):
    # str.isdigit() takes superscripts (int() then fails with a message naming nothing) and other scripts'
    # digits (which int() reads: "١٢" was 12 bytes, a prune of almost everything); the C tools take 0-9.
    def reached(*a, **k):
        raise AssertionError("loaded libfsa")

    monkeypatch.setattr(_lib, "get", reached)
    with pytest.raises(ValueError, match="max_bytes"):
        fsa_jit.prune_cache(max_bytes)
    with pytest.raises(ValueError, match="workspace_limit"):
        _lib.parse_workspace_limit(max_bytes)
