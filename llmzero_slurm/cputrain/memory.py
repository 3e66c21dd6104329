"""The memory limit and memory figures, per device kind.

The limit is enforced by the operating system or the CUDA allocator, so an oversized
batch fails the way it would on a real cluster: with a genuine allocation error.
- CPU: RLIMIT_DATA caps the data segment (heap and anonymous mappings, which track RSS
  closely for this process); torch then raises "DefaultCPUAllocator: can't allocate memory".
  Each extra thread adds its own allocator arena, so the same batch needs more room without
  OMP_NUM_THREADS=1 (measured: ~640 MB with it, ~690 MB without, for 512 sequences).
- CUDA: torch's per-process memory fraction; torch raises torch.OutOfMemoryError.
"""
from __future__ import annotations

import re
import resource
from pathlib import Path

import torch

from ..errors import ConfigError


def _status_mb(field: str) -> float:
    text = Path("/proc/self/status").read_text()
    found = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
    return int(found.group(1)) / 1024 if found else 0.0


def limit_memory(megabytes: int, device: torch.device) -> None:
    """Cap what the trainer may use from now on; refuse a cap below what it already uses."""
    if device.type == "cuda":
        # the allocator's cap wants an index, where the session's device is a bare `cuda`
        index = torch.cuda.current_device() if device.index is None else device.index
        total = torch.cuda.get_device_properties(index).total_memory / 2**20
        used = torch.cuda.memory_reserved(index) / 2**20
        if megabytes <= used:
            raise ConfigError("--max-memory-mb", f"{megabytes} MB is below the {used:.0f} MB "
                              "already reserved on the GPU")
        torch.cuda.set_per_process_memory_fraction(min(1.0, megabytes / total), index)
        return
    used = _status_mb("VmData")
    if megabytes <= used:
        raise ConfigError("--max-memory-mb", f"{megabytes} MB is below the {used:.0f} MB the "
                          "trainer uses after start-up (model, data, libraries)")
    limit = megabytes * 2**20
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether an exception is an allocation failure (CPU or CUDA)."""
    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return True
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in str(exc)
                                              or "out of memory" in str(exc))


def memory_metrics(device: torch.device) -> dict[str, float]:
    """perf/max_rss_gb (peak resident memory of the process) and, on CUDA, verl's
    actor/perf/max_memory_reserved_gb."""
    out = {"perf/max_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}
    if device.type == "cuda":
        out["actor/perf/max_memory_reserved_gb"] = torch.cuda.max_memory_reserved(device) / 2**30
    return out
