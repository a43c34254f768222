"""The binding's caches of contexts and plans under threads, without a GPU: a fake libfsa records the
contexts and plans it is asked for. A plan is made in the context of the tuning mode it is cached under,
and each (device, check mode, tuning mode) gets one context however many threads ask at once."""

import threading
import time

import pytest

torch = pytest.importorskip("torch")

from fsa_jit import _lib, attention, kvcache  # noqa: E402


class FakeLibrary:
    has_backward = True
    path = "fake"

    def __init__(self, create_seconds=0.0):
        self.create_seconds = create_seconds
        self.contexts = []  # (handle, options.tune)
        self.plans = []  # (handle, context)
        self.lock = threading.Lock()

    def _next(self):
        with self.lock:
            return 0x1000 + len(self.contexts) + len(self.plans)

    def fsa_context_create(self, handle, options):
        time.sleep(self.create_seconds)  # the driver starting: wide enough for another thread to arrive
        handle._obj.value = self._next()
        self.contexts.append((handle._obj.value, options._obj.tune))
        return 0

    def fsa_plan_create(self, handle, ctx, desc):
        handle._obj.value = 0x9000 + self._next()
        self.plans.append((handle._obj.value, ctx))
        return 0

    def check(self, status, function=None):
        assert status == 0


@pytest.fixture
def clean(monkeypatch):
    monkeypatch.setattr(attention, "_plans", {})
    monkeypatch.setattr(attention, "_contexts", {})
    monkeypatch.setattr(attention, "_tune", None)
    monkeypatch.setattr(kvcache, "_plans", {})


def selected_plan(lib):
    return attention._get_plan(lib, 0, torch.bfloat16, 64, 4, 1, 64, 16, 0.125, 0, 0, False)


def test_a_plan_is_made_in_the_context_of_the_tuning_mode_it_is_cached_under(clean, monkeypatch):
    # set_tuning() lands while the first call waits for the plan lock (another thread compiling).
    lib = FakeLibrary()
    real = attention._lock

    class TuningChangesWhileWaiting:
        def __enter__(self):
            attention.set_tuning("on")
            return real.__enter__()

        def __exit__(self, *exc):
            return real.__exit__(*exc)

    monkeypatch.setattr(attention, "_lock", TuningChangesWhileWaiting())
    selected_plan(lib)
    (key,) = attention._plans
    assert key[11] is None  # cached for the mode in force when the call began ...
    assert lib.contexts == [(lib.contexts[0][0], _lib.TUNE_MODES[None])]  # ... and made in its context


def test_threads_asking_for_one_context_at_once_share_it(clean):
    lib = FakeLibrary(create_seconds=0.2)
    shape = (0, torch.bfloat16, 64, 8, 2, 64, 8, 64, 4, 16, 0.0, 0, False, 64)
    lib.fsa_kvcache_plan_create = lib.fsa_plan_create
    lib.fsa_kvcache_plan_workspace_size = lambda size, handle: 0
    lib.fsa_kvcache_plan_workspace_counter_size = lambda size, handle: 0
    threads = [threading.Thread(target=selected_plan, args=(lib,)),
               threading.Thread(target=kvcache._plan, args=(lib, shape))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(lib.contexts) == 1  # one context made, none lost
    assert {ctx for _, ctx in lib.plans} == {lib.contexts[0][0]}


@pytest.fixture
def capturing(monkeypatch):
    """The device's current stream is being captured (as inside torch.cuda.graph)."""
    import contextlib

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)


def test_a_plan_is_never_made_inside_a_graph_capture(clean, capturing):
    # Making one compiles or loads kernels, which libfsa forbids during a capture: a clear error, not a
    # driver error that also invalidates the capture. A plan made before the capture serves it.
    lib = FakeLibrary()
    with pytest.raises(RuntimeError, match="during a CUDA graph capture; make one eager call"):
        selected_plan(lib)
    shape = (0, torch.bfloat16, 64, 8, 2, 64, 8, 64, 4, 16, 0.0, 0, False, 64)
    with pytest.raises(RuntimeError, match="kvcache_attention: this call needs a new plan"):
        kvcache._plan(lib, shape)
    from fsa_jit import window

    with pytest.raises(RuntimeError, match="the window attention: this call needs a new plan"):
        window._plans.get(lib, (0, False, "a window plan key", False))
    assert lib.contexts == [] and lib.plans == []


def test_a_plan_made_before_the_capture_is_used_inside_it(clean, monkeypatch):
    lib = FakeLibrary()
    plan = selected_plan(lib)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert selected_plan(lib) is plan
