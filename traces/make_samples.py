"""Write the sample MoE traces traces/sample_moe_small.{parquet,csv} (seeded, deterministic).

16 GPUs, 2 layers, one microbatch. Per layer:

* dispatch: an all-to-all with skewed sizes. Each GPU sends ``TOKENS`` token copies, each to the GPU
  holding its expert; expert (GPU) popularity is Zipf(``ZIPF_S``) over a per-layer random order,
  copies are drawn multinomially (copies for the sender itself stay local), at least one copy per
  pair so every pair has a message. ``DISPATCH_BYTES`` per copy (FP8 hidden state plus scales).
* combine: the reverse messages (dst -> src), ``COMBINE_BYTES`` per copy (BF16), each depending on
  the dispatch of the same layer and GPU pair with a 5 us expert-compute gap.
* the next layer's dispatch from GPU g depends on every combine of the previous layer arriving at g
  (its tokens are back), with a ``ATTENTION_GAP_PS`` gap for the attention block.

Run from the repository root: ``python traces/make_samples.py``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from fabricsim.traces import Trace, TraceRecord, check_trace, write_trace

SEED = 5
GPUS = 16
LAYERS = 2
TOKENS = 256                 # token copies sent per GPU per layer (tokens x top-k)
HIDDEN = 1024
DISPATCH_BYTES = HIDDEN + 32  # FP8 values + one fp32 scale per 128 values
COMBINE_BYTES = 2 * HIDDEN    # BF16
ZIPF_S = 0.8
EXPERT_GAP_PS = 5_000_000     # 5 us
ATTENTION_GAP_PS = 2_000_000  # 2 us

HERE = Path(__file__).resolve().parent


def make_trace(seed: int = SEED) -> Trace:
    rng = np.random.default_rng(seed)
    records: list[TraceRecord] = []
    prev_combine_to: dict[int, list[int]] = {}
    for layer in range(LAYERS):
        order = rng.permutation(GPUS)
        pop = np.empty(GPUS)
        pop[order] = 1.0 / np.arange(1, GPUS + 1) ** ZIPF_S
        dispatch: dict[tuple[int, int], tuple[int, int]] = {}  # (s, d) -> (message id, copies)
        for s in range(GPUS):
            w = pop.copy()
            w[s] = 0.0
            w /= w.sum()
            copies = rng.multinomial(TOKENS - (GPUS - 1), w) + 1
            for d in range(GPUS):
                if d == s:
                    continue
                mid = len(records)
                records.append(TraceRecord(mid, s, d, int(copies[d]) * DISPATCH_BYTES, f"moe.l{layer}.dispatch",
                                           "dispatch", layer, 0, tuple(prev_combine_to.get(s, ())),
                                           ATTENTION_GAP_PS if layer else 0, 0))
                dispatch[(s, d)] = (mid, int(copies[d]))
        prev_combine_to = {g: [] for g in range(GPUS)}
        for (s, d), (mid, copies) in dispatch.items():
            cid = len(records)
            records.append(TraceRecord(cid, d, s, copies * COMBINE_BYTES, f"moe.l{layer}.combine", "combine",
                                       layer, 0, (mid,), EXPERT_GAP_PS, 0))
            prev_combine_to[s].append(cid)
    return check_trace(Trace(records, "sample_moe_small"), num_hosts=GPUS)


def main() -> None:
    t = make_trace()
    for ext in ("parquet", "csv"):
        p = write_trace(t, HERE / f"sample_moe_small.{ext}")
        print(f"wrote {p} ({len(t)} messages, {sum(r.size_bytes for r in t.records)} bytes)")


if __name__ == "__main__":
    main()
