"""Whether the codegen facts come out of this stack as speedgate reads them (GPU): a Triton matmul, the Gluon fp8
matmul, cuBLAS and a torch.compile'd GELU (inductor's kernels, through its autotuner's run), profiled as the audit
profiles a side, their trace kernels and the compiled kernels' own facts printed.

Usage: python -m lab.codegen_check
"""

from __future__ import annotations

import json


def main() -> None:
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    from perftests.kernels import matmul as mm
    from perftests.support.matmul import fp8_operands, operands, scaled_mm
    from speedgate import codegen

    xb, wb = operands("cuda", torch.bfloat16, 4096, 4096, 4096)
    x8, w8, sx, sw = fp8_operands("cuda", 4096, 4096, 4096, 0)
    tiled, _ = mm.launcher("tiled")
    gelu = torch.compile(lambda x: F.gelu(x * 2.0 + 1.0))
    sides = {"cublas": lambda: F.linear(xb, wb), "triton_tiled": lambda: tiled(xb, wb),
             "scaled_mm": lambda: scaled_mm(x8, w8, sx, sw), "inductor_gelu": lambda: gelu(xb)}
    try:
        from perftests.kernels import matmul_gluon

        sides["gluon"] = lambda: matmul_gluon.fp8_matmul(x8, w8, sx, sw)
    except Exception as exc:  # noqa: BLE001
        print("gluon left out:", repr(exc))
    for name, fn in sides.items():
        fn()
        torch.cuda.synchronize()
        with codegen.compiled_launches() as compiled:
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                fn()
                torch.cuda.synchronize()
        raw = prof.profiler.kineto_results.events()
        events = [(e.name(), e.device_resource_id(), e.metadata_json()) for e in raw
                  if e.device_type() == torch.autograd.DeviceType.CUDA]
        print(name, "raw metadata:", events[:1])
        own = [codegen.compiled_facts(kernel) for kernel in compiled]
        print(name, "facts:", json.dumps(codegen.side_facts(codegen.trace_kernels(events), own)))


if __name__ == "__main__":
    main()
