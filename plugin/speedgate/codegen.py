"""The kernels a comparison's sides launch, as deterministic facts (launch shape, registers, spills, shared memory,
the PTX's instruction mix), and what changed against the facts its baseline entry was blessed with.

Time is noisy; these facts are not: the same source, compiler and inputs' shapes make the same kernel. A compiler
upgrade that doubles a kernel's spills, an autotuner or inductor that picks another kernel, cuBLAS choosing another
kernel: each shows here as a named change beside the speedup's verdict, where a tolerance wide enough for the card's
clock would hide it. The facts come from what the gate does anyway: the profiled calls of the audit (every kernel's
name, grid, block, registers and shared memory, as the CUDA profiler reports them) and, for Triton and Gluon
kernels, the compiled kernel of the first checked call (ptxas's spills, warps, stages, the PTX); for a kernel of
torch.compile's, the launcher its autotuner chose (the same facts, the PTX where the launcher kept it); for a CUTLASS
(CuTe DSL) kernel, the PTX and cubin its compile kept, the cubin's resource usage read once by cuobjdump. No profiler
run or disassembly of its own. Pure: no torch, no triton at import time.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

# The PTX instruction classes counted: what moves a kernel's speed when a compiler changes it.
PTX_CLASSES = {
    "mma": ("wgmma.", "mma."),  # tensor-core instructions (warpgroup and warp level)
    "tma": ("cp.async.bulk.",),  # the bulk tensor copy engine
    "cp_async": ("cp.async.ca.", "cp.async.cg."),
    "ld_global": ("ld.global.",),
    "st_global": ("st.global.",),
    "ld_shared": ("ld.shared.", "ldmatrix."),
    "st_shared": ("st.shared.", "stmatrix."),
    "ld_local": ("ld.local.",),
    "st_local": ("st.local.",),
    "barrier": ("bar.", "barrier.", "mbarrier."),
    "atomic": ("atom.", "red."),
}
# Facts that tell one config of a kernel's source from another: on the reference side, with the software unchanged, a
# change in one of them is another pick (repicked_sides).
PICK_FACTS = ("grid", "block", "registers", "warps", "stages")
# The packages that make the kernels: with their versions unchanged, the same source and shapes make the same facts
# (speedgate's and pytest's own versions do not enter).
COMPILERS = ("torch", "triton", "ptxas", "torch_cuda", "cuda_driver", "driver", "nvidia-cutlass-dsl")
# Facts compared between a bless and a run, in the order a change is told (a kernel's name and launch shape first).
COMPARED = ("grid", "block", "registers", "spills", "shared_bytes", "warps", "stages", "ptx")
# Facts that are measurements of a run, not the kernel's own: they move a little from run to run and never tell one
# kernel from another (same_kernels does not compare them).
MEASURED = ("share",)
_OPCODE = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][a-z0-9_]*(?:\.[a-z0-9_:]+)*)", re.M)


def ptx_mix(ptx: str) -> dict[str, int]:
    """How many instructions of each of PTX_CLASSES the PTX text holds, and `total` (every instruction line)."""
    counts: Counter[str] = Counter()
    for line in ptx.splitlines():
        stripped = line.strip()
        if not stripped or stripped[0] in "/.{}" or stripped.endswith(":") or stripped.startswith("$"):
            continue  # comments, directives, braces, labels
        match = _OPCODE.match(stripped)
        if match is None:
            continue
        opcode = match.group(1) + "."
        counts["total"] += 1
        for name, prefixes in PTX_CLASSES.items():
            if opcode.startswith(prefixes):
                counts[name] += 1
                break
    return dict(sorted(counts.items()))


def _metadata(event_json: str) -> dict[str, Any]:
    """A profiler event's metadata (a JSON object's members without the braces), or {} when unreadable."""
    text = event_json.strip()
    if not text:
        return {}
    try:
        data = json.loads(text if text.startswith("{") else "{" + text + "}")
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def trace_kernels(events: Iterable[tuple[Any, ...]], skip_stream: Any = None) -> list[dict[str, Any]]:
    """The distinct kernels of a profiler trace, in the order of their first launch: (name, stream, metadata JSON)
    of each kernel activity, or (name, stream, metadata JSON, duration), the flush stream's left out. Each: name, grid,
    block, registers, shared_bytes; and where every event has a duration, `share`: that kernel's part of the traced
    kernels' time (its launches together), what unraced_factor weighs an autotuner's other config by."""
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    spent: dict[tuple[Any, ...], float] = {}
    timed = True
    for name, stream, meta_json, *duration in events:
        if skip_stream is not None and stream == skip_stream:
            continue
        meta = _metadata(meta_json)
        facts: dict[str, Any] = {"name": name}
        if "grid" in meta:
            facts["grid"] = list(meta["grid"])
        if "block" in meta:
            facts["block"] = list(meta["block"])
        if "registers per thread" in meta:
            facts["registers"] = int(meta["registers per thread"])
        if "shared memory" in meta:
            facts["shared_bytes"] = int(meta["shared memory"])
        key = (name, tuple(facts.get("grid", ())), tuple(facts.get("block", ())))
        seen.setdefault(key, facts)
        dur = duration[0] if duration else None
        if isinstance(dur, (int, float)) and not isinstance(dur, bool) and dur >= 0:
            spent[key] = spent.get(key, 0.0) + dur
        else:
            timed = False
    total = sum(spent.values())
    if timed and total > 0:
        for key, facts in seen.items():
            facts["share"] = round(spent.get(key, 0.0) / total, 4)
    return list(seen.values())


def compiled_facts(compiled: Any) -> dict[str, Any]:
    """What a Triton (or Gluon) compiled kernel says of itself: name, registers, spills, shared memory, warps,
    stages and the PTX's instruction mix (ptxas ran when it was loaded; nothing is compiled or disassembled here).
    A CUTLASS (CuTe DSL) compiled function: cute_facts; a kernel of torch.compile's: inductor_facts."""
    if _is_cute(compiled):
        return cute_facts(compiled)
    if _is_inductor(compiled):
        return inductor_facts(compiled)
    meta = getattr(compiled, "metadata", None)
    return _own_facts(str(getattr(compiled, "name", getattr(meta, "name", "?"))), compiled, meta, meta, [compiled])


def _own_facts(name: str, kernel: Any, shared: Any, config: Any, kept: Iterable[Any]) -> dict[str, Any]:
    """A compiled kernel's facts, each where it is an int: registers and spills from `kernel`, shared memory from
    `shared`, warps and stages from `config`; and the PTX's instruction mix from the first of `kept` that holds PTX."""
    facts: dict[str, Any] = {"name": name}
    for key, attr, owner in (("registers", "n_regs", kernel), ("spills", "n_spills", kernel),
                             ("shared_bytes", "shared", shared), ("warps", "num_warps", config),
                             ("stages", "num_stages", config)):
        value = getattr(owner, attr, None)
        if isinstance(value, int) and not isinstance(value, bool):
            facts[key] = value
    for compiled in kept:
        asm = getattr(compiled, "asm", None)
        ptx = asm.get("ptx") if isinstance(asm, Mapping) else None
        if isinstance(ptx, str):
            facts["ptx"] = ptx_mix(ptx)
            break
    return facts


def _is_inductor(compiled: Any) -> bool:
    return hasattr(compiled, "launchers") and hasattr(compiled, "inductor_meta")


def with_first_calls(launched: Sequence[Mapping[str, Any]], first: Sequence[Any]) -> list[dict[str, Any]]:
    """A side's kernels' facts: those of the kernels its profiled calls launched (`launched`, compiled_facts of
    compiled_launches'), then inductor_facts of each autotuner of torch.compile's code that its first calls ran
    (`first`, once each) and the profiled calls launched no kernel of that name through. A side that replays its own
    CUDA graphs (cudagraph trees: reduce-overhead, max-autotune) launches nothing through them in the profiled calls,
    and its kernels kept the trace's facts alone, no spills. Only inductor's autotuners come from the first calls,
    their facts read once they have chosen; a @triton.autotune kernel's first call launches every candidate, which
    are no kernels of the side."""
    names = {str(facts["name"]) for facts in launched}
    seen: set[int] = set()
    extra = []
    for kernel in first:
        if not _is_inductor(kernel) or id(kernel) in seen:
            continue
        seen.add(id(kernel))
        facts = inductor_facts(kernel)
        if str(facts["name"]) not in names:
            extra.append(facts)
    return [*(dict(facts) for facts in launched), *extra]


def inductor_facts(tuner: Any) -> dict[str, Any]:
    """What a Triton kernel of torch.compile's (inductor's CachingAutotuner: its generated kernels and a user's
    kernel inside a compiled graph) says of the config it launches: the kernel's name (its JIT function's, as the
    profiler names it; a user's kernel's meta name has a number added), and once the autotuner has chosen (one
    launcher left), registers, spills, shared memory, warps and stages, and the PTX's instruction mix where a compiled
    kernel of that config is kept: the launcher's own (store_cubin), or its compile result's. Inductor's static CUDA
    launcher, its default for generated kernels, keeps no PTX: their facts are the rest. Before the autotuner has
    chosen: the name alone."""
    fn = getattr(tuner, "fn", None)
    meta = getattr(tuner, "inductor_meta", None)
    name = str(getattr(fn, "__name__", None) or (meta.get("kernel_name") if isinstance(meta, Mapping) else None) or "?")
    race = race_of(tuner)
    launchers = getattr(tuner, "launchers", None)
    if not isinstance(launchers, Sequence) or len(launchers) != 1:
        return {"name": name, **race}
    launcher = launchers[0]
    config = getattr(launcher, "config", None)
    kept = [getattr(launcher, "bin", None)] + [getattr(result, "kernel", None)
                                               for result in getattr(tuner, "compile_results", None) or ()
                                               if config is not None and getattr(result, "config", None) is config]
    # The launcher holds registers, spills and shared memory; its config, warps and stages.
    return {**_own_facts(name, launcher, launcher, config, kept), **race}


def race_of(tuner: Any) -> dict[str, str]:
    """{"race": a short hash of what inductor's autotuner chose a config of a kernel from} (the kernel's generated
    source, its size hints, its kind of heuristics and the settings inductor passed it, which name the candidates:
    autotune_pointwise, max_autotune, deterministic, ...), or {} where the tuner does not show its source. Two runs
    whose kernel has one race and other launch facts ran another config of the same kernel: the autotuner's pick in
    that process, not an edit of the kernel (raced_kernels)."""
    src = getattr(getattr(tuner, "fn", None), "src", None)
    if not isinstance(src, str):
        return {}
    meta = getattr(tuner, "inductor_meta", None)
    plain = sorted((str(k), repr(v)) for k, v in (meta.items() if isinstance(meta, Mapping) else ())
                   if _plain(v))
    identity = json.dumps([src, repr(getattr(tuner, "size_hints", None)), repr(getattr(tuner, "heuristic_type", None)),
                           plain])
    return {"race": hashlib.sha256(identity.encode()).hexdigest()[:16]}


def _plain(value: Any) -> bool:
    """A setting's value that says the same in every process: numbers, strings, None and lists or tuples of them (a
    device's properties object, a path to a process's own folder, a function do not enter a race)."""
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return value is None or isinstance(value, (bool, int, float, str))


def _is_cute(compiled: Any) -> bool:
    return hasattr(compiled, "kernel_info") and hasattr(compiled, "artifacts")


def cute_facts(compiled: Any) -> dict[str, Any]:
    """What a CUTLASS (CuTe DSL) compiled function says of its kernel: its name, and, where the function was compiled
    with --keep-ptx and --keep-cubin (in memory, its `artifacts`), the PTX's instruction mix and, read from the cubin
    by cuobjdump's resource usage, registers and spills (local memory in 4-byte words, as Triton counts them)."""
    info = getattr(compiled, "kernel_info", None)
    names = [str(name) for name in info] if isinstance(info, Mapping) else []
    facts: dict[str, Any] = {"name": names[0] if names else str(getattr(compiled, "function_name", "?"))}
    artifacts = getattr(compiled, "artifacts", None)
    ptx = getattr(artifacts, "PTX", None)
    if isinstance(ptx, str):
        facts["ptx"] = ptx_mix(ptx)
    cubin = getattr(artifacts, "CUBIN", None)
    if isinstance(cubin, bytes):
        usage = cubin_resources(cubin).get(facts["name"], {})
        for key in ("registers", "spills"):
            if key in usage:
                facts[key] = usage[key]
    return facts


def cubin_resources(cubin: bytes) -> dict[str, dict[str, int]]:
    """Each function of a cubin: registers and spills (local bytes / 4); {} when cuobjdump is missing or fails."""
    return parse_resource_usage(_resource_usage_text(cubin))


def cubin_usage(cubin: bytes) -> dict[str, dict[str, int]]:
    """Each function of a cubin: its resource usage as cuobjdump names it (REG, STACK, SHARED, LOCAL, ...); {} when
    cuobjdump is missing or fails."""
    return resource_usage(_resource_usage_text(cubin))


@functools.cache
def _resource_usage_text(cubin: bytes) -> str:
    """`cuobjdump --dump-resource-usage` of a cubin (the one Triton ships, or one on PATH), once per cubin in a
    process (keyed by the cubin's bytes); "" when there is none or it fails."""
    return _run_cuobjdump(cubin)


def _cuobjdump() -> str | None:
    import shutil

    from .toolchain import bundled_tool

    bundled = bundled_tool("triton", "cuobjdump")
    return str(bundled) if bundled is not None else shutil.which("cuobjdump")


def _run_cuobjdump(cubin: bytes) -> str:
    import subprocess
    import tempfile
    from pathlib import Path

    tool = _cuobjdump()
    if tool is None:
        return ""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "kernel.cubin"
        path.write_bytes(cubin)
        try:
            return subprocess.run([tool, "--dump-resource-usage", str(path)], capture_output=True, text=True,
                                  timeout=60, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            return ""


def resource_usage(text: str) -> dict[str, dict[str, int]]:
    """cuobjdump --dump-resource-usage's output as {function: {"REG": .., "STACK": .., "SHARED": .., "LOCAL": ..}}."""
    found: dict[str, dict[str, int]] = {}
    function = None
    for line in text.splitlines():
        named = re.match(r"\s*Function (\S+?):\s*$", line)
        if named:
            function = named.group(1)
            continue
        values = {name: int(value) for name, value in re.findall(r"\b([A-Z]+):(\d+)", line)}
        if function is not None and "REG" in values:
            found[function] = values
            function = None
    return found


def parse_resource_usage(text: str) -> dict[str, dict[str, int]]:
    """cuobjdump --dump-resource-usage's output as {function: {"registers", "spills"}}."""
    return {function: {"registers": values["REG"], "spills": values.get("LOCAL", 0) // 4}
            for function, values in resource_usage(text).items()}


@contextlib.contextmanager
def compiled_launches() -> Iterator[list[Any]]:
    """Inside: every Triton (and Gluon) kernel launched through a @triton.jit function, its compiled kernel appended
    to the yielded list once (an autotuned one too, through the same method: wrap calls whose autotuner has already
    chosen, or its race's candidates are listed too), every CUTLASS (CuTe DSL) compiled function called, and every
    autotuner of torch.compile's generated code that ran a kernel (its facts read after the calls, once it has chosen:
    inductor_facts). Nothing from a library that is not imported, runs interpreted, or has no such method."""
    import sys

    found: list[Any] = []
    seen: set[int] = set()

    def note(kernel: Any) -> None:
        if kernel is not None and id(kernel) not in seen:
            seen.add(id(kernel))
            found.append(kernel)

    restores: list[tuple[type, str, Any]] = []
    jit = sys.modules.get("triton.runtime.jit")
    cls = getattr(jit, "JITFunction", None)
    original = getattr(cls, "run", None)
    if cls is not None and original is not None:
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            kernel = original(self, *args, **kwargs)
            if not kwargs.get("warmup", False):
                note(kernel)
            return kernel

        restores.append((cls, "run", original))
        cls.run = run
    # A CuTe DSL compiled function is called; inductor's generated code runs each kernel through its autotuner's run.
    for module, base, method in (("cutlass.base_dsl.jit_executor", "JitCompiledFunction", "__call__"),
                                 ("torch._inductor.runtime.triton_heuristics", "CachingAutotuner", "run")):
        found_base = getattr(sys.modules.get(module), base, None)
        for klass in _with_own(found_base, method) if isinstance(found_base, type) else []:
            restores.append((klass, method, klass.__dict__[method]))
            setattr(klass, method, _noting_call(klass.__dict__[method], note))
    try:
        yield found
    finally:
        for klass, name, method in reversed(restores):
            setattr(klass, name, method)


def _with_own(base: type, method: str) -> list[type]:
    """base and its subclasses (all the way down) that define the method themselves."""
    out, todo = [], [base]
    while todo:
        klass = todo.pop()
        todo.extend(klass.__subclasses__())
        if method in klass.__dict__:
            out.append(klass)
    return out


def _noting_call(call: Callable[..., Any], note: Callable[[Any], None]) -> Callable[..., Any]:
    def noted(self: Any, *args: Any, **kwargs: Any) -> Any:
        note(self)
        return call(self, *args, **kwargs)

    return noted


def side_facts(traced: Sequence[Mapping[str, Any]], compiled: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One side's kernels: the trace's (every kernel, its launch shape), each Triton kernel's own facts
    (compiled_facts) merged into the trace's entry of the same name, or listed alone when the side was not traced,
    as on a CPU. Where there is a trace, it says what ran: a compiled kernel it does not name is left out (two
    compiled graphs' kernels of one name and launch shape are one kernel in the trace), never added beside it. One
    compiled kernel launched at several grids (a dynamic-shape graph's, 'name', 'name#2' in the trace) gives its
    facts to each launch; where a name has several compiled variants, each goes to the launch of its number only."""
    own: dict[str, dict[str, Any]] = {}
    variants: Counter[str] = Counter()
    for facts in _numbered(compiled):
        own.setdefault(str(facts["name"]), dict(facts))
        variants[_base(str(facts["name"]))] += 1
    only = {base: own[base] for base, count in variants.items() if count == 1 and base in own}
    kernels = []
    for entry in _numbered(traced):
        merged = dict(entry)
        name = str(entry["name"])
        extra = own.pop(name, None) or only.get(_base(name))
        if extra:
            for key, value in extra.items():
                merged.setdefault(key, value)
        kernels.append(merged)
    if not kernels:
        kernels.extend(own.values())
    return kernels


def call_noting(fn: Callable[[], Any]) -> tuple[Any, list[dict[str, Any]]]:
    """fn() with the compiled kernels it launched (compiled_launches): (its return, their facts)."""
    with compiled_launches() as launched:
        out = fn()
    return out, [compiled_facts(k) for k in launched]


def noting(prepare: Callable[[Any], Any] | None, into: dict[str, list[dict[str, Any]]]) -> Callable[[Any], Any] | None:
    """prepare (a graph capture of one side, the reference first) noting the Triton kernels each side's captured calls
    launched into into[side]: with graph=True the profiled calls replay a graph and launch nothing through Triton."""
    if prepare is None:
        return None
    sides = iter(("reference", "optimized"))

    def noted(fn: Any) -> Any:
        prepared, facts = call_noting(lambda: prepare(fn))
        into.setdefault(next(sides, "optimized"), facts)
        return prepared

    return noted


def sides_of(profiled: Mapping[str, Mapping[str, Any]] | None,
             compiled: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, list[dict[str, Any]]] | None:
    """Each side's kernels as facts: the profiled calls' trace (profiled[side]["kernels"]) with the Triton kernels'
    own facts merged in; None when nothing was seen."""
    found = {}
    for side in ("reference", "optimized"):
        traced = (profiled or {}).get(side, {}).get("kernels") or []
        facts = side_facts(traced, compiled.get(side, []))
        if facts:
            found[side] = facts
    return found or None


def first_calls_facts(reference: Callable[[], Any], optimized: Callable[[], Any]) -> tuple[Any, Any, dict[str, list[dict[str, Any]]] | None]:
    """Each side called once, in that order (their first calls, where Triton compiles), noting the compiled kernels
    each launched: (the reference's return, the optimized side's, each side's kernels as facts or None). For sides
    timed in other processes (speedgate.distributed), which no profiler traces: the compiled kernels' own facts."""
    first_reference, reference_facts = call_noting(reference)
    first_optimized, optimized_facts = call_noting(optimized)
    kernels = sides_of(None, {"reference": reference_facts, "optimized": optimized_facts})
    return first_reference, first_optimized, kernels


def from_samples(value: Any) -> dict[str, list[dict[str, Any]]] | None:
    """The kernels a compare_samples measurement says its sides ran ({"reference": [...], "optimized": [...]}, each
    kernel a mapping naming it), or None where it says none; ValueError naming what is wrong with any other value."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or not set(value) <= {"reference", "optimized"}:
        raise ValueError(f"its codegen must map 'reference' and 'optimized' to lists of kernels, got {value!r}")
    found = {}
    for side, kernels in value.items():
        if not isinstance(kernels, Sequence) or isinstance(kernels, str) or not all(
                isinstance(k, Mapping) and isinstance(k.get("name"), str) for k in kernels):
            raise ValueError(f"its codegen's {side!r} must be a list of kernels, each naming itself, got {kernels!r}")
        if kernels:
            found[str(side)] = [dict(k) for k in kernels]
    return found or None


def _numbered(kernels: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Kernels in launch order, a second variant of one name (another grid, other constexprs) named 'name#2', a
    third 'name#3': one source launched twice in a call (an MLP's two matmuls) stays two kernels."""
    seen: Counter[str] = Counter()
    out = []
    for kernel in kernels:
        name = str(kernel["name"])
        seen[name] += 1
        numbered = name if seen[name] == 1 or "#" in name else f"{name}#{seen[name]}"
        out.append({**kernel, "name": numbered})
    return out


def _base(name: str) -> str:
    """A numbered name's kernel: 'k#3' -> 'k'."""
    return name.split("#", 1)[0]


def _by_name(kernels: Iterable[Mapping[str, Any]] | None) -> dict[str, Mapping[str, Any]]:
    """A side's kernels by their numbered names (_numbered)."""
    return {str(k["name"]): k for k in _numbered(kernels or ())}


def _added_and_gone(was: Mapping[str, Any], now: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(the kernels launched now that the bless did not, those it had that are gone), each in launch order, of two
    sides' kernels by their numbered names (_by_name)."""
    return [n for n in now if n not in was], [n for n in was if n not in now]


def _short(name: str) -> str:
    return name if len(name) <= 60 else name[:57] + "..."


def _said(value: Any) -> str:
    if isinstance(value, list):
        return "x".join(str(v) for v in value)
    return str(value)


def _kernel_changes(side: str, was: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    said = []
    for key in COMPARED:
        if key not in was or key not in now or was[key] == now[key]:
            continue  # a fact one of the two did not record (an older bless, a side not traced) is no change
        if key == "ptx":
            moved = sorted(k for k in {*was[key], *now[key]} if was[key].get(k, 0) != now[key].get(k, 0))
            detail = ", ".join(f"{k} {was[key].get(k, 0)} -> {now[key].get(k, 0)}" for k in moved)
            said.append(f"{side} {_short(str(now['name']))}: PTX {detail}")
        else:
            said.append(f"{side} {_short(str(now['name']))}: {key} {_said(was[key])} -> {_said(now[key])}")
    return said


def changes(blessed: Mapping[str, Sequence[Mapping[str, Any]]] | None,
            measured: Mapping[str, Sequence[Mapping[str, Any]]] | None) -> list[str]:
    """What changed in each side's kernels since the bless, one line each ("optimized _matmul_kernel: spills 0 ->
    24"): a kernel launched now that the bless did not (another pick), one the bless had that is gone, and each
    compared fact of a kernel both have. [] when either recorded nothing for a side."""
    if not blessed or not measured:
        return []
    said: list[str] = []
    for side in ("reference", "optimized"):
        was, now = blessed.get(side), measured.get(side)
        if not was or not now:
            continue
        was_by, now_by = _by_name(was), _by_name(now)
        added, gone = _added_and_gone(was_by, now_by)
        if added or gone:
            # Kernels in place of blessed ones are another pick (repicked_sides); one only added is new work, as a
            # study's injected spin kernel or an extra launch of an edit is; one only gone is work left out.
            how = ("other kernels (another pick)" if added and gone
                   else "more kernels than blessed" if added else "fewer kernels than blessed")
            said.append(f"{side} side launches {how}: "
                        + "; ".join([*(f"+{_short(n)}" for n in added), *(f"-{_short(n)}" for n in gone)]))
        for name in now_by:
            if name in was_by:
                said.extend(_kernel_changes(side, was_by[name], now_by[name]))
    return said


def completed(blessed: Mapping[str, Sequence[Mapping[str, Any]]] | None,
              measured: Mapping[str, Sequence[Mapping[str, Any]]] | None) -> dict[str, list[dict[str, Any]]] | None:
    """The blessed kernels' facts with those only `measured` recorded added, kernel by kernel (a bless from before a
    kind of fact was read, such as a CUTLASS kernel's spills), when both are the same kernels: every fact both hold
    equal, none launched or gone (changes says nothing). None when nothing is added or they differ. Never replaces
    a blessed fact: a re-bless does."""
    if not blessed or not measured or changes(blessed, measured):
        return None
    out: dict[str, list[dict[str, Any]]] = {}
    added = False
    for side, kernels in blessed.items():
        now = _by_name(measured.get(side))
        out[side] = []
        for kernel in kernels:
            merged = dict(kernel)
            for key, value in now.get(str(kernel["name"]), {}).items():
                if key not in merged:
                    merged[key] = value
                    added = True
            out[side].append(merged)
    return out if added else None


def repicked_sides(blessed: Mapping[str, Sequence[Mapping[str, Any]]] | None,
                   measured: Mapping[str, Sequence[Mapping[str, Any]]] | None) -> list[str]:
    """The sides whose kernels are another pick than blessed, which no edit of the case's own code explains: the
    reference's kernels changed in any fact (a library's heuristics, inductor's or an autotuner's choice of a compiled
    reference), or the optimized side launches other kernels in place of blessed ones (a compiled side's other
    template or library call), or ran another config of inductor's kernels whose race is the bless's (raced_kernels).
    The optimized side's own kernel with other registers or launch shape and no race to show it is what an edit of
    that kernel makes too: a slowdown of it stays a regression, with the change named. A kernel only added beside
    the blessed ones is new work, no pick."""
    if not blessed or not measured:
        return []
    found = []
    for side in ("reference", "optimized"):
        was, now = _by_name(blessed.get(side)), _by_name(measured.get(side))
        if not was or not now:
            continue
        added, gone = _added_and_gone(was, now)
        replaced = bool(added) and bool(gone)
        reshaped = any(_reshaped(was[name], now[name]) for name in set(was) & set(now))
        if replaced or (reshaped and side == "reference") or (side == "optimized" and raced_kernels(was, now)):
            found.append(side)
    return found


def differing(blessed: Mapping[str, Sequence[Mapping[str, Any]]] | None,
              measured: Mapping[str, Sequence[Mapping[str, Any]]] | None) -> float | None:
    """How much of a run's kernel time (`measured`) another set of kernels' facts (a pick's) does not share, over
    both sides: the shares (`share`, trace_kernels) of the run's kernels that the pick did not launch or whose
    compared facts or race differ where both record them, and of the pick's kernels the run did not launch (0 where
    the pick holds no share: the run's kernels in their place weigh). 0 for a side either recorded nothing for: the
    facts cannot tell (changes says nothing there either). None unless the run records each kernel's share: a count
    of kernels would weigh a copy like a matmul."""
    if not measured or not all(isinstance(k.get("share"), (int, float)) for ks in measured.values() for k in ks):
        return None
    total = 0.0
    for side in ("reference", "optimized"):
        was, now = _by_name((blessed or {}).get(side)), _by_name(measured.get(side))
        if not was or not now:
            continue
        added, gone = _added_and_gone(was, now)
        moved = [name for name in set(was) & set(now)
                 if _kernel_changes(side, was[name], now[name]) or _other_race(was[name], now[name])]
        total += sum(float(now[name]["share"]) for name in [*added, *moved])
        total += sum(float(was[name].get("share") or 0.0) for name in gone)
    return total


def raced_kernels(was: Mapping[str, Mapping[str, Any]], now: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The kernels of one side (by numbered name, _by_name) that ran another config than blessed as an autotuner's
    pick: [] unless the side launched the blessed kernels and no other, at least one with other PICK_FACTS, and each
    such kernel records one race (race_of) in both. A kernel whose launch facts moved with no race recorded, or any
    kernel of the side with another race (its source, its size hints or inductor's settings changed: an edit), makes
    it [] whatever the others did."""
    added, gone = _added_and_gone(was, now)
    if added or gone or _race_changed(was, now):
        return []  # another kernel, or one whose source or settings changed: an edit somewhere in the side
    reshaped = [name for name in now if _reshaped(was[name], now[name])]
    raced = [name for name in reshaped
             if was[name].get("race") is not None and was[name].get("race") == now[name].get("race")]
    return raced if raced and raced == reshaped else []


def same_kernels(blessed: Mapping[str, Sequence[Mapping[str, Any]]] | None,
                 measured: Mapping[str, Sequence[Mapping[str, Any]]] | None) -> bool:
    """Whether two sets of kernels' facts are the same kernels: none launched or gone and every compared fact both
    hold equal (changes says nothing), and no kernel's race differs where both record one. A fact one of them did not
    record tells nothing (codegen.completed adds it), nor do the MEASURED ones; no facts at all is the same only as no
    facts."""
    if not blessed or not measured:
        return not blessed and not measured
    if changes(blessed, measured):
        return False
    return not any(_race_changed(_by_name(blessed[side]), _by_name(measured[side]))
                   for side in set(blessed) & set(measured))


def _race_changed(was: Mapping[str, Mapping[str, Any]], now: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether a kernel both sets of one side's kernels (by numbered name) hold records another race in each: its
    source, size hints or inductor's settings changed."""
    return any(_other_race(was[name], now[name]) for name in set(was) & set(now))


def _other_race(was: Mapping[str, Any], now: Mapping[str, Any]) -> bool:
    """Whether one kernel records a race in both sets of facts, and not the same."""
    return "race" in was and "race" in now and was["race"] != now["race"]


def _reshaped(was: Mapping[str, Any], now: Mapping[str, Any]) -> bool:
    """Whether one kernel's launch facts (PICK_FACTS) differ where both sets of facts record them."""
    return any(key in was and key in now and was[key] != now[key] for key in PICK_FACTS)


def raced_on(blessed: Mapping[str, Sequence[Mapping[str, Any]]] | None,
             measured: Mapping[str, Sequence[Mapping[str, Any]]] | None, side: str = "optimized") -> list[str]:
    """raced_kernels of one side of two sets of kernels' facts (a bless's, a run's); [] where either has none."""
    was, now = _by_name((blessed or {}).get(side)), _by_name((measured or {}).get(side))
    return raced_kernels(was, now) if was and now else []


def unraced_factor(blessed: Mapping[str, Sequence[Mapping[str, Any]]] | None,
                   measured: Mapping[str, Sequence[Mapping[str, Any]]] | None, side: str = "optimized") -> float | None:
    """How much of a side's measured time its raced kernels' other configs account for, as the factor that puts the
    side back at its blessed kernels' time: the share of the side's kernel time its other kernels took now over the
    share they took when blessed (`share`, trace_kernels). The side's other kernels ran as blessed, so a card's own
    pace, in both shares alike, cancels; time that is no kernel's (the host's, between launches) is in neither share
    and stays. None unless the side raced (raced_kernels), every kernel records its share in both, and the side's other
    kernels took some share in both."""
    was, now = _by_name((blessed or {}).get(side)), _by_name((measured or {}).get(side))
    raced = raced_on(blessed, measured, side)
    if not raced or not all(isinstance(k.get("share"), (int, float)) for k in (*was.values(), *now.values())):
        return None
    before = sum(float(was[name]["share"]) for name in was if name not in raced)
    after = sum(float(now[name]["share"]) for name in now if name not in raced)
    return after / before if before > 0 and after > 0 else None


def added_kernels(blessed: Mapping[str, Sequence[Mapping[str, Any]]] | None,
                  measured: Mapping[str, Sequence[Mapping[str, Any]]] | None, side: str) -> list[str]:
    """The kernels a side launched that the bless did not, where none of the blessed ones is gone: new work beside
    the blessed kernels (an edit's extra launch, a study's injected spin), not another pick. [] when either recorded
    nothing for the side."""
    was, now = _by_name((blessed or {}).get(side)), _by_name((measured or {}).get(side))
    if not was or not now:
        return []
    added, gone = _added_and_gone(was, now)
    return [] if gone else added


__all__ = ["COMPARED", "COMPILERS", "MEASURED", "PICK_FACTS", "PTX_CLASSES", "added_kernels", "call_noting",
           "changes", "compiled_facts", "compiled_launches", "completed", "cubin_resources", "cubin_usage", "cute_facts",
           "differing", "noting", "parse_resource_usage", "ptx_mix", "race_of", "raced_kernels", "raced_on",
           "repicked_sides", "resource_usage", "same_kernels", "side_facts", "sides_of", "trace_kernels",
           "unraced_factor", "with_first_calls"]
