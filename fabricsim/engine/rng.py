"""Named random streams from one seed (``numpy.random.SeedSequence``).

Each component asks for its own stream by name, so adding a component (or drawing more numbers
in one) never shifts another's draws. Hot paths get a :class:`random.Random` (cheap per call)
seeded from the stream; vectorised work gets a :class:`numpy.random.Generator`.

>>> a = RandomStreams(7).py("routing.spray").random()
>>> b = RandomStreams(7).py("routing.spray").random()
>>> a == b
True
>>> RandomStreams(7).py("traffic").random() == a
False
"""
from __future__ import annotations

import hashlib
import random

import numpy as np


def _key(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")


class RandomStreams:
    """All randomness of one simulation; ``seed`` is the only input."""

    def __init__(self, seed: int):
        self.seed = int(seed)

    def sequence(self, name: str) -> np.random.SeedSequence:
        return np.random.SeedSequence(entropy=self.seed, spawn_key=(_key(name),))

    def numpy(self, name: str) -> np.random.Generator:
        return np.random.default_rng(self.sequence(name))

    def py(self, name: str) -> random.Random:
        state = self.sequence(name).generate_state(4, dtype=np.uint64)
        return random.Random(int.from_bytes(state.tobytes(), "little"))

    def u64(self, name: str) -> int:
        """One 64-bit integer (hash salts)."""
        return int(self.sequence(name).generate_state(1, dtype=np.uint64)[0])
