"""The hardware fingerprint and the hardware key that names a baseline file. Imports pynvml lazily."""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

_KEY_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
SOFTWARE_PACKAGES = ("torch", "triton", "pytest", "pytest-speedgate")


def slugify(text: str) -> str:
    """Lower-case, runs of anything but letters and digits become one '-'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def validate_key(key: str) -> str:
    """Return key if it is a safe baseline file name (letters, digits, '.', '_', '-'), else raise ValueError."""
    if not _KEY_PATTERN.match(key) or ".." in key:
        raise ValueError(
            f"hardware key {key!r} is not a safe file name: use 1-100 lower-case letters, digits, '.', '_' "
            "or '-', starting with a letter or digit, and no '..'"
        )
    return key


@dataclass(frozen=True)
class Fingerprint:
    """What the numbers were measured on: hardware (names the file) and software (reported when it drifts)."""

    key: str
    hardware: dict[str, Any]
    software: dict[str, Any] = field(default_factory=dict)
    # An anonymized identity of the card (card_id); not part of to_json: a baseline file's fingerprint names a kind
    # of hardware, and each result carries the card that measured it.
    card: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"hardware": dict(self.hardware), "software": dict(self.software)}


def _decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def visible_gpu_tokens() -> list[str]:
    """The GPUs this process may use: CUDA_VISIBLE_DEVICES's entries if set, else every GPU NVML sees."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        tokens = [t.strip() for t in env.split(",") if t.strip()]
        # CUDA stops at the first invalid entry; "-1" or "" hides every GPU.
        valid = []
        for token in tokens:
            if token.startswith("-"):
                break
            valid.append(token)
        return valid
    return [str(i) for i in range(nvml_device_count())]


@contextlib.contextmanager
def _nvml() -> Iterator[Any]:
    """pynvml, initialised for the block and shut down after it; None where it is missing or finds no driver.
    Asking NVML does not initialise CUDA."""
    try:
        import pynvml  # type: ignore[import-untyped,unused-ignore]  # nvidia-ml-py has no types
    except ImportError:
        yield None
        return
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        yield None
        return
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def nvml_device_count() -> int:
    """GPUs NVML sees (0 without a driver); does not initialise CUDA."""
    with _nvml() as pynvml:
        return 0 if pynvml is None else int(pynvml.nvmlDeviceGetCount())


def compute_capability(token: str) -> int | None:
    """The CUDA compute capability of one visible GPU as Triton names its target (90 for sm_90), from NVML, so that
    asking does not start CUDA in this process; None without NVML, a GPU, or an answer."""
    with _nvml() as pynvml:
        if pynvml is None:
            return None
        try:
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(_nvml_handle(pynvml, token))
        except Exception:  # noqa: BLE001  # a token NVML does not know, an old driver: nothing to settle by
            return None
        return int(major) * 10 + int(minor)


def gpu_uuid(token: str) -> str | None:
    """The UUID of one visible GPU (a CUDA_VISIBLE_DEVICES entry: an index or a UUID), from NVML; None without NVML,
    a GPU, or an answer. One GPU has one UUID however CUDA_VISIBLE_DEVICES spells it."""
    with _nvml() as pynvml:
        if pynvml is None:
            return None
        try:
            return _decode(pynvml.nvmlDeviceGetUUID(_nvml_handle(pynvml, token)))
        except Exception:  # noqa: BLE001  # a token NVML does not know, an old driver: no name but the token's
            return None


def _nvml_handle(pynvml: Any, token: str) -> Any:
    if token.isdigit():
        return pynvml.nvmlDeviceGetHandleByIndex(int(token))
    if token.startswith(("GPU-", "MIG-")):
        return pynvml.nvmlDeviceGetHandleByUUID(token)
    raise ValueError(f"cannot map CUDA_VISIBLE_DEVICES entry {token!r} to an NVML device")


def _optional(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001  # an attribute NVML does not offer on this driver or device: leave it out
        return None


def card_id(serial: str) -> str:
    """An anonymized, stable identity of one card: 12 hex digits of the SHA-256 of its serial number (or UUID)."""
    return hashlib.sha256(serial.strip().encode()).hexdigest()[:12]


def gpu_hardware(token: str) -> dict[str, Any] | None:
    """NVML's view of one GPU, or None when NVML is missing or sees no GPU."""
    with _nvml() as pynvml:
        return None if pynvml is None else _gpu_hardware(pynvml, token)


def _gpu_hardware(pynvml: Any, token: str) -> dict[str, Any] | None:
    """NVML's view of one GPU, NVML initialised; None when it sees no GPU."""
    if pynvml.nvmlDeviceGetCount() == 0:
        return None
    try:
        handle = _nvml_handle(pynvml, token)
    except pynvml.NVMLError as exc:
        # Never fall back to the CPU key here: GPU numbers would land in a CPU baseline file.
        raise RuntimeError(
            f"speedgate: CUDA_VISIBLE_DEVICES entry {token!r} names no GPU that NVML knows ({exc}); "
            "fix CUDA_VISIBLE_DEVICES"
        ) from None
    info: dict[str, Any] = {"kind": "gpu", "name": _decode(pynvml.nvmlDeviceGetName(handle))}
    serial = (_optional(getattr(pynvml, "nvmlDeviceGetSerial", None), handle)
              or _optional(getattr(pynvml, "nvmlDeviceGetUUID", None), handle))
    if serial and _decode(serial).strip() not in ("", "N/A", "[N/A]"):
        info["card"] = card_id(_decode(serial))
    memory = _optional(pynvml.nvmlDeviceGetMemoryInfo, handle)
    if memory is not None:
        info["memory_mib"] = int(memory.total) // 2**20
    attributes = _optional(pynvml.nvmlDeviceGetAttributes, handle)
    if attributes is not None:
        info["sm_count"] = int(attributes.multiprocessorCount)
    info["driver"] = _decode(pynvml.nvmlSystemGetDriverVersion())
    power = _optional(pynvml.nvmlDeviceGetPowerManagementLimit, handle)
    if power is not None:
        info["power_limit_w"] = int(power) // 1000
    max_sm = _optional(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_SM)
    if max_sm is not None:
        info["max_sm_clock_mhz"] = int(max_sm)
    mig = _optional(pynvml.nvmlDeviceGetMigMode, handle)
    info["mig"] = bool(mig[0]) if mig is not None else False
    cuda_driver = _optional(pynvml.nvmlSystemGetCudaDriverVersion)
    if cuda_driver is not None:
        info["cuda_driver"] = f"{int(cuda_driver) // 1000}.{int(cuda_driver) % 1000 // 10}"
    return info


def cpu_hardware() -> dict[str, Any]:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"kind": "cpu", "name": model, "cores": os.cpu_count() or 1, "machine": platform.machine()}


def hardware_key(hardware: dict[str, Any]) -> str:
    """A filename-safe slug of the hardware alone (never of software versions)."""
    if hardware.get("kind") == "gpu":
        key = slugify(hardware["name"])
        if hardware.get("mig"):
            key += "-mig"
        return key
    name = re.sub(r"\((r|tm)\)|\bcpu\b|@.*$", " ", str(hardware.get("name", "")), flags=re.IGNORECASE)
    return f"cpu-{slugify(name) or 'unknown'}-{hardware.get('cores', 1)}c"


def multi_gpu_key(key: str, gpus: int) -> str:
    """The key of results measured across several GPUs of one machine: '2x-nvidia-h200' (its own baseline file)."""
    return validate_key(f"{gpus}x-{key}") if gpus > 1 else key


def software_versions() -> dict[str, Any]:
    """Versions that move numbers without moving the hardware key. Reads metadata; imports nothing new."""
    versions: dict[str, Any] = {"python": platform.python_version()}
    for package in SOFTWARE_PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    torch = sys.modules.get("torch")
    cuda = getattr(getattr(torch, "version", None), "cuda", None)
    if cuda:
        versions["torch_cuda"] = cuda
    return versions


def detect(override_key: str | None = None) -> Fingerprint:
    """Fingerprint the GPU this process uses (the first visible one), or the CPU when there is none."""
    tokens = visible_gpu_tokens()
    hardware = gpu_hardware(tokens[0]) if tokens else None
    if hardware is None:
        hardware = cpu_hardware()
    software = software_versions()
    for name in ("driver", "cuda_driver"):  # NVML reports them, but they are software: drift, not a new key
        if name in hardware:
            software[name] = hardware.pop(name)
    card = hardware.pop("card", None)
    key = validate_key(override_key) if override_key else hardware_key(hardware)
    return Fingerprint(key=key, hardware=hardware, software=software, card=card)


def software_drift(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """'name old -> new' for each version that differs between a baseline's fingerprint and this run."""
    drift = []
    for name in sorted(set(recorded) | set(current)):
        old, new = recorded.get(name), current.get(name)
        if old != new and old is not None and new is not None:
            drift.append(f"{name} {old} -> {new}")
    return drift
