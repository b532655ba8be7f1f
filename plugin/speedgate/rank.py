"""One rank of speedgate.launch.run_ranks: `python -m speedgate.rank package.module:function payload.json out.json`.

Calls function(**payload) and writes {"result": <its return value>} to out.json. An exception prints its traceback
on stderr and exits with code 1 (the parent quotes it).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback


def main(argv: list[str]) -> int:
    target, payload_path, out_path = argv
    module_name, function_name = target.split(":", 1)
    try:
        function = getattr(importlib.import_module(module_name), function_name)
        with open(payload_path) as f:
            payload = json.load(f)
        result = function(**payload)
        with open(out_path + ".tmp", "w") as f:
            json.dump({"result": result}, f)
    except BaseException:  # noqa: BLE001 - every failure must reach the parent, with its traceback
        traceback.print_exc()
        return 1
    os.replace(out_path + ".tmp", out_path)
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # No interpreter teardown: a communicator's destructor must not hang a rank whose work is done.
    os._exit(code)
