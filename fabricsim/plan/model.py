"""The model being trained: its shape, its parameter counts and its FLOPs per token.

Presets ``deepseek-v3`` and ``gpt-oss-20b``; ``custom`` takes every field from the plan. The MoE
facts (hidden size, experts, top-k, expert FFN size, dispatch / combine bytes per token copy,
node-limited routing) are those of :data:`fabricsim.traces.moe.PRESETS`, the one source the trace
generator uses too; the rest of each preset (layers, dense / MoE split, attention shape, vocabulary)
is in :data:`SHAPES` with its source.

>>> m = ModelConfig(preset="deepseek-v3")
>>> round(m.total_params() / 1e9), round(m.active_params() / 1e9, 1)   # 37B quoted: this counts the input embedding and the output head
(671, 37.6)
>>> m.moe_layers
59
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..traces.moe import PRESETS as MOE_PRESETS

#: per preset, the facts the MoE trace presets do not hold (sources: deepseek-ai/DeepSeek-V3
#: config_671B.json and arXiv 2412.19437 [V]; openai/gpt-oss-20b config.json [V]).
#: ``mtp_modules``: DeepSeek-V3's multi-token-prediction module, counted as one more MoE layer [EST].
SHAPES: dict[str, dict] = {
    "deepseek-v3": dict(layers=61, dense_layers=3, mtp_modules=1, shared_experts=1, dense_ffn_size=18432,
                        vocab_size=129280, heads=128, kv_heads=128, qk_head_dim=192, v_head_dim=128,
                        q_lora_rank=1536, kv_lora_rank=512, rope_head_dim=64),
    "gpt-oss-20b": dict(layers=24, dense_layers=0, mtp_modules=0, shared_experts=0, dense_ffn_size=2880,
                        vocab_size=201088, heads=64, kv_heads=8, qk_head_dim=64, v_head_dim=64,
                        q_lora_rank=None, kv_lora_rank=None, rope_head_dim=0),
}
PRESET_NAMES = ("deepseek-v3", "gpt-oss-20b", "custom")
#: fields taken from :data:`fabricsim.traces.moe.PRESETS`
MOE_FIELDS = ("hidden_size", "experts", "top_k", "expert_ffn_size", "dispatch_bytes_per_token",
              "combine_bytes_per_token", "max_nodes_per_token")
_REQUIRED_CUSTOM = ("layers", "hidden_size", "experts", "top_k", "heads", "vocab_size")


class ModelConfig(BaseModel):
    """``model:`` of a plan. ``None`` fields take the preset's value (custom: see the defaults)."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    preset: Literal["deepseek-v3", "gpt-oss-20b", "custom"] = Field(
        "deepseek-v3", description="model preset; 'custom' needs layers, hidden_size, experts, top_k, heads, "
        "vocab_size")
    layers: Optional[int] = Field(None, ge=1, description="transformer layers (dense + MoE)")
    dense_layers: Optional[int] = Field(None, ge=0, description="leading layers with a dense FFN (custom: 0)")
    mtp_modules: Optional[int] = Field(None, ge=0, description="multi-token-prediction modules, each counted "
                                       "as one more MoE layer [EST] (custom: 0)")
    hidden_size: Optional[int] = Field(None, ge=1)
    experts: Optional[int] = Field(None, ge=1, description="routed experts per MoE layer")
    shared_experts: Optional[int] = Field(None, ge=0, description="shared experts per MoE layer (custom: 0)")
    top_k: Optional[int] = Field(None, ge=1, description="routed experts per token")
    expert_ffn_size: Optional[int] = Field(None, ge=1, description="expert FFN size (custom: hidden_size)")
    dense_ffn_size: Optional[int] = Field(None, ge=1, description="dense FFN size (custom: 4 x hidden_size)")
    vocab_size: Optional[int] = Field(None, ge=1)
    heads: Optional[int] = Field(None, ge=1, description="attention heads")
    kv_heads: Optional[int] = Field(None, ge=1, description="key/value heads (GQA; custom: heads)")
    qk_head_dim: Optional[int] = Field(None, ge=1, description="query/key head dim (custom: hidden / heads)")
    v_head_dim: Optional[int] = Field(None, ge=1, description="value head dim (custom: qk_head_dim)")
    q_lora_rank: Optional[int] = Field(None, ge=1, description="MLA query compression rank (None: no MLA)")
    kv_lora_rank: Optional[int] = Field(None, ge=1, description="MLA key/value compression rank (None: GQA)")
    rope_head_dim: Optional[int] = Field(None, ge=0, description="MLA decoupled RoPE dim (custom: 0)")
    max_nodes_per_token: Optional[int] = Field(None, ge=1, description="node-limited routing (deepseek-v3: 4)")
    dispatch_bytes_per_token: Optional[int] = Field(
        None, ge=1, description="bytes per dispatched token copy (deepseek-v3: FP8 7392; custom: 2 x hidden)")
    combine_bytes_per_token: Optional[int] = Field(
        None, ge=1, description="bytes per combined token copy (BF16: 2 x hidden)")
    activation_bytes: int = Field(2, ge=1, description="bytes per activation element sent between pipeline "
                                  "stages and in tensor-parallel collectives (BF16)")
    gradient_bytes: int = Field(4, ge=1, description="bytes per gradient element in the data-parallel "
                                "reduce-scatter [EST: FP32 reduction]")
    param_bytes: int = Field(2, ge=1, description="bytes per parameter in the data-parallel all-gather "
                             "(distributed optimizer; BF16)")

    @model_validator(mode="after")
    def _resolve(self):
        if self.preset == "custom":
            for f in _REQUIRED_CUSTOM:
                if getattr(self, f) is None:
                    raise ValueError(f"{f}: required with preset 'custom'")
            h = self.hidden_size
            defaults = dict(dense_layers=0, mtp_modules=0, shared_experts=0, expert_ffn_size=h,
                            dense_ffn_size=4 * h, kv_heads=self.heads, qk_head_dim=max(1, h // self.heads),
                            rope_head_dim=0, dispatch_bytes_per_token=2 * h, combine_bytes_per_token=2 * h)
            for f, v in defaults.items():
                if getattr(self, f) is None:
                    setattr(self, f, v)
            if self.v_head_dim is None:
                self.v_head_dim = self.qk_head_dim
        else:
            moe = MOE_PRESETS[self.preset]
            for f in MOE_FIELDS:
                if f == "max_nodes_per_token":
                    if f not in self.model_fields_set:
                        self.max_nodes_per_token = moe[f]
                elif getattr(self, f) is None:
                    setattr(self, f, moe[f])
            for f, v in SHAPES[self.preset].items():
                if getattr(self, f) is None and f not in self.model_fields_set:
                    setattr(self, f, v)
        if self.dense_layers > self.layers:
            raise ValueError(f"dense_layers: {self.dense_layers} is more than the {self.layers} layers "
                             "(allowed: <= layers)")
        if self.top_k > self.experts:
            raise ValueError(f"top_k: {self.top_k} is more than the {self.experts} experts (allowed: <= experts)")
        return self

    # ---------------------------------------------------------------- counts

    @property
    def moe_layers(self) -> int:
        """MoE layers, the MTP modules included."""
        return self.layers - self.dense_layers + self.mtp_modules

    @property
    def all_layers(self) -> int:
        return self.layers + self.mtp_modules

    def attention_params(self) -> int:
        """Parameters of one attention block (MLA when ``kv_lora_rank`` is set, else GQA)."""
        h, n, dqk, dv = self.hidden_size, self.heads, self.qk_head_dim, self.v_head_dim
        if self.kv_lora_rank:
            ql, kvl, rope = self.q_lora_rank, self.kv_lora_rank, self.rope_head_dim
            q = h * ql + ql * n * dqk if ql else h * n * dqk
            kv = h * (kvl + rope) + kvl * n * (dqk - rope + dv)
        else:
            q = h * n * dqk
            kv = h * self.kv_heads * (dqk + dv)
        return q + kv + n * dv * h

    def expert_params(self) -> int:
        """Parameters of one routed expert (gated FFN: three matrices)."""
        return 3 * self.hidden_size * self.expert_ffn_size

    def routed_expert_params(self) -> int:
        """Parameters of every routed expert of the model (sharded over expert parallelism)."""
        return self.moe_layers * self.experts * self.expert_params()

    def dense_params(self) -> int:
        """Every parameter that is not a routed expert: attention, dense FFNs, shared experts, routers,
        embeddings and output head (replicated over data parallelism, sharded by TP and PP)."""
        h = self.hidden_size
        per_moe = self.shared_experts * self.expert_params() + h * self.experts
        return (self.all_layers * self.attention_params() + self.dense_layers * 3 * h * self.dense_ffn_size
                + self.moe_layers * per_moe + 2 * self.vocab_size * h)

    def stage_dense_params(self, pp: int) -> list[int]:
        """:meth:`dense_params` held by each of ``pp`` pipeline stages: layers in order (dense
        ones first, then MoE ones, then the MTP modules), ``ceil(layers / pp)`` per stage as the
        communication model places them; the input embedding on the first stage and the output
        head on the last. Sums to :meth:`dense_params`.

        >>> m = ModelConfig(preset="deepseek-v3")
        >>> sum(m.stage_dense_params(16)) == m.dense_params()
        True
        """
        import math
        h = self.hidden_size
        per_moe = self.shared_experts * self.expert_params() + h * self.experts
        per_stage = math.ceil(self.all_layers / pp)
        out = [0] * pp
        for layer in range(self.all_layers):
            ffn = 3 * h * self.dense_ffn_size if layer < self.dense_layers else per_moe
            out[min(layer // per_stage, pp - 1)] += self.attention_params() + ffn
        out[0] += self.vocab_size * h
        out[-1] += self.vocab_size * h
        return out

    def total_params(self) -> int:
        """All parameters without the MTP modules (the figure models are quoted by)."""
        extra = self.mtp_modules * (self.attention_params() + self.experts * self.expert_params()
                                    + self.shared_experts * self.expert_params() + self.hidden_size * self.experts)
        return self.dense_params() + self.routed_expert_params() - extra

    def active_params(self) -> int:
        """Parameters one token uses, without the MTP modules."""
        active_moe = self.top_k * self.expert_params()
        dense_no_mtp = self.dense_params() - self.mtp_modules * (
            self.attention_params() + self.shared_experts * self.expert_params() + self.hidden_size * self.experts)
        return dense_no_mtp + (self.moe_layers - self.mtp_modules) * active_moe

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token: ``6 x`` the matmul parameters a token uses (the input embedding is a
        lookup, not a matmul; MTP modules included) plus causal attention, ``3 x layers x seq_len x heads x
        (qk_head_dim + v_head_dim)`` (scores and values, forward and backward, half the square)."""
        active_matmul = (self.dense_params() - self.vocab_size * self.hidden_size
                         + self.moe_layers * self.top_k * self.expert_params())
        attn = 3.0 * self.all_layers * seq_len * self.heads * (self.qk_head_dim + self.v_head_dim)
        return 6.0 * active_matmul + attn
