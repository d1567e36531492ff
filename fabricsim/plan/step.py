"""Step time from compute and communication (docs/planning.md, "The model").

With ``F`` training FLOPs per token (:meth:`fabricsim.plan.model.ModelConfig.flops_per_token`), ``B``
tokens per step, ``N`` GPUs and an effective rate ``R`` FLOP/s per GPU (peak x MFU, or calibrated)::

    busy     = F B / (N R)                          compute of one GPU
    bubble   = busy (pp - 1) / (m vpp)              pipeline fill and drain (1F1B, interleaved)
    compute  = busy + bubble
    hide_t   = f_t comm_t                           f_t: the overlap model's share of type t
    hidden_t = hide_t min(1, busy / sum(hide))      the busy compute is shared by every type
    exposed_t = comm_t - hidden_t
    step     = compute + sum(exposed_t)

so with every ``f_t = 1`` the exposed communication is ``max(0, comm - busy)``.

>>> from types import SimpleNamespace as NS
>>> o = NS(fraction_of=lambda kind, m: 1.0)
>>> r = breakdown(busy_s=2.0, pp=1, vpp=1, microbatches=4, comm_s={"tp": 1.5, "pp_p2p": 1.0}, overlap=o)
>>> round(r["exposed_comm_s"], 9), round(r["step_s"], 9)
(0.5, 2.5)
"""
from __future__ import annotations

import math

from ..errors import ConfigError


def breakdown(busy_s: float, pp: int, vpp: int, microbatches: int, comm_s: dict, overlap) -> dict:
    """The step's parts (seconds): ``compute_busy_s``, ``bubble_s``, ``compute_s``, ``<type>_s`` and
    ``<type>_exposed_s`` per communication type, ``comm_s``, ``exposed_comm_s``, ``step_s``."""
    bubble = busy_s * (pp - 1) / (microbatches * vpp)
    hide = {t: overlap.fraction_of(t, microbatches) * c for t, c in comm_s.items()}
    total_hide = sum(hide.values())
    scale = 1.0 if total_hide <= busy_s else (busy_s / total_hide if total_hide > 0 else 0.0)
    out = {"compute_busy_s": busy_s, "bubble_s": bubble, "compute_s": busy_s + bubble}
    exposed_total = 0.0
    for t, c in comm_s.items():
        exposed = c - hide[t] * scale
        out[f"{t}_s"] = c
        out[f"{t}_exposed_s"] = exposed
        exposed_total += exposed
    out["comm_s"] = sum(comm_s.values())
    out["exposed_comm_s"] = exposed_total
    out["step_s"] = out["compute_s"] + exposed_total
    return out


def busy_seconds(flops_per_token: float, tokens_per_step: int, gpus: int, flops_per_s: float) -> float:
    return flops_per_token * tokens_per_step / (gpus * flops_per_s)


def calibrate(target_tokens_per_s_per_gpu: float, flops_per_token: float, tokens_per_step: int, gpus: int,
              step_of, source: str) -> float:
    """The effective FLOP/s per GPU at which ``step_of(rate) -> step seconds`` gives the measured
    throughput (bisection on log rate; throughput grows with the rate). ConfigError if the measurement
    is above what the communication alone allows."""
    def tps(rate):
        return tokens_per_step / step_of(rate) / gpus
    lo, hi = 1e6, 1e21
    if tps(hi) < target_tokens_per_s_per_gpu:
        raise ConfigError(f"{target_tokens_per_s_per_gpu:g} tokens/s/GPU is more than the simulated "
                          f"communication allows at {gpus} GPUs ({tps(hi):.6g} with infinitely fast compute) "
                          "(allowed: a lower measurement, or check the parallelism and overlap)",
                          source=source, field="compute.calibrate.tokens_per_s_per_gpu")
    if tps(lo) > target_tokens_per_s_per_gpu:
        raise ConfigError(f"{target_tokens_per_s_per_gpu:g} tokens/s/GPU needs less than 1 MFLOP/s per GPU "
                          "(allowed: a plausible measurement)", source=source,
                          field="compute.calibrate.tokens_per_s_per_gpu")
    a, b = math.log(lo), math.log(hi)
    for _ in range(200):
        mid = (a + b) / 2
        if tps(math.exp(mid)) < target_tokens_per_s_per_gpu:
            a = mid
        else:
            b = mid
        if b - a < 1e-12:
            break
    return math.exp((a + b) / 2)
