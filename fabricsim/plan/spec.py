"""The plan file (``fabricsim plan PLAN.yaml``): what is trained, how it is split, and on which clusters.

Sections (docs/planning.md explains each, ``plans/`` has examples)::

    name: dsv3_gb300
    model: {preset: deepseek-v3}              # fabricsim/plan/model.py
    parallelism: {tp: 1, pp: 16, vpp: 1, ep: 32, cp: 1}   # dp = gpus / (tp x pp x cp)
    batch: {global_batch: 8192, micro_batch: 1, seq_len: 4096}   # sequences, tokens
    clusters:                                 # one row of results per entry and size
      - {topology: gb300_2048_4x200g}         # a preset name, or any scenario topology section
      - {topology: gb300_8192_4x200g, gpus: [4096, 8192]}   # the first N GPUs of a topology
    fabric: {routing: adaptive, profile: spectrum_x}   # packet_slice: {patterns: 1, use: report}: packet engine
    compute: {peak_tflops: 2500, mfu: 0.4}    # or calibrate: {gpus: 2048, tokens_per_s_per_gpu: 1200}
    overlap: {model: a2a_1f1b, fraction: 0.5}
    placement: {gpus_per_domain: 64}          # optional: 64 of 72 GPUs per rack (default: contiguous)
    background: {pattern: permutation, gpus: unused, message_size: 4MiB, load: 0.5}   # optional: another job
    comm: {dp_bucket: 256MiB, moe: {popularity: uniform}}
    token_budget: 15e12
    seed: 0

Everything that depends on a cluster's size (dp, microbatches, group shapes) is checked when the
topologies are built, before anything is simulated or written (:func:`fabricsim.plan.runner.check`).
"""
from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import ConfigError
from .model import ModelConfig

STRICT = ConfigDict(extra="forbid", validate_default=True)
#: communication types of one step, in output order (docs/planning.md)
COMM_TYPES = ("ep_dispatch", "ep_combine", "tp", "pp_p2p", "dp_reduce_scatter", "dp_all_gather")
FORMATS = ("csv", "parquet", "json")



def _positive_size(v, example: str) -> int:
    """A size field: a human string or a number of bytes, > 0 (the one rule of the plan's sizes)."""
    from .. import units
    try:
        b = units.parse_size(v)
    except ValueError:
        b = 0
    if b <= 0:
        raise ValueError(f"got {v!r} (allowed: a size > 0 such as {example})")
    return b

class Parallelism(BaseModel):
    """How the model is split. Ranks are laid out tp fastest, then cp, then dp, then pp (Megatron's
    order); an EP group is ``ep`` consecutive data-parallel ranks (same tp and cp rank, same stage)."""

    model_config = STRICT
    tp: int = Field(1, ge=1, description="tensor parallel (with sequence parallelism)")
    pp: int = Field(1, ge=1, description="pipeline stages")
    vpp: int = Field(1, ge=1, description="virtual stages per pipeline rank (interleaved 1F1B)")
    ep: int = Field(1, ge=1, description="expert parallel: GPUs sharing one MoE layer's experts")
    cp: int = Field(1, ge=1, description="context parallel (splits each sequence; its own traffic is not "
                    "modelled yet)")
    dp: Optional[int] = Field(None, ge=1, description="data parallel; None: gpus / (tp x pp x cp) for each "
                              "cluster size")


class Batch(BaseModel):
    model_config = STRICT
    global_batch: int = Field(..., ge=1, description="sequences per optimizer step")
    micro_batch: int = Field(1, ge=1, description="sequences per microbatch per data-parallel rank")
    seq_len: int = Field(4096, ge=1, description="tokens per sequence")


class ClusterEntry(BaseModel):
    """One topology and the cluster sizes planned on it (the first ``gpus`` GPUs; None: all of them)."""

    model_config = STRICT
    topology: Union[str, dict] = Field(..., description="a topology preset name (fabricsim topo list) or a "
                                       "scenario topology section")
    gpus: Union[None, int, list[int]] = Field(None, description="GPUs used (one size or a list); None: all")

    @field_validator("gpus")
    @classmethod
    def _sizes(cls, v):
        sizes = [v] if isinstance(v, int) else v
        if sizes is not None:
            if not sizes:
                raise ValueError("got an empty list (allowed: one or more sizes >= 2)")
            for s in sizes:
                if isinstance(s, bool) or s < 2:
                    raise ValueError(f"got {s!r} (allowed: integers >= 2)")
        return v

    @field_validator("topology")
    @classmethod
    def _topology(cls, v):
        if isinstance(v, str):
            from ..topology.catalog import preset_names, unknown_preset_message
            if v not in preset_names():
                raise ValueError(unknown_preset_message(v))
            return {"preset": v}
        return v

    def sizes(self) -> list[Optional[int]]:
        return [self.gpus] if not isinstance(self.gpus, list) else list(self.gpus)


class PacketSlice(BaseModel):
    """Re-simulate a few distinct patterns with the packet engine, beside the flow engine's times.

    Per communication type in ``types``, ``patterns`` distinct patterns (``pick: slowest``: those the
    step waits for, the slowest in the flow engine first; ``random``: drawn from the plan's seed) run
    again, each alone, with the packet engine and with the flow engine (the same run, so the same
    queue-pair numbering and ECMP draws); ``patterns.csv`` gets both times and their ratio. With
    ``use: correct`` each type's communication time is multiplied by the mean packet/flow ratio of
    its sampled patterns (per topology); ``report`` (the default) only reports them. The packet runs'
    wall time is estimated first (fabricsim/engine/estimate.py) and the plan is refused when it is
    above ``max_wall_s``."""

    model_config = STRICT
    patterns: int = Field(1, ge=1, le=64, description="distinct patterns per communication type")
    types: Optional[list[Literal[COMM_TYPES]]] = Field(None, description="communication types sampled "
                                                         "(None: every type the plan has)")
    pick: Literal["slowest", "random"] = Field("slowest", description="which patterns of a type")
    use: Literal["report", "correct"] = Field("report", description="report the packet times, or also "
                                              "correct each type's time by its packet/flow ratio")
    max_wall_s: float = Field(600.0, gt=0, allow_inf_nan=False, description="refuse the plan when the "
                              "packet runs are estimated to take longer (s of wall time)")


class Fabric(BaseModel):
    """Fabric policies of every simulated pattern (scenario sections, by name)."""

    model_config = STRICT
    routing: Optional[str] = Field(None, description="routing policy (None: the profile's or the default)")
    profile: str = Field("none", description="deployment profile: spectrum_x, ethernet or none")
    engine: Literal["flow"] = Field("flow", description="the engine every pattern is timed with (flow; "
                                   "the packet engine re-times a sample: packet_slice)")
    qps_per_connection: int = Field(1, ge=1, le=4096, description="queue pairs per connection")
    time_limit: str = Field("60s", description="simulated-time limit of the run holding every distinct "
                            "pattern of a topology, one after the other")
    batch: Literal["together", "per_pattern"] = Field(
        "together", description="together: every distinct pattern of a topology in one engine run, one after "
        "the other (fast; under ECMP a pattern's hash draws depend on the patterns before it); per_pattern: "
        "one run each (its draws depend only on the pattern, its background and the seed; one run's "
        "overhead per pattern)")
    flow: dict[str, Any] = Field(default_factory=dict, description="the flow engine's parameters "
                                 "(scenario simulation.flow: quantum, group, releases, solver, warm_start, efficiency); e.g. "
                                 "{group: 0} for exact rate recomputation")
    packet_slice: Optional[PacketSlice] = Field(None, description="re-simulate a sample of the patterns "
                                                "with the packet engine (None: flow engine only)")

    @field_validator("routing")
    @classmethod
    def _routing(cls, v):
        if v is not None:
            from ..routing import ROUTING
            if v not in ROUTING:
                raise ValueError(ROUTING.unknown_message(v))
        return v

    @field_validator("profile")
    @classmethod
    def _profile(cls, v):
        from ..config.profiles import PROFILES
        if v not in PROFILES:
            raise ValueError(PROFILES.unknown_message(v))
        return v


class Calibration(BaseModel):
    """A measured throughput at one planned size: the effective GPU FLOP/s is solved from it."""

    model_config = STRICT
    gpus: int = Field(..., ge=2, description="the cluster size the measurement was taken at (one planned size)")
    tokens_per_s_per_gpu: float = Field(..., gt=0, allow_inf_nan=False)


class Compute(BaseModel):
    model_config = STRICT
    peak_tflops: float = Field(2500.0, gt=0, allow_inf_nan=False,
                               description="dense BF16 peak per GPU, TFLOP/s [EST: GB300 ~2.5 PFLOP/s]")
    mfu: float = Field(0.4, gt=0, le=1, description="fraction of peak the step's compute reaches [EST]")
    calibrate: Optional[Calibration] = Field(None, description="solve the effective FLOP/s from a measurement "
                                             "(replaces peak_tflops x mfu)")


def _none(o: "Overlap", kind: str, m: int) -> float:
    return 0.0


def _fraction(o: "Overlap", kind: str, m: int) -> float:
    return float(o.fractions.get(kind, o.fraction or 0.0))


def _a2a_1f1b(o: "Overlap", kind: str, m: int) -> float:
    if kind not in o.fractions and kind in ("ep_dispatch", "ep_combine"):
        return (m - 1) / m      # one microbatch's all-to-all has no other microbatch's compute to hide behind
    return _fraction(o, kind, m)


#: overlap model name -> share of a communication type that may hide, ``f(overlap, type, microbatches)``
OVERLAP = {"none": _none, "fraction": _fraction, "a2a_1f1b": _a2a_1f1b}


class Overlap(BaseModel):
    """How much of each communication can hide behind the busy compute of the step.

    ``none``: nothing; ``fraction``: ``fraction`` of every type (``fractions`` per type override it);
    ``a2a_1f1b``: expert all-to-all of one microbatch hides behind another's compute, all but one
    microbatch's worth ((m - 1) / m), the other types as ``fraction`` (default 0)."""

    model_config = STRICT
    model: Literal[tuple(OVERLAP)] = "none"     # the registered models (OVERLAP)
    fraction: Optional[float] = Field(None, ge=0, le=1, description="share of each communication that may "
                                      "overlap (fraction: required; a2a_1f1b: the non-EP types, default 0)")
    fractions: dict[str, float] = Field(default_factory=dict, description="per communication type")

    @model_validator(mode="after")
    def _check(self):
        if self.model == "fraction" and self.fraction is None and not self.fractions:
            raise ValueError("fraction: required with model 'fraction' (allowed: 0..1)")
        for k, v in self.fractions.items():
            if k not in COMM_TYPES:
                raise ValueError(f"fractions.{k}: unknown communication type (allowed: {', '.join(COMM_TYPES)})")
            if not 0 <= v <= 1:
                raise ValueError(f"fractions.{k}: got {v} (allowed: 0..1)")
        if self.model == "none" and (self.fraction or self.fractions):
            raise ValueError("fraction: model 'none' hides nothing (allowed: model fraction or a2a_1f1b)")
        return self

    def fraction_of(self, kind: str, microbatches: int) -> float:
        """The share of communication type ``kind`` that may hide behind compute (``OVERLAP[model]``)."""
        return OVERLAP[self.model](self, kind, microbatches)



class Comm(BaseModel):
    model_config = STRICT
    dp_bucket: int = Field(256 * 2**20, description="data-parallel gradient / parameter bucket [EST: 256 MiB]")
    ep_concurrency: Literal["group", "stage"] = Field(
        "group", description="group: each EP group's all-to-all simulated alone (identical groups once); stage: "
        "every EP group of a stage at once, sharing the fabric (slower to simulate)")
    moe: dict[str, Any] = Field(default_factory=dict, description="MoE traffic options passed to the trace "
                                "generator (fabricsim trace moe: popularity, dispatch, copies, send_order, ...)")

    @field_validator("dp_bucket", mode="before")
    @classmethod
    def _bucket(cls, v):
        return _positive_size(v, "256MiB")

    @field_validator("moe")
    @classmethod
    def _moe(cls, v):
        owned = {"model", "hidden_size", "experts", "top_k", "expert_ffn_size", "dispatch_bytes_per_token",
                 "combine_bytes_per_token", "ep_size", "gpus", "tokens_per_gpu", "layers", "microbatches",
                 "passes", "gpu_flops", "mfu", "flops_per_token", "seed", "max_nodes_per_token"}
        bad = sorted(set(v) & owned)
        if bad:
            raise ValueError(f"{bad[0]}: set by the plan (model, parallelism, batch, seed), not here")
        return v


class Placement(BaseModel):
    """Where the ranks go (fabricsim/plan/layout.py): contiguously on the first GPUs, or on the first
    ``gpus_per_domain`` GPUs of each NVLink domain (e.g. 64 of 72 per NVL72 rack), of every
    ``domain_stride``-th domain."""

    model_config = STRICT
    gpus_per_domain: Optional[int] = Field(None, ge=1, description="GPUs used per NVLink domain (None: all, "
                                           "contiguous)")
    domain_stride: int = Field(1, ge=1, description="use every this-many-th NVLink domain (1: adjacent racks; "
                               "2: every other rack, a job fragmented across the fabric)")


class BackgroundSpec(BaseModel):
    """Another job's traffic on the fabric while each of the plan's patterns runs
    (fabricsim/plan/background.py): ``pattern`` over ``gpus``, chains of ``message_size`` messages
    keeping the other job's NICs busy a share ``load`` of the time."""

    model_config = STRICT
    pattern: str = Field("permutation", description="permutation (random derangement), ring, all_to_all")
    gpus: Union[Literal["unused"], int, list[int]] = Field(
        "unused", description="unused: the GPUs the planned job leaves free at each size (their first "
        "`fraction`); N: the topology's last N GPUs; or a list of GPU ids (never the job's)")
    fraction: float = Field(1.0, gt=0, le=1, description="share of the unused GPUs (gpus: unused)")
    message_size: int = Field(4 * 2**20, gt=0, le=2**40,
                              description="bytes per message of each flow [EST: 4 MiB], at most 1 TiB")
    load: float = Field(1.0, gt=0, le=1, description="share of time the other job's NICs send, alone")

    @field_validator("pattern")
    @classmethod
    def _pattern(cls, v):
        from .background import PATTERNS
        if v not in PATTERNS:
            import difflib
            near = difflib.get_close_matches(v, list(PATTERNS), n=1)
            raise ValueError(f"unknown background pattern {v!r}" + (f" (did you mean {near[0]!r}?)" if near else "")
                             + f" (allowed: {', '.join(sorted(PATTERNS))})")
        return v

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus_kind(cls, v):
        ok = v == "unused" or (isinstance(v, int) and not isinstance(v, bool)) or (
            isinstance(v, list) and all(isinstance(g, int) and not isinstance(g, bool) for g in v))
        if not ok:
            raise ValueError(f"got {v!r} (allowed: unused, a number of GPUs >= 2, or a list of GPU ids)")
        return v

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, v):
        if isinstance(v, bool):
            raise ValueError(f"got {v!r} (allowed: unused, a number of GPUs >= 2, or a list of GPU ids)")
        if isinstance(v, int) and v < 2:
            raise ValueError(f"got {v} (allowed: at least 2 GPUs)")
        if isinstance(v, list):
            if len(set(v)) != len(v) or len(v) < 2 or any(isinstance(g, bool) or g < 0 for g in v):
                raise ValueError("got a list with repeated, negative or fewer than 2 GPU ids (allowed: 2 or more "
                                 "distinct GPU ids)")
        return v

    @field_validator("message_size", mode="before")
    @classmethod
    def _size(cls, v):
        return _positive_size(v, "4MiB")

    @model_validator(mode="after")
    def _fraction(self):
        if self.fraction != 1.0 and self.gpus != "unused":
            raise ValueError("fraction: a share of the unused GPUs (allowed: with gpus: unused only)")
        return self


class Outputs(BaseModel):
    model_config = STRICT
    formats: list[Literal["csv", "parquet", "json"]] = Field(default_factory=lambda: ["csv", "json"])


class PlanSpec(BaseModel):
    """A whole plan file."""

    model_config = STRICT
    name: str = Field("plan", min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
    description: str = ""
    model: ModelConfig = Field(default_factory=ModelConfig)
    parallelism: Parallelism = Field(default_factory=Parallelism)
    batch: Batch
    clusters: list[ClusterEntry] = Field(..., min_length=1)
    fabric: Fabric = Field(default_factory=Fabric)
    compute: Compute = Field(default_factory=Compute)
    overlap: Overlap = Field(default_factory=Overlap)
    placement: Placement = Field(default_factory=Placement)
    comm: Comm = Field(default_factory=Comm)
    background: Optional[BackgroundSpec] = Field(None, description="another job's traffic while each "
                                                 "pattern runs (None: the job is alone on the fabric)")
    token_budget: Optional[float] = Field(None, gt=0, allow_inf_nan=False, description="tokens to train")
    seed: int = Field(0, ge=0)
    outputs: Outputs = Field(default_factory=Outputs)

    @model_validator(mode="after")
    def _cross(self):
        p, m = self.parallelism, self.model
        if m.experts % p.ep:
            raise ValueError(f"parallelism.ep: {m.experts} experts do not divide over {p.ep} GPUs "
                             "(allowed: a divisor of model.experts)")
        if self.batch.seq_len % (p.tp * p.cp):
            raise ValueError(f"batch.seq_len: {self.batch.seq_len} does not split over tp x cp = {p.tp * p.cp} "
                             "(allowed: a multiple of tp x cp)")
        if p.vpp > 1 and p.pp == 1:
            raise ValueError("parallelism.vpp: virtual stages need pp > 1 (allowed: 1 with pp 1)")
        if m.all_layers < p.pp * p.vpp:
            raise ValueError(f"parallelism.pp: {p.pp} x vpp {p.vpp} stages for {m.all_layers} layers "
                             "(allowed: at most one stage per layer)")
        return self


def load_plan(source) -> tuple[PlanSpec, str]:
    """A validated plan from a YAML path or a dict -> ``(spec, source name)``; errors are one-line
    :class:`~fabricsim.errors.ConfigError` naming the file, the field (and its line)."""
    from ..config.scenario import load_yaml, validation_to_config_error
    if isinstance(source, dict):
        data, root, name = source, None, "<dict>"
    else:
        data, root = load_yaml(source)
        name = str(source)
    if not isinstance(data, dict):
        raise ConfigError(f"got {type(data).__name__} (allowed: a mapping of plan sections)", source=name)
    try:
        return PlanSpec(**data), name
    except ValidationError as exc:
        raise validation_to_config_error(exc, name, root, data=data, model=PlanSpec) from None
    except TypeError as exc:
        raise ConfigError(f"not a mapping of field names: {exc}", source=name) from None
