"""lab.card_layout_probe names the card the way the lab's other records do (lib.sh's list_cards: the first 12 hex digits
of the serial's sha256), reads NVML at the GPU that CUDA_VISIBLE_DEVICES names (NVML does not renumber), and keeps its
NVML facts when the cluster query cannot run (here: no GPU, no CUTLASS DSL), saying why."""

from __future__ import annotations

import hashlib
import json
import sys
import types
from pathlib import Path

import pytest

from lab import card_layout_probe


class _NVMLError(Exception):
    pass


def _fake_nvml(asked: list[int]) -> types.ModuleType:
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError = _NVMLError  # type: ignore[attr-defined]
    nvml.NVML_CLOCK_MEM = 2  # type: ignore[attr-defined]
    nvml.nvmlInit = lambda: None  # type: ignore[attr-defined]

    def handle(index: int) -> int:
        asked.append(index)
        return index

    def refused(_handle: int) -> None:
        raise _NVMLError("Not Supported")

    nvml.nvmlDeviceGetHandleByIndex = handle  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetSerial = lambda h: f"165000{h}".encode()  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetVbiosVersion = lambda h: b"96.00.A5.00.1A"  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetMaxClockInfo = lambda h, kind: 3201  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetRemappedRows = lambda h: (0, 0, 0, 0)  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetInforomImageVersion = refused  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetBoardPartNumber = lambda h: "692-2G520-0282-001"  # type: ignore[attr-defined]
    return nvml


def test_the_probe_names_the_visible_card_and_keeps_nvml_facts_without_the_cluster_query(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(asked))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")

    def no_gpu() -> dict[str, int]:
        raise RuntimeError("Found no NVIDIA driver on your system")

    monkeypatch.setattr(card_layout_probe, "cluster_layout", no_gpu)
    out = tmp_path / "card.json"
    monkeypatch.setattr(sys, "argv", ["card_layout_probe", str(out)])
    card_layout_probe.main()

    facts = json.loads(out.read_text())
    assert asked == [1]  # the first visible GPU, by NVML's own numbering
    assert facts["card"] == hashlib.sha256(b"1650001").hexdigest()[:12]
    assert facts["vbios"] == "96.00.A5.00.1A" and facts["board_part"] == "692-2G520-0282-001"
    assert facts["remapped_rows"] == [0, 0, 0, 0] and facts["max_mem_mhz"] == 3201
    assert facts["inforom_image"] == "unavailable: Not Supported"
    assert facts["max_active_clusters"] == "unavailable: RuntimeError: Found no NVIDIA driver on your system"


def test_the_cluster_query_runs_for_each_size_from_1_to_16(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its sizes and how it reads the answers, with the DSL's HardwareInfo and torch's CUDA set up stood in for."""
    asked: list[int] = []

    class Info:
        def __init__(self, device: int) -> None:
            assert device == 0

        def get_max_active_clusters(self, size: int) -> int:
            asked.append(size)
            return 132 // size

    utils = types.ModuleType("cutlass.utils")
    utils.HardwareInfo = Info  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cutlass", types.ModuleType("cutlass"))
    monkeypatch.setitem(sys.modules, "cutlass.utils", utils)
    fake_torch = types.ModuleType("torch")
    fake_torch.cuda = types.SimpleNamespace(init=lambda: None)  # type: ignore[attr-defined]
    fake_torch.empty = lambda *a, **k: None  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    layout = card_layout_probe.cluster_layout()
    assert asked == list(range(1, 17))
    assert layout == {str(n): 132 // n for n in range(1, 17)}
