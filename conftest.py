"""What the perftests suite shares: the Triton interpreter switch on CPU-only machines, device, seeds, threads."""

from __future__ import annotations

import os
import random
import zlib

import pytest

from speedgate.hardware import nvml_device_count, visible_gpu_tokens

# Must happen before any @triton.jit is defined (kernel modules are imported at collection), and after the
# speedgate plugin pinned this xdist worker's GPU: both hold, since the plugin runs before conftests load. A GPU is
# one CUDA_VISIBLE_DEVICES leaves visible that NVML sees: the variable alone, set on a CPU runner, names none.
HAS_GPU = bool(visible_gpu_tokens()) and nvml_device_count() > 0
if not HAS_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

# One seed per run (SPEEDGATE_SEED to repeat one); each test draws from it mixed with its node id, so inputs
# are fresh random data in every run but a failure can be replayed.
RUN_SEED = int(os.environ.get("SPEEDGATE_SEED") or random.SystemRandom().randrange(2**31))


def pytest_report_header(config: pytest.Config) -> list[str]:
    mode = "GPU" if HAS_GPU else "CPU (Triton interpreter, timing skipped for interpreted kernels)"
    return [f"perftests: {mode}; SPEEDGATE_SEED={RUN_SEED}"]


def pytest_configure(config: pytest.Config) -> None:
    # Under -n the suite sets no chunk of its own: speedgate hands the longest work out first (docs/running.md); sent
    # one at a time, the compiled cases ran slower and read more inductor picks of their own
    # (docs/results/suite-time.md, "the schedule, measured").
    if hasattr(config, "workerinput") or os.environ.get("PYTEST_XDIST_WORKER"):
        # xdist workers on a 2-core runner: one torch thread each, not two each.
        import torch

        torch.set_num_threads(1)


ON_ONE_WORKER = "speedgate-cpu-turns"  # the xdist group of the tests that take turns on the CPU


def _group_suffix(item: pytest.Item) -> str:
    """What xdist's --dist loadgroup appends to a test's node id for its xdist_group marks ("" for none)."""
    names = {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
    return f"@{'_'.join(sorted(names))}" if names else ""


def _set_nodeid(item: pytest.Item, nodeid: str) -> None:
    if hasattr(item, "_id"):  # pytest 9.2: a structured NodeId, which xdist's `item._nodeid = ...` no longer reaches
        item._id = type(item._id).parse(nodeid)
    else:
        item._nodeid = nodeid


@pytest.hookimpl(trylast=True)  # after xdist's worker hook, which appends the groups to the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("loadgroup", False):  # set in an xdist worker of a --dist loadgroup run
        return
    from speedgate.plugin import uses_perf

    for item in items:
        # xdist tells the controller a test's group by appending it to the node id the worker sends. Under pytest
        # 9.2 its assignment to the id no longer takes (pytest-dev/pytest-xdist#1386): every group was spread over
        # the workers without a word. The suffix is set here, whichever pytest.
        applied = _group_suffix(item)
        own = item.nodeid[: -len(applied)] if applied and item.nodeid.endswith(applied) else item.nodeid
        # Without a GPU every worker times on the one CPU, so speedgate runs the tests that use perf one at a time,
        # each holding the device's lock from setup to teardown. Spread over the workers, the others sat waiting for
        # the lock while the compile cases ran (a quarter to a third of CI's worker-seconds): on one worker they run
        # one after another as before, while the other workers run the rest.
        if not HAS_GPU and uses_perf(item):
            item.add_marker(pytest.mark.xdist_group(ON_ONE_WORKER))
        if suffix := _group_suffix(item):
            _set_nodeid(item, own + suffix)


@pytest.hookimpl(trylast=True)  # after xdist's worker sent the node ids to the controller
def pytest_collection_finish(session: pytest.Session) -> None:
    # The controller has the groups: each test gets its own id back, so that reports, speedgate's case ids and the
    # seed drawn from the id (_seed) are a plain run's (a failure replays with `SPEEDGATE_SEED=... pytest NODEID`).
    if not session.config.getoption("loadgroup", False):
        return
    for item in session.items:
        suffix = _group_suffix(item)
        if suffix and item.nodeid.endswith(suffix):
            _set_nodeid(item, item.nodeid[: -len(suffix)])


@pytest.fixture(scope="session")
def device() -> str:
    """'cuda' when a GPU is visible (checked here, lazily, so CUDA starts after worker pinning), else 'cpu'."""
    if not HAS_GPU:
        return "cpu"
    import torch

    if not torch.cuda.is_available():
        pytest.exit("a GPU is visible to NVML but torch.cuda.is_available() is False: check the driver and torch build", 3)
    return "cuda"


@pytest.fixture(autouse=True)
def _seed(request: pytest.FixtureRequest) -> int:
    import torch

    seed = (RUN_SEED + zlib.crc32(request.node.nodeid.encode())) % 2**31
    torch.manual_seed(seed)
    random.seed(seed)
    return seed


@pytest.fixture
def hold_blessed(perf):  # type: ignore[no-untyped-def]
    """hold_blessed(kernel, name, part=None): for this test, an autotuned kernel runs the config its comparison `name`
    was blessed with (perf.blessed_config; part= picks one kernel's config from a record of several), not the winner
    of a new race: near-equal candidates win on some cards and processes and lose on others, and the config that
    won is a different kernel (docs/results/calibration.md). Call it before the kernel's first launch; the
    candidates come back after the test."""
    from perftests.kernels.common import hold

    restores = []

    def hold_blessed_(kernel, name, part=None):  # type: ignore[no-untyped-def]
        config = perf.blessed_config(name)
        if part is not None and config is not None:
            config = config.get(part)
        restores.append(hold(kernel, config))

    yield hold_blessed_
    for restore in reversed(restores):
        restore()


@pytest.fixture
def held_reference(hold_blessed):  # type: ignore[no-untyped-def]
    """held_reference(kernel, name, run): a comparison whose reference is an autotuned Triton kernel, held to the
    config `name` was blessed with (hold_blessed, its part "triton") and run once (`run`, the reference on the case's
    operands), so that the kernel's choice is this shape's; returns {"triton": that choice}, the comparison's config
    record. Held for the reason hold_blessed gives: the reference's race moves the ratio as much as the optimized
    side's does."""
    from perftests.kernels.common import best_config

    def held_reference_(kernel, name, run):  # type: ignore[no-untyped-def]
        hold_blessed(kernel, name, part="triton")
        run()
        return {"triton": best_config(kernel)}

    return held_reference_


@pytest.fixture
def one_pointwise_config():  # type: ignore[no-untyped-def]
    """The test's compiles, timed, saved or loaded, each give a pointwise kernel the one config inductor's heuristics
    choose (perftests.support.compile_time.one_pointwise_config)."""
    from perftests.support.compile_time import one_pointwise_config as inside

    with inside():
        yield
