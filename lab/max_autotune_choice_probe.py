"""What decides a held max-autotune compile's GEMM kernels, beside the timings it holds? (GPU; issue 46, section 7
of docs/results/gate-study.md)

Usage: python -m lab.max_autotune_choice_probe OUT.json [--baseline baselines/<kind>.json] [--runs 2]

On a fresh H100, test_compile_mode[max-autotune]'s compile held every timed choice of its entry (none timed again),
yet it launched no Triton template for the attention projection's addmm, which both blessing cards had launched. Read
from torch 2.11's inductor: with benchmark_epilogue_fusion off, a GEMM's choice is the fastest of its held timings,
and in the H100 entry's held timings the extern kernel is the fastest for every GEMM; a template can win only
through the epilogue-fusion benchmark of a multi-template buffer, whose timings no cache keeps. This probe tells
which the compile does: it compiles the suite's max-autotune model holding the entry's picks (re-keyed to this
machine's cache), as the test does, `--runs` times with benchmark_epilogue_fusion off and once with it on, each from
empty caches, and records for every select_algorithm call its op, input shapes, the number of candidates, the
extern ones, whether it returned a multi-template buffer, and the node returned; then what the compile timed
afresh, and the templates and extern GEMM calls in its output code.

If the runs with it off show extern kernels for every addmm and the run with it on shows the projection's template,
the blessing's template came from the fusion benchmark, and the test must hold that decision (the chosen choice of
each GEMM) as well as the timings.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import tempfile
from pathlib import Path
from typing import Any

CASE = "perftests/test_compile_modes.py::test_compile_mode[max-autotune]::vs_eager"


def held_picks(baseline: Path, system_hash: str) -> dict[str, Any]:
    """The entry's picks with its local cache re-keyed to this machine's system hash (the file name inductor reads)."""
    doc = json.loads(baseline.read_text())
    entry = doc.get("cases", {}).get(CASE)
    if not entry or not isinstance(entry.get("config"), dict) or not entry["config"].get("local"):
        raise SystemExit(f"{baseline}: {CASE} holds no autotuner picks (its config has no 'local' timings)")
    config = entry["config"]
    [(_, timings)] = list(config["local"].items())[:1]
    return {"local": {system_hash: timings}, "best_configs": config.get("best_configs", {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--baseline", type=Path, default=Path("baselines/nvidia-h100-80gb-hbm3.json"))
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        raise SystemExit("max_autotune_choice_probe needs a CUDA GPU: max-autotune's GEMM candidates are GPU kernels")

    import torch._inductor.config as inductor_config
    import torch._inductor.ir as ir
    import torch._inductor.select_algorithm as select_algorithm
    from torch._inductor.codecache import CacheBase
    from torch._inductor.utils import run_and_get_code

    from perftests.models.transformer import build, token_ids, workload
    from perftests.support.autotune_picks import timed_afresh
    from perftests.support.compile_time import compile_holding

    held = held_picks(args.baseline, CacheBase.get_system()["hash"])
    calls: list[str] = []
    original = select_algorithm.AlgorithmSelectorCache.__call__

    def recorded(self: Any, name: str, choices: list[Any], input_nodes: list[Any], layout: Any, *rest: Any,
                 **kwargs: Any) -> Any:
        out = original(self, name, choices, input_nodes, layout, *rest, **kwargs)
        node = out
        while not isinstance(node, ir.Buffer) and hasattr(node, "data"):
            node = node.data
        shapes = [[int(s) for s in n.get_size()] for n in input_nodes]
        extern = sorted(c.name for c in choices if not c.name.startswith("triton_"))
        calls.append(json.dumps({"op": name, "inputs": shapes, "choices": len(choices), "extern": extern,
                                 "multi_template": kwargs.get("return_multi_template"),
                                 "returned": type(node).__name__}))
        return out

    select_algorithm.AlgorithmSelectorCache.__call__ = recorded  # type: ignore[method-assign]
    cfg, batch, seq, dtype = workload("cuda")
    runs = []
    for index, fusion_benchmark in enumerate([False] * args.runs + [True]):
        torch._dynamo.reset()
        calls.clear()
        model = build(cfg, "cuda", dtype)
        (tokens,) = token_ids(cfg, batch, (seq,), "cuda", 0)
        compiled = torch.compile(model, mode="max-autotune")

        def compile_and_code(on: bool = fusion_benchmark, model: Any = compiled, tokens: Any = tokens) -> list[str]:
            # The test's held compile (compile_holding), the fusion benchmark turned back on inside it for the last run.
            with torch.no_grad(), inductor_config.patch(benchmark_epilogue_fusion=on):
                return run_and_get_code(model, tokens)[1]

        codes, after = compile_holding(compile_and_code, held, Path(tempfile.mkdtemp()) / "held")
        source = "\n".join(codes)
        afresh = timed_afresh(held, after)
        runs.append({
            "run": index, "benchmark_epilogue_fusion": fusion_benchmark,
            "timed_afresh": len(afresh), "timed_afresh_first": afresh[:5],
            "select_algorithm_calls": dict(collections.Counter(calls)),
            "templates": sorted(set(re.findall(r"(triton_tem_\w+) = async_compile", source))),
            "extern_calls": {op: source.count(f"extern_kernels.{op}(") for op in ("bias_addmm", "addmm", "mm")},
        })
        print(json.dumps(runs[-1], indent=1))
    args.out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                    "baseline": str(args.baseline), "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
