"""speedgate as a guest in a project: which tests are its own (they ask for its `perf`, not a project's fixture of
that name), and what to say when a project's conftest clashes with one of its option names. Duck-typed items: no
pytest import."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from .options import SHORT_SPELLINGS

PLUGIN_MODULE = "speedgate.plugin"  # where speedgate's own perf fixture is defined


def reaches_ours(item: Any) -> bool:
    """Whether the perf a test gets is speedgate's: the nearest definition of perf is, or it requests perf itself (a
    project's wrapper around speedgate's) and the one it overrides does, and so on. A project's own perf that asks for
    no perf overrides speedgate's, which then never runs."""
    if "perf" not in getattr(item, "fixturenames", ()):
        return False
    chain = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {}).get("perf", ())
    for fixturedef in reversed(list(chain)):
        func = getattr(fixturedef, "func", None)
        if getattr(func, "__module__", None) == PLUGIN_MODULE and getattr(func, "__name__", None) == "perf":
            return True
        if "perf" not in getattr(fixturedef, "argnames", ()):
            return False
    return False


def foreign(items: Iterable[Any], ours: Any) -> list[str]:
    """The node ids of the tests that ask for a fixture named perf that is not speedgate's (ours(item): whether it is)."""
    return [item.nodeid for item in items if "perf" in getattr(item, "fixturenames", ()) and not ours(item)]


def late_collision(text: str) -> str | None:
    """What to say when a conftest loaded during collection (below the rootdir's) defines one of the short spellings
    speedgate added once the initial conftests had loaded: argparse refuses the second definition, and pytest would
    show only its traceback. None when text (the collection error) is about no short spelling of speedgate's."""
    found = re.search(r"conflicting option strings?: (--[\w-]+)", text) or re.search(r"option names \{'(--[\w-]+)'", text)
    if found is None or found.group(1) not in SHORT_SPELLINGS.values():
        return None
    short = found.group(1)
    prefixed = next(name for name, spelling in SHORT_SPELLINGS.items() if spelling == short)
    return (f"speedgate: a conftest loaded during collection defines {short}, which speedgate had already added (as "
            f"short for {prefixed}) because no conftest loaded before collection defined it; pytest lets an option be "
            f"defined once. The ways out: define {short} in a conftest.py at the rootdir or in the initial conftests "
            f"(speedgate then leaves the name to the project and takes only {prefixed}), rename the project's option, "
            "or run with -p no:speedgate where the project does not use speedgate")


__all__ = ["foreign", "late_collision", "reaches_ours"]
