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
    if hasattr(config, "workerinput") or os.environ.get("PYTEST_XDIST_WORKER"):
        # xdist workers on a 2-core runner: one torch thread each, not two each.
        import torch

        torch.set_num_threads(1)


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
