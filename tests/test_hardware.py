"""Hardware keys, fingerprints and worker device assignment."""

from __future__ import annotations

import pytest

from speedgate import hardware
from speedgate.devices import assign


@pytest.mark.parametrize(
    ("hw", "key"),
    [
        ({"kind": "gpu", "name": "NVIDIA H100 80GB HBM3"}, "nvidia-h100-80gb-hbm3"),
        ({"kind": "gpu", "name": "NVIDIA H200", "mig": True}, "nvidia-h200-mig"),
        ({"kind": "cpu", "name": "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", "cores": 2}, "cpu-intel-xeon-platinum-8375c-2c"),
        ({"kind": "cpu", "name": "", "cores": 4}, "cpu-unknown-4c"),
    ],
)
def test_hardware_key(hw: dict, key: str) -> None:
    assert hardware.hardware_key(hw) == key
    assert hardware.validate_key(key) == key


@pytest.mark.parametrize("bad", ["", "../etc", "a/b", "UPPER", "-lead", "a..b", "x" * 101, "sp ace", "a\\b"])
def test_unsafe_keys_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a safe file name"):
        hardware.validate_key(bad)


def test_key_never_holds_software_versions() -> None:
    fp = hardware.detect()
    assert fp.key == hardware.hardware_key(fp.hardware)
    for version in fp.software.values():
        assert str(version) not in fp.key


def test_cpu_fallback_without_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    fp = hardware.detect()
    assert fp.hardware["kind"] == "cpu" and fp.hardware["cores"] >= 1
    assert fp.key.startswith("cpu-")
    assert "python" in fp.software


def test_override_key_is_validated() -> None:
    assert hardware.detect("my-runner").key == "my-runner"
    with pytest.raises(ValueError):
        hardware.detect("../oops")


@pytest.mark.parametrize(
    ("env", "tokens"),
    [("0,1", ["0", "1"]), ("2", ["2"]), ("", []), ("-1", []), ("1,-1,2", ["1"]), ("GPU-abc, GPU-def", ["GPU-abc", "GPU-def"])],
)
def test_visible_gpu_tokens_respect_outer_mask(monkeypatch: pytest.MonkeyPatch, env: str, tokens: list[str]) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", env)
    assert hardware.visible_gpu_tokens() == tokens


def test_software_drift() -> None:
    drift = hardware.software_drift({"torch": "2.11.0", "triton": "3.6.0", "x": "1"}, {"torch": "2.13.0", "triton": "3.6.0"})
    assert drift == ["torch 2.11.0 -> 2.13.0"]


def test_assign_workers_round_robin() -> None:
    assert assign(0, 2, ["3", "5"]).device == "3"
    assert assign(1, 2, ["3", "5"]).device == "5"
    assert not assign(1, 2, ["3", "5"]).shared
    three = assign(2, 3, ["3", "5"])
    assert three.device == "3" and three.shared
    cpu = assign(0, 2, [])
    assert cpu.device == "cpu" and cpu.shared
    assert not assign(0, 1, []).shared


def test_the_suite_runs_on_the_cpu_when_cuda_visible_devices_names_a_gpu_that_is_not_there() -> None:
    """CUDA_VISIBLE_DEVICES=0 set on a machine without a GPU (a CI template's environment): the suite's conftest once
    took the variable for a GPU and stopped every run with "a GPU is visible to NVML but torch.cuda.is_available() is
    False"; it must run on the CPU (the Triton interpreter) as it does without the variable."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    if hardware.nvml_device_count() > 0:
        pytest.skip("NVML sees a GPU here: the case is a machine without one")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0"}
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           "perftests/test_triton_elementwise.py", "-k", "vector_add and float32"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout
