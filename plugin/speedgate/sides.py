"""The two sides of a comparison as the timers call them: zero-argument callables that rotate the input sets, name
their errors and remember what they returned; the input sets, refreshed in place; the poison written into returned
memory before each check, so that memory a call did not write shows."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .timers import Fn

# Input sets made by inputs= and rotated through warm-up and rounds: no result can be reused from the call before,
# and with the L2 flushed before each call no input stays cached. One more set, never seen before, re-checks the
# sides after timing; later seeds refill the sets in place between rounds (InputSets.refresh).
INPUT_SETS = 3


class CaseError(Exception):
    """A compared case cannot run or be checked as written (a side raised, outputs= failed, nothing to compare);
    the message says which side and why."""


def is_tensor(value: Any) -> bool:
    return hasattr(value, "detach") and hasattr(value, "untyped_storage")


def tensors(value: Any) -> Iterator[Any]:
    """Every tensor in value (itself, or inside lists, tuples and dicts)."""
    if is_tensor(value):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors(item)


def snapshot(value: Any) -> Any:
    """A copy of value's tensors (in lists, tuples and dicts), so that a later call cannot overwrite them."""
    if is_tensor(value):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(snapshot(v) for v in value)
    if isinstance(value, dict):
        return {k: snapshot(v) for k, v in value.items()}
    return value


def same_bits(a: Any, b: Any) -> bool:
    """Whether a and b hold the same bits: tensors compared byte for byte (any dtype, fp8 and NaN included),
    containers element by element, anything else with ==."""
    if is_tensor(a) and is_tensor(b):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        a, b = a.detach().contiguous(), b.detach().contiguous()
        return bool(a.view(-1).view(dtype=_byte(a)).equal(b.view(-1).view(dtype=_byte(b))))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_bits(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_bits(a[k], b[k]) for k in a)
    try:
        return bool(a == b)
    except Exception:  # an object without a meaningful ==: nothing to compare
        return True


def _byte(t: Any) -> Any:
    import torch

    return torch.uint8 if t.numel() else t.dtype


def storage_of(t: Any) -> int:
    """The address of the storage a tensor views (views of one buffer share it)."""
    return int(t.untyped_storage().data_ptr())


# -- the poison ------------------------------------------------------------------------------------------------

# The poison is a NaN with a payload of its own (a computed NaN does not carry it), written as bits: so that memory a
# call left unwritten is told from a NaN the call computed. Integer dtypes get a sentinel value, booleans True; fp8
# formats have no room for a payload (their one NaN encoding is the poison).
_NAN_BITS = {8: 0x7FF8A5A5A5A5A5A5, 4: 0x7FC5A5A5, 2: 0x7E5A}
_NAN_BITS_BF16 = 0x7FC5
_FP8_NAN_BITS = {"float8_e4m3fn": 0x7F, "float8_e5m2": 0x7D, "float8_e4m3fnuz": -128, "float8_e5m2fnuz": -128}


def _bits_view(t: Any) -> tuple[Any, int] | None:
    """(t viewed as same-size integers, the poison's bits in them) for floating and complex dtypes; None otherwise."""
    import torch

    dtype = t.dtype
    if dtype.is_complex:
        t = torch.view_as_real(t)
        dtype = t.dtype
    if not dtype.is_floating_point:
        return None
    name = str(dtype).removeprefix("torch.")
    if name in _FP8_NAN_BITS:
        return t.view(torch.int8), _FP8_NAN_BITS[name]
    size = t.element_size()
    ints = {8: torch.int64, 4: torch.int32, 2: torch.int16}[size]
    bits = _NAN_BITS_BF16 if dtype == torch.bfloat16 else _NAN_BITS[size]
    return t.view(ints), bits


def poison_value(dtype: Any) -> Any:
    """The sentinel written into integer and boolean tensors: the dtype's most negative value (the largest for
    unsigned ones); True for booleans. (Floating tensors get a NaN with a payload: _bits_view.)"""
    import torch

    if dtype == torch.bool:
        return True
    return torch.iinfo(dtype).min if dtype.is_signed else torch.iinfo(dtype).max


def _fill_poison(t: Any) -> None:
    view = _bits_view(t)
    if view is None:
        t.fill_(poison_value(t.dtype))
    else:
        view[0].fill_(view[1])


def poisoned_mask(t: Any) -> Any:
    """Where t still holds the poison."""
    view = _bits_view(t)
    if view is None:
        return t == poison_value(t.dtype)
    ints, bits = view
    mask = ints == bits
    return mask.reshape(*mask.shape[:-1], -1).any(-1) if t.dtype.is_complex else mask


def poison(targets: Sequence[Any], spared: set[int]) -> int:
    """Fill each tensor in targets with the poison, except those whose storage is in spared (the inputs: a side may
    return a view of an input, and the poison must never reach what the sides read). A tensor that cannot be written
    (a CUDA graph output a later replay took over, an expanded view) is left as it is. Returns how many tensors were
    poisoned."""
    if not targets:
        return 0  # nothing to poison (sides returning plain Python values): no torch to import for it
    import torch

    done = 0
    seen: set[int] = set()
    for t in targets:
        if id(t) in seen:
            continue
        seen.add(id(t))
        try:
            if not t.numel() or storage_of(t) in spared:
                continue
            with torch.inference_mode():  # inference tensors too; grad-tracking ones are written outside autograd
                _fill_poison(t.detach())
        except RuntimeError:
            continue
        done += 1
    return done


def unwritten(actual: Any, expected: Any) -> tuple[int, int]:
    """(elements of actual still holding the poison where expected does not, elements compared): memory the call
    returned without writing it. Tensors of different shapes or dtypes count nothing (the closeness check says why)."""
    found = total = 0
    for a, e in zip(tensors(actual), tensors(expected)):
        if a.shape != e.shape or a.dtype != e.dtype or not a.numel():
            continue
        a_, e_ = a.detach(), e.detach().to(a.device)
        found += int((poisoned_mask(a_) & ~poisoned_mask(e_)).sum())
        total += a_.numel()
    return found, total


# -- the input sets --------------------------------------------------------------------------------------------

def _copy_into(old: Any, new: Any, case_id: str, where: str) -> Any:
    """new's contents in old's tensors (same storage), for a refresh; other values are taken from new."""
    if is_tensor(old):
        if not is_tensor(new) or old.shape != new.shape or old.dtype != new.dtype or old.device != new.device:
            raise CaseError(f"speedgate: {case_id}: inputs= made {_describe(new)} for {where} where an earlier seed "
                            f"made {_describe(old)}: every seed must make the same shapes, dtypes and devices")
        import torch

        with torch.no_grad():
            old.copy_(new)
        return old
    if isinstance(old, (list, tuple)) and isinstance(new, (list, tuple)) and len(old) == len(new):
        return type(old)(_copy_into(o, n, case_id, f"{where}[{i}]") for i, (o, n) in enumerate(zip(old, new)))
    if isinstance(old, dict) and isinstance(new, dict) and old.keys() == new.keys():
        return {k: _copy_into(old[k], new[k], case_id, f"{where}[{k!r}]") for k in old}
    return new


def _describe(value: Any) -> str:
    if is_tensor(value):
        return f"a {tuple(value.shape)} {value.dtype} tensor on {value.device}"
    return type(value).__name__


class InputSets:
    """inputs=: make(seed) returns one set of arguments; both sides are called as fn(*args)."""

    def __init__(self, make: Callable[[int], Sequence[Any]], case_id: str, count: int = INPUT_SETS) -> None:
        if not callable(make):
            raise TypeError(f"speedgate: {case_id}: inputs= must be a callable make(seed) returning a tuple of arguments")
        self._make, self.case_id = make, case_id
        self.sets = [self.make(seed) for seed in range(count)]
        self.first_copy = snapshot(self.sets[0])  # the checked set, to catch a side that writes its inputs
        self.fresh_seed = count
        self._next_seed = count + 1
        self.refreshes = 0
        self.distinct = True  # False once a refresh found make() returning the same data for another seed

    def make(self, seed: int) -> tuple[Any, ...]:
        try:
            args = self._make(seed)
        except Exception as exc:
            raise CaseError(f"speedgate: {self.case_id}: inputs=({seed}) raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(args, (tuple, list)):
            raise CaseError(f"speedgate: {self.case_id}: inputs= must return a tuple of arguments, got {type(args).__name__}")
        return tuple(args)

    def storages(self) -> set[int]:
        """The storages of every input tensor of every set: never poisoned."""
        return {storage_of(t) for args in self.sets for t in tensors(args)}

    def assert_unchanged(self, side: str) -> None:
        """Fail when the side's first call changed the checked set's arguments (an in-place write to an input)."""
        for i, (now, before) in enumerate(zip(self.sets[0], self.first_copy)):
            if not same_bits(now, before):
                raise CaseError(f"speedgate: {self.case_id}: the {side} side changed its inputs (argument {i}) on its "
                                "first call. A timed side must leave its inputs as it found them; each call would "
                                "otherwise see different data")

    def refresh(self) -> None:
        """Fill every set with the contents make() gives for new seeds, in place: the same tensors, so a result
        cached by input address or shape goes stale. Outside the timed interval."""
        for k, args in enumerate(self.sets):
            seed = self._next_seed
            self._next_seed += 1
            new = self.make(seed)
            if len(new) != len(args):
                raise CaseError(f"speedgate: {self.case_id}: inputs=({seed}) made {len(new)} arguments, an earlier seed "
                                f"{len(args)}")
            if self.refreshes == 0 and k == 0 and same_bits(new, args):
                self.distinct = False
            self.sets[k] = tuple(_copy_into(old, fresh, self.case_id, f"argument {i}")
                                 for i, (old, fresh) in enumerate(zip(args, new)))
        self.refreshes += 1


class Side:
    """One side as a zero-argument callable for the timers: errors named, inputs rotated, what it returned last
    remembered (to poison it before the next check, and to check the last timed call of a round)."""

    def __init__(self, fn: Callable[..., Any], name: str, case_id: str, inputs: InputSets | None,
                 outputs: Fn | None, copy: bool) -> None:
        if not callable(fn):
            kind = "callable taking the arguments inputs= makes" if inputs else "zero-argument callable"
            raise TypeError(f"speedgate: {case_id}: the {name} must be a {kind}, got {type(fn).__name__}")
        functools.update_wrapper(self, fn)  # a scripted clock finds the side by its __name__
        self.fn, self.name, self.case_id = fn, name, case_id
        self.inputs, self.outputs, self.copy = inputs, outputs, copy
        self.calls = 0
        self.pinned: tuple[Any, ...] | None = None
        # What the last call returned (raw) and on which set: poisoned before the next check, and with inputs= the
        # last timed call's output checked at the rounds' checkpoints.
        self.last: Any = None
        self.last_set: int | None = None
        self.returned: list[Any] = []  # every tensor a checked call returned: poisoned before the next check
        self.buffers: Any = None  # outputs=: what outputs() returned last (the buffers themselves, not a copy)

    def __call__(self) -> Any:
        first = self.calls == 0
        args: tuple[Any, ...] = ()
        index: int | None = None
        if self.inputs is not None:
            if self.pinned is not None:
                args = self.pinned
            else:
                index = self.calls % len(self.inputs.sets)
                args = self.inputs.sets[index]
        self.calls += 1
        try:
            out = self.fn(*args)
        except Exception as exc:
            raise CaseError(f"speedgate: {self.case_id}: the {self.name} callable raised {type(exc).__name__}: {exc}") from exc
        self.last, self.last_set = out, index
        if first and self.inputs is not None:
            self.inputs.assert_unchanged(self.name)
        return self.watched(out) if first else out

    def call_on(self, args: tuple[Any, ...]) -> Any:
        """One untimed call on these arguments (a checkpoint's), its error named; not counted in the rotation."""
        try:
            out = self.fn(*args)
        except Exception as exc:
            raise CaseError(f"speedgate: {self.case_id}: the {self.name} callable raised {type(exc).__name__}: {exc}") from exc
        self.last, self.last_set = out, None
        return out

    def watched(self, out: Any) -> Any:
        """What a checked call returns: outputs() taken right after it in outputs= mode (a copy for the reference,
        whose buffer the other side's call may overwrite), else its own return value."""
        if self.outputs is None:
            return out
        try:
            out = self.outputs()
        except Exception as exc:
            raise CaseError(f"speedgate: {self.case_id}: outputs= raised {type(exc).__name__}: {exc} (after the {self.name})") from exc
        if out is None:
            raise CaseError(f"speedgate: {self.case_id}: outputs= returned None after the {self.name}: return what the sides write")
        self.buffers = out
        return snapshot(out) if self.copy else out

    def forget(self) -> None:
        """Drop what the side returned (after the rounds: the memory is the case's again)."""
        self.last, self.last_set = None, None
        self.returned, self.buffers = [], None
