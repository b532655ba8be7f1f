"""Why does an in-process compile time (the ladder's rung 3, compile_s_in_process) read 3.5 s in one process and 9-11
s in another? (GPU; perftests/support/compile_time.py, docs/results/gate-study-h200.md)

Usage: python -m lab.compile_pool_probe OUT.json [--quiesce-s 5] [--idle-s 8] [--keep-workers] [--wake] [--device cuda]

One process times the ladder's compiled rung (a fresh Ladder each time: dynamo reset, the caches empty, as the case
compiles) several times, after the suite's warm_compiler: right after it, right after the compile before, and after
--idle-s seconds without a compile, past inductor's quiesce timer (lowered to --quiesce-s so that the probe is
short; a minute by default), which stops the compile workers until the next compile starts them again.
--keep-workers turns the timer off (quiesce_async_compile_pool False); without --wake, the suite's
wake_compile_workers (which timed_call calls) is left out, as the suite was before it. Prints and writes each
compile's seconds with its label.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--quiesce-s", type=float, default=5.0)
    parser.add_argument("--idle-s", type=float, default=8.0)
    parser.add_argument("--keep-workers", action="store_true")
    parser.add_argument("--wake", action="store_true")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()

    import torch
    import torch._inductor.config as inductor_config

    inductor_config.quiesce_async_compile_time = args.quiesce_s  # read when the pool is made: before any compile
    inductor_config.quiesce_async_compile_pool = not args.keep_workers

    from perftests.support import compile_time
    from perftests.support.compile_time import timed_call, warm_compiler
    from perftests.test_compile_ladder import Ladder

    if not args.wake:  # timed_call wakes them: the suite as it was before it did
        compile_time.wake_compile_workers = lambda: False

    warm_compiler(args.device)
    rows = []
    for label, idle in [("after warm_compiler", 0.0), ("after a compile", 0.0), ("idle", args.idle_s),
                        ("after a compile", 0.0), ("idle", args.idle_s), ("idle", args.idle_s)]:
        ladder = Ladder(args.device)
        time.sleep(idle)
        _, seconds = timed_call(ladder.runner("compile"), args.device)
        row = dict(label=label, idle_s=idle, seconds=round(seconds, 3))
        print(json.dumps(row), flush=True)
        rows.append(row)
        del ladder
        if args.device == "cuda":
            torch.cuda.empty_cache()
    Path(args.out).write_text(json.dumps(dict(vars(args), rows=rows), indent=1))


if __name__ == "__main__":
    main()
