"""The number format of training and decoding: bfloat16 or float16 autocast, or float32 (Config.precision)."""
from __future__ import annotations

from contextlib import nullcontext

import torch


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bfloat16 matrix products natively (AVX-512 BF16 or AMX tiles, as PyTorch's
    own probes report them); without, bf16 autocast on the CPU emulates them and is slower than float32."""
    probes = [getattr(torch.cpu, name, None)
              for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(probe() for probe in probes if probe is not None)


def resolved_precision(device: torch.device, precision: str = "auto") -> str:
    """What `precision` (see Config.precision) means on `device`: "fp32", "bf16" or "fp16".
    Example: resolved_precision(torch.device("cpu")) -> "bf16" on a CPU with bf16 units, else "fp32" """
    if precision not in ("auto", "fp32", "bf16", "fp16"):
        raise ValueError(f"precision must be 'auto', 'fp32', 'bf16' or 'fp16', got {precision!r}")
    if precision != "auto":
        return precision
    if device.type != "cuda":
        return "bf16" if cpu_has_bf16() else "fp32"
    return "bf16" if torch.cuda.is_bf16_supported() else "fp16"


def _autocast(device: torch.device, precision: str = "auto"):
    """(autocast context, GradScaler or None) for `precision` (see Config.precision) on `device`.
    Example: _autocast(torch.device("cpu"), "fp32") -> (nullcontext(), None);
             "bf16" -> (torch.autocast("cpu", bf16), None);
             "auto" on a CPU -> "bf16" where cpu_has_bf16(), else "fp32" """
    precision = resolved_precision(device, precision)
    if precision == "fp32":
        return nullcontext(), None
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16), None
    if device.type != "cuda":
        raise ValueError("precision 'fp16' needs a GPU: use 'bf16' or 'fp32' on a CPU")
    return torch.autocast("cuda", dtype=torch.float16), torch.amp.GradScaler("cuda")

