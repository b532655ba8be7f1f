"""A test's failures found after its body returned: a late GPU fault (it fails the test that queued the kernel), then
its regressions, raised at the test's own line, so that pytest shows that line and none of speedgate's frames."""

from __future__ import annotations

import inspect
import linecache
import types
from collections.abc import Iterable, Mapping
from typing import Any

from . import faults


def raise_late_failures(item: Any, perf: Any, call_sites: Mapping[str, Iterable[tuple[str, int, int]]],
                        strict: bool) -> None:
    """After a body that passed: wait for the GPU work the test queued (a late fault raises here), then raise its
    regressions (SpeedRegression) at the line of the test that led to the first failing one."""
    faults.synchronize_cuda()
    if perf.failures:
        from .fixture import SpeedRegression

        raise_at_the_test(item, SpeedRegression("\n".join(perf.failures)), failing_call_site(item, perf, call_sites, strict))


def failing_call_site(item: Any, perf: Any, call_sites: Mapping[str, Iterable[tuple[str, int, int]]],
                      strict: bool) -> int | None:
    """The test's line that led to its first failing comparison or metric (a perf.compare call, or the call of a
    helper that made it); None when the test's frame was not on the stack (a fixture compared)."""
    from .verdict import fails

    code = code_of_test(item)
    for result_id, verdict in [*((r.case_id, r.verdict) for r in perf.results),
                               *((m.metric_id, m.verdict) for m in perf.metrics)]:
        if code is None or not fails(verdict, strict):
            continue
        for filename, first_line, line in call_sites.get(result_id, ()):  # the test's own frame, if on the stack
            if (filename, first_line) == (code.co_filename, code.co_firstlineno):
                return line
    return None


def code_of_test(item: Any) -> Any:
    """The test function's code object (None for a test that is no Python function)."""
    func = inspect.unwrap(getattr(item, "obj", None) or (lambda: None))
    return getattr(getattr(func, "__func__", func), "__code__", None)


def raise_at_the_test(item: Any, exc: BaseException, line: int | None) -> None:
    """Raise exc from a frame that pytest shows as the test's own: its file, its first line, at line (the comparison
    that failed; else the line after its def). The test has returned by now, so the hook's frames would be the only
    ones left; pytest cuts a test's traceback at the frame whose code has the test's file and first line, so this
    frame is all it shows (with --tb=short too), with the test file's source around the line."""
    code = code_of_test(item)
    if code is None:
        raise exc
    line = max(line or 0, code.co_firstlineno + 1)
    # Where the test's own line stands, so that Python's markers under it span that line's code, not a raise's.
    real = linecache.getline(code.co_filename, line).rstrip()
    indent, width = len(real) - len(real.lstrip()) or 4, len(real.strip())
    raise_line = " " * indent + "raise (_f" + " " * max(0, width - len("raise (_f)")) + ")"
    source = "\n" * (code.co_firstlineno - 1) + f"def {code.co_name}():\n" + "\n" * (line - code.co_firstlineno - 1)
    source += raise_line + "\n"
    # Only the function's code is taken from the compiled source (nothing of it runs at module level): a function
    # under the test's name, file and lines, whose one statement raises exc.
    module = compile(source, code.co_filename, "exec")
    frame_code = next(const for const in module.co_consts if isinstance(const, types.CodeType))
    types.FunctionType(frame_code, {"_f": exc})()


__all__ = ["failing_call_site", "raise_at_the_test", "raise_late_failures", "code_of_test"]
