"""Print a baseline file as Markdown tables, one per test module (for the README and closing notes).

Usage: python tools/baseline_table.py baselines/<hardware_key>.json [--match SUBSTRING]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def rate(entry: dict) -> str:
    ms = entry["optimized_ms"]
    if entry.get("flops"):
        return f"{entry['flops'] / (ms * 1e-3) / 1e12:.0f} TFLOP/s"
    if entry.get("bytes"):
        return f"{entry['bytes'] / (ms * 1e-3) / 1e9:.0f} GB/s"
    return "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("path", type=Path)
    parser.add_argument("--match", default="")
    args = parser.parse_args()
    doc = json.loads(args.path.read_text())
    modules: dict[str, list[tuple[str, dict]]] = {}
    for case_id, entry in sorted(doc["cases"].items()):
        if args.match in case_id:
            module, _, rest = case_id.partition("::")
            modules.setdefault(module, []).append((rest, entry))
    for module, rows in modules.items():
        print(f"\n`{module}`\n")
        print("| case | reference ms | optimized ms | speedup | 95% CI | optimized rate | % of peak |")
        print("| --- | ---: | ---: | ---: | --- | ---: | ---: |")
        for case, e in rows:
            peak = f"{e['peak_fraction']:.0%}" if e.get("peak_fraction") is not None else "-"
            print(
                f"| `{case}` | {e['reference_ms']:.4g} | {e['optimized_ms']:.4g} | {e['speedup']:.3f}x | "
                f"{e['ci_low']:.3f}-{e['ci_high']:.3f} | {rate(e)} | {peak} |"
            )


if __name__ == "__main__":
    main()
