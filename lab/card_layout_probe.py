"""Which property of an H200 card splits a kernel's time into two groups by card? (GPU; issue 46, "which card property
picks the group" in docs/results/gate-study-h200.md)

Usage: CUDA_VISIBLE_DEVICES=N python -m lab.card_layout_probe OUT.json     (the card: N, as the GPU a test times on)

The probe's question: do cards of one kind differ in which SMs were fused off (the same 132 SMs, spread over the
graphics processing clusters, GPCs, otherwise)? A thread block cluster runs inside one GPC, so the most clusters of N
blocks (one block per SM) resident at once, for N = 1..16, is the card's GPC layout in numbers. Written with the card's
anonymized id (as speedgate's reports and lib.sh's list_cards name it), its VBIOS, board part and what NVML says of its
memory, so that a kernel's per-card time in a study can be set beside them. Needs CUTLASS's Python DSL
(tools/stage_cutlass.py) for the occupancy query; without it the NVML facts are written and the layout says why not.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def card_facts(token: str) -> dict[str, Any]:
    """NVML's facts of the GPU a CUDA_VISIBLE_DEVICES entry names (NVML does not renumber by that variable), named as
    speedgate's reports name it (hardware.card_id)."""
    import pynvml

    from speedgate.hardware import _decode, _nvml_handle, card_id

    pynvml.nvmlInit()
    handle = _nvml_handle(pynvml, token)

    def text(value: Any) -> str:
        return _decode(value).strip()

    serial = text(pynvml.nvmlDeviceGetSerial(handle))
    facts: dict[str, Any] = {"card": card_id(serial),
                             "vbios": text(pynvml.nvmlDeviceGetVbiosVersion(handle))}
    for name, call in (("max_mem_mhz", lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM)),
                       ("remapped_rows", lambda: list(pynvml.nvmlDeviceGetRemappedRows(handle))),
                       ("inforom_image", lambda: text(pynvml.nvmlDeviceGetInforomImageVersion(handle))),
                       ("board_part", lambda: text(pynvml.nvmlDeviceGetBoardPartNumber(handle)))):
        try:
            facts[name] = call()
        except pynvml.NVMLError as error:
            facts[name] = f"unavailable: {error}"
    return facts


def cluster_layout() -> dict[str, int]:
    """The most clusters of N blocks resident at once on CUDA's device 0, N = 1..16."""
    import torch

    torch.cuda.init()
    torch.empty(1, device="cuda")  # the primary context, current on this thread
    from cutlass.utils import HardwareInfo

    info = HardwareInfo(0)
    return {str(size): int(info.get_max_active_clusters(size)) for size in range(1, 17)}


def main() -> None:
    out = Path(sys.argv[1])
    facts = card_facts(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0])
    try:
        facts["max_active_clusters"] = cluster_layout()
    except Exception as error:  # the DSL missing or the query refused: say so, keep the NVML facts
        facts["max_active_clusters"] = f"unavailable: {type(error).__name__}: {error}"
    out.write_text(json.dumps(facts, indent=1) + "\n")
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
