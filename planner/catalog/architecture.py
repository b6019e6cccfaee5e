"""A model's architecture, parsed from its Hugging Face ``config.json``.

Covers dense GQA transformers (Llama, Mistral, Qwen2/3), mixtures of experts (Mixtral, Qwen3-MoE,
DeepSeek-V3, gpt-oss, MiniMax-M2, Llama 4), multi-head latent attention (DeepSeek-V3, Kimi-K2,
GLM-5), sliding-window layers (Mistral 7B v0.1, gpt-oss) and hybrid linear-attention models
(Qwen3-Next, Qwen3.5). Parameter counts are computed from the shapes, not copied from the model
card, so a user's config.json gets them too.

Conventions:
- ``total_params``: every weight in the checkpoint of the main model (no speculative/MTP heads,
  no vision encoder of a multimodal checkpoint), biases and norms included.
- ``active_params``: the weights a token's matmuls touch: attention, dense MLPs, the router,
  the top-k routed experts and the shared experts, and the lm_head. The input embedding is a
  table lookup, not a matmul, so it is excluded (this matches how gpt-oss-120b's 5.1B and
  Mixtral's 12.9B active figures are stated; Kimi-K2's 32B, Qwen3.5's 17B and Llama 4's 17B
  count the embedding too, so they read about 1B above ``active_params``).

Fields whose meaning is not the obvious one (read in the engines' model files, vLLM
``vllm/model_executor/models/`` and Hugging Face transformers ``models/``, 2026-12-02):
- Multimodal checkpoints (Kimi-K2.5, Qwen3.5, Llama 4) nest the language model's fields in
  ``text_config``; they are read from there. The vision tower (Kimi-K2.5's MoonViT ~0.4B,
  Qwen3.5's 27-layer ViT) is under 0.2% of these models and is not counted.
- Kimi-K2 / K2.5 (``kimi_k2``) are DeepSeek-V3's architecture (``DeepseekV3ForCausalLM``): MLA
  with ``q_lora_rank``/``kv_lora_rank``, 384 routed experts (``n_routed_experts``) plus
  ``n_shared_experts`` of ``moe_intermediate_size``, the first ``first_k_dense_replace`` layers
  dense; 64 heads instead of V3's 128.
- GLM-5 (``glm_moe_dsa``): MLA (``qk_nope_head_dim`` 192 + ``qk_rope_head_dim`` 64 per query
  head, ``v_head_dim`` 256) with DeepSeek Sparse Attention's ``index_*`` fields, as V3.2.
- MiniMax-M2 (``minimax_m2``): GQA with ``head_dim`` 128 (48 x 128 query width above the 3072
  hidden size); ``intermediate_size`` is the width of each of the ``num_local_experts`` experts
  (every layer is MoE, no shared expert: ``shared_intermediate_size`` 0); ``use_qk_norm`` with
  ``qk_norm_type`` ``per_layer`` is one RMSNorm over all query heads' outputs and one over all
  key heads' (``heads x head_dim`` and ``kv_heads x head_dim`` weights), not Qwen3's per-head
  norm (vLLM ``minimax_m2.py``: ``MiniMaxText01RMSNormTP(head_dim * total_num_heads)``);
  ``rotary_dim`` 64 rotates half of each head (no effect on shapes).
- Llama 4 (``llama4``): ``intermediate_size`` is the width of each routed expert and of the
  one shared expert every MoE layer has (Meta's Llama 4 post: "128 routed experts and a shared
  expert"); ``intermediate_size_mlp`` the width of the dense layers' FFN; MoE layers are every
  ``interleave_moe_layer_step``-th (transformers: ``range(step - 1, layers, step)``; Scout 1:
  all 48, Maverick 2: 24). Its QK norm is a weightless L2 norm. Three layers in four use
  chunked local attention over ``attention_chunk_size`` (8192) tokens: the RoPE layers of
  ``no_rope_layers`` (1 = RoPE), by default all but every 4th (``no_rope_layer_interval``), as
  transformers and vLLM's ``llama4.py`` (``ChunkedLocalAttention`` unless the layer is NoPE)
  read it. vLLM's hybrid KV cache manager keeps only the current chunk of those layers
  (``ChunkedLocalAttentionSpec``: at most ``min(chunk + max_num_batched_tokens,
  max_model_len)`` tokens at start-up, as a sliding window's), on by default since
  vllm-project/vllm PR #29627 (``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE`` "1";
  PR #21761 had it off from July 2025, and PR #46553's June 2026 proposal to turn it off again
  was closed). So the chunked layers are ``sliding`` layers with a window of the chunk here: an
  upper bound (a chunked layer holds 0 to 8192 tokens, 4096 on average at long contexts) for
  the cache and for the attention FLOPs.
- Qwen3.5 (``qwen3_5_moe``): Qwen3-Next's hybrid layout (``layer_types``: three Gated DeltaNet
  layers, then one gated full-attention layer) with the output gate named ``attn_output_gate``;
  vLLM's ``qwen3_5.py`` builds its layers from Qwen3-Next's (``Qwen3NextAttention``, the same
  Gated DeltaNet), fusing the checkpoint's ``in_proj_qkv``/``in_proj_z`` and
  ``in_proj_b``/``in_proj_a`` into Qwen3-Next's ``in_proj_qkvz``/``in_proj_ba``: the same
  shapes.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from planner.catalog.limits import check_config_sizes

LayerKind = Literal["full", "sliding", "linear"]
ModelClass = Literal[
    "dense GQA",
    "coarse MoE",
    "fine-grained MoE",
    "MLA",
    "sliding-window",
    "hybrid linear attention",
]
#: the architecture classes the performance model is validated on, one held out at a time
MODEL_CLASSES: tuple[ModelClass, ...] = (
    "dense GQA",
    "coarse MoE",
    "fine-grained MoE",
    "MLA",
    "sliding-window",
    "hybrid linear attention",
)
#: an MoE with at most this many routed experts is "coarse" (Mixtral's 8, Llama-4 Scout's 16);
#: more is "fine-grained" (DeepSeek's 256, Qwen3's 128, gpt-oss-20b's 32)
COARSE_MOE_MAX_EXPERTS = 16


class ModelArchitecture(BaseModel):
    model_config = ConfigDict(frozen=True)

    model_type: str
    num_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    intermediate_size: int = Field(ge=0, description="FFN width of the dense (non-MoE) layers")
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    attention_output_gate: bool = False  # Qwen3-Next/3.5 gate the attention output (q_proj x2)
    # weights of the query/key norms of one attention layer: 2 x head_dim for Qwen3's per-head
    # RMSNorm, (heads + kv_heads) x head_dim for MiniMax-M2's per-layer one, 0 without
    qk_norm_params: int = Field(default=0, ge=0)
    # the query/key norms span every head (MiniMax-M2's per-layer norm): with the heads split
    # over tensor-parallel ranks, each step all-reduces the sums of squares before normalising
    qk_norm_across_heads: bool = False
    max_position_embeddings: int | None = None
    torch_dtype: str = "bfloat16"
    # Multi-head latent attention (DeepSeek-V2/V3).
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    # Mixture of experts.
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    shared_expert_gate: bool = False
    expert_bias: bool = False
    moe_layers: tuple[int, ...] = ()
    # Per-layer attention kind and the sliding window.
    layer_kinds: tuple[LayerKind, ...]
    sliding_window: int | None = None
    # Linear-attention layers (Qwen3-Next gated delta net).
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
    # DeepSeek Sparse Attention (DeepSeek-V3.2): a lightning indexer of index_n_heads x
    # index_head_dim scores every earlier token; the main attention reads the index_topk best
    index_n_heads: int = 0
    index_head_dim: int = 0
    index_topk: int = 0
    # the checkpoint's quantization_config.quant_method (fp8, awq, mxfp4, ...), and whether it
    # leaves attention in 16-bit (gpt-oss: MXFP4 experts only)
    quant_method: str | None = None
    experts_only_quantized: bool = False
    # FP8 weights scaled per block (quantization_config.weight_block_size, e.g. [128, 128]:
    # DeepSeek-V3/R1, Qwen3-*-FP8, GLM-4.x-FP8), with activations quantised per token group
    block_scaled_fp8: bool = False
    # integer weights scaled per group (AWQ/GPTQ ``group_size``, compressed-tensors
    # ``config_groups.*.weights.group_size``; 0: not stated) and whether each group also
    # stores a zero point (AWQ ``zero_point``, GPTQ ``sym`` False, compressed-tensors
    # ``symmetric`` False): Kimi-K2.5's INT4 experts are symmetric groups of 32
    quant_group_size: int = 0
    quant_zero_point: bool = True
    # multi-token-prediction layers shipped beside the model (DeepSeek-V3/R1 and GLM-4.5
    # ``num_nextn_predict_layers``, Qwen3-Next ``mtp_num_hidden_layers``): the MTP draft
    num_mtp_layers: int = 0

    # ----- shape facts -------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def num_full_layers(self) -> int:
        return _layer_kind_counts(self.layer_kinds).get("full", 0)

    @property
    def num_sliding_layers(self) -> int:
        return _layer_kind_counts(self.layer_kinds).get("sliding", 0)

    @property
    def num_linear_layers(self) -> int:
        return _layer_kind_counts(self.layer_kinds).get("linear", 0)

    @property
    def num_attention_layers(self) -> int:
        """Layers that keep a per-token KV cache (full or sliding-window attention)."""
        return self.num_full_layers + self.num_sliding_layers

    @property
    def model_classes(self) -> tuple[ModelClass, ...]:
        """The architecture classes this model belongs to (see :data:`MODEL_CLASSES`).

        A model can be in several: DeepSeek-V3 is MLA and fine-grained MoE, gpt-oss is
        fine-grained MoE with sliding-window layers. "dense GQA" is a model with none of the
        other features (multi-head attention counts as GQA with as many KV heads as heads).
        """
        classes: list[ModelClass] = []
        if self.is_moe:
            coarse = self.num_experts <= COARSE_MOE_MAX_EXPERTS
            classes.append("coarse MoE" if coarse else "fine-grained MoE")
        if self.is_mla:
            classes.append("MLA")
        if self.num_sliding_layers:
            classes.append("sliding-window")
        if self.num_linear_layers:
            classes.append("hybrid linear attention")
        return tuple(classes) or ("dense GQA",)

    @property
    def sparse_attention_topk(self) -> int | None:
        """Keys each query attends to under DeepSeek Sparse Attention (V3.2's ``index_topk``)."""
        return self.index_topk if self.index_n_heads else None

    # ----- parameter counts ----------------------------------------------------------------
    def _attention_params(self) -> int:
        h = self.hidden_size
        if self.is_mla:
            assert self.kv_lora_rank is not None
            rope = self.qk_rope_head_dim or 0
            nope = self.qk_nope_head_dim or 0
            v = self.v_head_dim or self.head_dim
            q_head = nope + rope
            if self.q_lora_rank:
                q = (
                    h * self.q_lora_rank
                    + self.q_lora_rank
                    + self.q_lora_rank * (self.num_attention_heads * q_head)
                )
            else:
                q = h * self.num_attention_heads * q_head
            kv_a = h * (self.kv_lora_rank + rope) + self.kv_lora_rank
            kv_b = self.kv_lora_rank * self.num_attention_heads * (nope + v)
            o = self.num_attention_heads * v * h
            return q + kv_a + kv_b + o
        q_out = self.num_attention_heads * self.head_dim
        kv_out = self.num_kv_heads * self.head_dim
        q = h * q_out * (2 if self.attention_output_gate else 1)
        params = q + 2 * h * kv_out + q_out * h
        if self.attention_bias:
            params += q_out + 2 * kv_out + h
        params += self.qk_norm_params
        if self.model_type == "gpt_oss":
            params += self.num_attention_heads  # attention sinks
        return params

    def _linear_attention_params(self) -> int:
        h = self.hidden_size
        key_dim = self.linear_num_key_heads * self.linear_key_head_dim
        value_dim = self.linear_num_value_heads * self.linear_value_head_dim
        in_proj = h * (2 * key_dim + 2 * value_dim) + h * 2 * self.linear_num_value_heads
        conv = (2 * key_dim + value_dim) * self.linear_conv_kernel_dim
        per_head = 2 * self.linear_num_value_heads  # A_log and dt_bias
        norm = self.linear_value_head_dim
        out = value_dim * h
        return in_proj + conv + per_head + norm + out

    def _ffn_params(self, width: int, bias: bool = False) -> int:
        """A gated (SwiGLU) FFN: gate, up and down projections."""
        params = 3 * self.hidden_size * width
        if bias:
            params += 2 * width + self.hidden_size
        return params

    def _expert_params(self) -> int:
        return self._ffn_params(self.moe_intermediate_size, bias=self.expert_bias)

    def _shared_params(self) -> int:
        if not self.shared_expert_intermediate_size:
            return 0
        gate = self.hidden_size if self.shared_expert_gate else 0
        return self._ffn_params(self.shared_expert_intermediate_size) + gate

    def _router_params(self) -> int:
        bias = self.num_experts if self.expert_bias else 0
        return self.hidden_size * self.num_experts + bias

    def _mixer_params(self, layer: int) -> int:
        if self.layer_kinds[layer] == "linear":
            return self._linear_attention_params()
        return self._attention_params()

    def layer_params(self, layer: int, *, active_only: bool = False) -> int:
        norms = 2 * self.hidden_size
        mixer = self._mixer_params(layer)
        if layer in self.moe_layers:
            experts = self.experts_per_token if active_only else self.num_experts
            mlp = experts * self._expert_params() + self._shared_params() + self._router_params()
        else:
            mlp = self._ffn_params(self.intermediate_size)
        return norms + mixer + mlp

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def total_params(self) -> int:
        layers = _layers_params(self, active_only=False)
        return layers + self.embedding_params + self.lm_head_params + self.hidden_size

    @property
    def active_params(self) -> int:
        layers = _layers_params(self, active_only=True)
        return layers + self.vocab_size * self.hidden_size + self.hidden_size

    @property
    def expert_params_total(self) -> int:
        """Weights of all routed experts (what expert parallelism or MoE offload splits)."""
        return len(self.moe_layers) * self.num_experts * self._expert_params()

    # ----- KV cache ------------------------------------------------------------------------
    def kv_elements_per_token_per_layer(self) -> int:
        """Elements one token adds to one attention layer's cache.

        GQA: 2 (K and V) x KV heads x head_dim. MLA: the compressed latent plus the decoupled
        RoPE key, kv_lora_rank + qk_rope_head_dim, shared by all heads.
        """
        if self.is_mla:
            assert self.kv_lora_rank is not None
            return self.kv_lora_rank + (self.qk_rope_head_dim or 0)
        return 2 * self.num_kv_heads * self.head_dim

    def kv_bytes_per_token(self, kv_bytes_per_element: float = 2.0) -> float:
        """KV bytes one token occupies over all attention layers (full and sliding).

        Linear-attention layers keep no per-token cache. Sliding-window layers do, but only
        for the last ``sliding_window`` tokens: see :meth:`kv_bytes_for_sequence`.
        """
        return (
            self.num_attention_layers
            * self.kv_elements_per_token_per_layer()
            * (kv_bytes_per_element)
        )

    def kv_bytes_for_sequence(self, tokens: int, kv_bytes_per_element: float = 2.0) -> float:
        """KV bytes a sequence of ``tokens`` holds, with sliding layers capped at the window."""
        per_layer = self.kv_elements_per_token_per_layer() * kv_bytes_per_element
        windowed = min(tokens, self.sliding_window) if self.sliding_window else tokens
        return (
            per_layer * (self.num_full_layers * tokens + self.num_sliding_layers * windowed)
            + self.linear_state_bytes_per_sequence()
        )

    def linear_state_bytes_per_sequence(self, state_bytes_per_element: float = 2.0) -> float:
        """Fixed recurrent state of the linear-attention layers for one sequence.

        Per layer: the convolution state, (2 x key_dim + value_dim) x (kernel - 1) elements,
        and the delta-rule state, value heads x key_head_dim x value_head_dim elements.
        """
        if not self.num_linear_layers:
            return 0.0
        key_dim = self.linear_num_key_heads * self.linear_key_head_dim
        value_dim = self.linear_num_value_heads * self.linear_value_head_dim
        conv = (2 * key_dim + value_dim) * max(self.linear_conv_kernel_dim - 1, 0)
        recurrent = (
            self.linear_num_value_heads * self.linear_key_head_dim * (self.linear_value_head_dim)
        )
        return self.num_linear_layers * (conv + recurrent) * state_bytes_per_element

    # ----- FLOPs ---------------------------------------------------------------------------
    def matmul_flops_per_token(self) -> float:
        """2 FLOPs per active weight: what one token costs in the linear layers."""
        return 2.0 * self.active_params

    def attention_flops_per_token(self, context: int) -> float:
        """Score and value FLOPs for one token attending over ``context`` earlier tokens."""
        if self.is_mla:
            qk = (self.qk_nope_head_dim or 0) + (self.qk_rope_head_dim or 0)
            v = self.v_head_dim or self.head_dim
        else:
            qk = v = self.head_dim
        per_layer_full = 2.0 * self.num_attention_heads * (qk + v) * context
        windowed = min(context, self.sliding_window) if self.sliding_window else context
        per_layer_sliding = 2.0 * self.num_attention_heads * (qk + v) * windowed
        return self.num_full_layers * per_layer_full + self.num_sliding_layers * (per_layer_sliding)


def _first(config: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        value = config.get(key)
        if value is not None:
            return value
    return default


def _layer_kinds(config: dict[str, Any], num_layers: int) -> tuple[LayerKind, ...]:
    full: LayerKind = "full"
    sliding: LayerKind = "sliding"
    linear: LayerKind = "linear"
    kinds_by_name: dict[str, LayerKind] = {
        "full_attention": "full",
        "attention": "full",
        "sliding_attention": "sliding",
        "linear_attention": "linear",
        "chunked_attention": "sliding",  # Llama 4's, windowed at its chunk (module docstring)
    }
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list) and len(layer_types) == num_layers:
        return tuple(kinds_by_name.get(str(t), "full") for t in layer_types)
    if _attention_chunk(config):
        rope = config.get("no_rope_layers")
        if isinstance(rope, list) and len(rope) == num_layers:
            return tuple(sliding if flag else full for flag in rope)
        step = int(config.get("no_rope_layer_interval") or 4)
        return tuple(full if (i + 1) % step == 0 else sliding for i in range(num_layers))
    interval = config.get("full_attention_interval")
    if interval:
        return tuple(full if (i + 1) % int(interval) == 0 else linear for i in range(num_layers))
    window = config.get("sliding_window")
    model_type = str(config.get("model_type", ""))
    if window and model_type.startswith("qwen"):
        if not config.get("use_sliding_window", False):
            return (full,) * num_layers
        max_window_layers = int(config.get("max_window_layers", num_layers))
        return tuple(sliding if i >= max_window_layers else full for i in range(num_layers))
    if window:
        return (sliding,) * num_layers
    return (full,) * num_layers


def _attention_chunk(config: dict[str, Any]) -> int | None:
    """Llama 4's ``attention_chunk_size``: the window of its chunked-attention layers."""
    chunk = config.get("attention_chunk_size")
    if chunk and str(config.get("model_type", "")).startswith("llama4"):
        return int(chunk)
    return None


def _moe_layers(config: dict[str, Any], num_layers: int, num_experts: int) -> tuple[int, ...]:
    if not num_experts:
        return ()
    first_dense = int(config.get("first_k_dense_replace") or 0)
    freq = int(
        _first(
            config,
            "moe_layer_freq",
            "decoder_sparse_step",
            "interleave_moe_layer_step",  # Llama 4
            default=1,
        )
        or 1
    )
    mlp_only = set(config.get("mlp_only_layers") or [])
    layers = []
    for i in range(num_layers):
        if i < first_dense or i in mlp_only:
            continue
        if "first_k_dense_replace" in config:
            if i % freq != 0:
                continue
        elif (i + 1) % freq != 0:
            continue
        layers.append(i)
    return tuple(layers)


def architecture_from_config(config: dict[str, Any]) -> ModelArchitecture:
    """Parse a Hugging Face ``config.json`` (already loaded as a dict).

    Raises ``ValueError`` naming the field when the config lacks what the planner needs or a
    size is beyond what any published model uses (:mod:`planner.catalog.limits`).
    """
    text_config = config.get("text_config")
    if isinstance(text_config, dict) and "num_hidden_layers" not in config:
        config = {**text_config, **{k: v for k, v in config.items() if k != "text_config"}}
    required = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
    for key in required:
        if not isinstance(config.get(key), int) or config[key] <= 0:
            raise ValueError(
                f"config.json field '{key}' is {config.get(key)!r}: a positive integer is required"
            )
    check_config_sizes(config)
    model_type = str(config.get("model_type", "unknown"))
    hidden = int(config["hidden_size"])
    layers = int(config["num_hidden_layers"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(_first(config, "num_key_value_heads", default=heads))
    head_dim = int(_first(config, "head_dim", default=hidden // heads))
    _check_heads(config, heads, kv_heads, hidden)
    num_experts = int(
        _first(config, "num_local_experts", "num_experts", "n_routed_experts", default=0) or 0
    )
    top_k = int(_first(config, "num_experts_per_tok", "experts_per_token", default=0) or 0)
    intermediate = int(config.get("intermediate_size") or 0)
    moe_width = int(_first(config, "moe_intermediate_size", default=intermediate) or 0)
    shared_width = int(config.get("shared_expert_intermediate_size") or 0)
    shared_gate = bool(shared_width)  # Qwen2-MoE / Qwen3-Next gate their shared expert
    n_shared = int(config.get("n_shared_experts") or 0)
    if n_shared and not shared_width:
        shared_width = n_shared * moe_width
        shared_gate = False
    if model_type.startswith("llama4"):
        # intermediate_size is the experts' (and the shared expert's) width, the dense
        # layers' FFN is intermediate_size_mlp (see the module docstring)
        shared_width = moe_width if num_experts else 0
        intermediate = int(config.get("intermediate_size_mlp") or intermediate)
    is_gpt_oss = model_type == "gpt_oss"
    qwen2_bias = model_type in ("qwen2", "qwen2_moe")
    attention_bias = bool(config.get("attention_bias", False)) or qwen2_bias
    window = config.get("sliding_window") or _attention_chunk(config)
    kinds = _layer_kinds(config, layers)
    quant_groups = _quant_groups(config)
    return ModelArchitecture(
        model_type=model_type,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=intermediate,
        vocab_size=int(config["vocab_size"]),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        attention_bias=attention_bias,
        attention_output_gate=model_type == "qwen3_next" or bool(config.get("attn_output_gate")),
        qk_norm_params=_qk_norm_params(config, model_type, heads, kv_heads, head_dim),
        qk_norm_across_heads=_qk_norm_across_heads(config, model_type),
        max_position_embeddings=config.get("max_position_embeddings"),
        torch_dtype=str(_first(config, "torch_dtype", "dtype", default="bfloat16")),
        q_lora_rank=config.get("q_lora_rank"),
        kv_lora_rank=config.get("kv_lora_rank"),
        qk_rope_head_dim=config.get("qk_rope_head_dim"),
        qk_nope_head_dim=config.get("qk_nope_head_dim"),
        v_head_dim=config.get("v_head_dim"),
        num_experts=num_experts,
        experts_per_token=top_k,
        moe_intermediate_size=moe_width if num_experts else 0,
        shared_expert_intermediate_size=shared_width if num_experts else 0,
        shared_expert_gate=shared_gate,
        expert_bias=is_gpt_oss,
        moe_layers=_moe_layers(config, layers, num_experts),
        layer_kinds=kinds,
        sliding_window=int(window) if window and "sliding" in kinds else None,
        linear_num_key_heads=int(config.get("linear_num_key_heads") or 0),
        linear_num_value_heads=int(config.get("linear_num_value_heads") or 0),
        linear_key_head_dim=int(config.get("linear_key_head_dim") or 0),
        linear_value_head_dim=int(config.get("linear_value_head_dim") or 0),
        linear_conv_kernel_dim=int(config.get("linear_conv_kernel_dim") or 0),
        index_n_heads=int(config.get("index_n_heads") or 0),
        index_head_dim=int(config.get("index_head_dim") or 0),
        index_topk=int(config.get("index_topk") or 0),
        quant_method=_quant_method(config),
        experts_only_quantized=_experts_only_quantized(config),
        block_scaled_fp8=_block_scaled_fp8(config),
        quant_group_size=quant_groups[0],
        quant_zero_point=quant_groups[1],
        num_mtp_layers=int(
            _first(config, "num_nextn_predict_layers", "mtp_num_hidden_layers", default=0) or 0
        ),
    )


def _qk_norm_params(
    config: dict[str, Any], model_type: str, heads: int, kv_heads: int, head_dim: int
) -> int:
    """Weights of one attention layer's query and key norms (see ``qk_norm_params``)."""
    if model_type.startswith("qwen3"):
        return 2 * head_dim  # Qwen3/3-Next/3.5: one RMSNorm of head_dim for q, one for k
    if model_type == "minimax_m2" and config.get("use_qk_norm"):
        if _qk_norm_across_heads(config, model_type):
            return (heads + kv_heads) * head_dim
        return 2 * head_dim
    return 0


def _qk_norm_across_heads(config: dict[str, Any], model_type: str) -> bool:
    """Whether the query/key norms span every head (MiniMax-M2's ``qk_norm_type``
    ``per_layer``, its default) rather than one head each (see ``qk_norm_across_heads``)."""
    return (
        model_type == "minimax_m2"
        and bool(config.get("use_qk_norm"))
        and config.get("qk_norm_type", "per_layer") == "per_layer"
    )


def _check_heads(config: dict[str, Any], heads: int, kv_heads: int, hidden: int) -> None:
    """Head counts a transformer can have: each KV head serves a whole group of query heads
    (``num_attention_heads`` a multiple of ``num_key_value_heads``, as grouped-query attention
    and vLLM's tensor-parallel split require), and without a stated ``head_dim`` the hidden
    size splits evenly into the heads. MLA models (``kv_lora_rank``) share one latent and are
    exempt from the grouping."""
    if kv_heads <= 0:
        raise ValueError(
            f"config.json field 'num_key_value_heads' is {kv_heads!r}: a positive integer is "
            "required"
        )
    if config.get("kv_lora_rank") is None and heads % kv_heads:
        raise ValueError(
            f"config.json field 'num_key_value_heads' is {kv_heads}: it must divide "
            f"num_attention_heads ({heads}), each KV head serving a whole group of query heads"
        )
    if "head_dim" not in config and hidden % heads:
        raise ValueError(
            f"config.json field 'num_attention_heads' is {heads}: it must divide hidden_size "
            f"({hidden}) when no head_dim is given"
        )


def _quant_method(config: dict[str, Any]) -> str | None:
    quant = config.get("quantization_config")
    if isinstance(quant, dict) and quant.get("quant_method"):
        return str(quant["quant_method"]).lower()
    return None


def _block_scaled_fp8(config: dict[str, Any]) -> bool:
    """True for an FP8 checkpoint with per-block weight scales (``weight_block_size``)."""
    quant = config.get("quantization_config")
    if not isinstance(quant, dict) or str(quant.get("quant_method", "")).lower() != "fp8":
        return False
    return bool(quant.get("weight_block_size"))


def _quant_groups(config: dict[str, Any]) -> tuple[int, bool]:
    """(group size, zero points stored) of an integer-quantised checkpoint; (0, True) when
    ``quantization_config`` states no group size."""
    quant = config.get("quantization_config")
    if not isinstance(quant, dict):
        return 0, True
    groups = quant.get("config_groups")
    if isinstance(groups, dict):  # compressed-tensors: the first group's weights scheme
        for group in groups.values():
            weights = group.get("weights") if isinstance(group, dict) else None
            if isinstance(weights, dict) and weights.get("group_size"):
                return int(weights["group_size"]), not bool(weights.get("symmetric", False))
    size = quant.get("group_size") or quant.get("q_group_size")
    if not isinstance(size, int) or size <= 0:
        return 0, True
    if "sym" in quant:  # GPTQ
        return size, not bool(quant["sym"])
    return size, bool(quant.get("zero_point", True))


def _experts_only_quantized(config: dict[str, Any]) -> bool:
    """True when the checkpoint's quantization leaves the attention blocks unconverted
    (``quantization_config.modules_to_not_convert`` names ``self_attn``: gpt-oss's MXFP4;
    compressed-tensors calls the list ``ignore``: Kimi-K2.5's INT4 experts, which skip
    ``re:.*self_attn.*``, the shared experts and the dense MLPs)."""
    quant = config.get("quantization_config")
    if not isinstance(quant, dict):
        return False
    skipped = quant.get("modules_to_not_convert") or quant.get("ignore") or []
    return any("self_attn" in str(m) for m in skipped) and "*" in "".join(map(str, skipped))


@lru_cache(maxsize=256)
def _layers_params(arch: ModelArchitecture, *, active_only: bool) -> int:
    """All layers' parameters (the routed experts a token uses with ``active_only``): a sum
    over every layer that a search asks for hundreds of times, so memoised by the (frozen,
    hashable) architecture's value."""
    return sum(arch.layer_params(i, active_only=active_only) for i in range(arch.num_layers))


@lru_cache(maxsize=256)
def _layer_kind_counts(kinds: tuple[str, ...]) -> dict[str, int]:
    """Layers of each kind (``full``, ``sliding``, ``linear``), counted once per model."""
    counts: dict[str, int] = {}
    for kind in kinds:
        counts[kind] = counts.get(kind, 0) + 1
    return counts
