"""How large a model's ``config.json`` may be: each size field bounded by published models.

A config.json is user input (the sidebar and the Data page take uploads, ``fit --model`` takes a
path). Parameter counts, memory and the performance model loop over layers and experts, so a
config with 10^7 layers would take minutes and gigabytes before anything could say it does not
fit anywhere. Each limit below is the largest value a published model uses, times a margin of
about 8 (rounded up), so any real model, and any plausible next one, passes, while a typo or a
hostile file is refused at once with the field, the value, the limit and why.

The published figures are read from the config.json files of the embedded catalog
(``data/models/``, each with its source; retrieved 2026-11-29) unless a model is named with its
own source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from planner.input_checks import MAX_REQUEST_TOKENS


@dataclass(frozen=True)
class SizeLimit:
    """``field`` may be at most ``limit``; ``published`` is the largest value in use, ``model``
    the model that uses it."""

    field: str
    limit: int
    published: int
    model: str
    minimum: int = 1

    def why(self) -> str:
        return (
            f"at most {self.limit:,} (the largest published value is {self.published:,}, "
            f"{self.model}; the limit leaves a margin of {self.limit // self.published}x)"
        )


_LLAMA_405B = "meta-llama/Llama-3.1-405B-Instruct"
_DEEPSEEK_V3 = "deepseek-ai/DeepSeek-V3"
_QWEN3_NEXT = "Qwen/Qwen3-Next-80B-A3B-Instruct"

#: Size fields of a config.json and their limits. Aliases of one quantity (the number of routed
#: experts is ``num_local_experts``, ``num_experts`` or ``n_routed_experts``) share a limit.
SIZE_LIMITS: tuple[SizeLimit, ...] = (
    SizeLimit("num_hidden_layers", 1_024, 126, _LLAMA_405B),
    SizeLimit("hidden_size", 131_072, 16_384, _LLAMA_405B),
    SizeLimit("num_attention_heads", 1_024, 128, _LLAMA_405B),
    SizeLimit("num_key_value_heads", 1_024, 128, _DEEPSEEK_V3),
    SizeLimit("head_dim", 2_048, 256, _QWEN3_NEXT),
    SizeLimit("intermediate_size", 524_288, 53_248, _LLAMA_405B),
    SizeLimit("moe_intermediate_size", 524_288, 2_048, _DEEPSEEK_V3),
    SizeLimit("shared_expert_intermediate_size", 524_288, 512, _QWEN3_NEXT),
    SizeLimit("vocab_size", 2_097_152, 201_088, "openai/gpt-oss-120b"),
    SizeLimit("num_local_experts", 4_096, 512, _QWEN3_NEXT),
    SizeLimit("num_experts", 4_096, 512, _QWEN3_NEXT),
    SizeLimit("n_routed_experts", 4_096, 512, _QWEN3_NEXT),
    SizeLimit("num_experts_per_tok", 128, 10, _QWEN3_NEXT),
    SizeLimit("experts_per_token", 128, 4, "openai/gpt-oss-120b"),
    SizeLimit("n_shared_experts", 64, 1, _DEEPSEEK_V3, minimum=0),
    SizeLimit("kv_lora_rank", 8_192, 512, _DEEPSEEK_V3),
    SizeLimit("q_lora_rank", 16_384, 1_536, _DEEPSEEK_V3),
    SizeLimit("qk_rope_head_dim", 2_048, 64, _DEEPSEEK_V3),
    SizeLimit("qk_nope_head_dim", 2_048, 128, _DEEPSEEK_V3),
    SizeLimit("v_head_dim", 2_048, 128, _DEEPSEEK_V3),
    SizeLimit("linear_num_key_heads", 1_024, 16, _QWEN3_NEXT, minimum=0),
    SizeLimit("linear_num_value_heads", 1_024, 32, _QWEN3_NEXT, minimum=0),
    SizeLimit("linear_key_head_dim", 2_048, 128, _QWEN3_NEXT, minimum=0),
    SizeLimit("linear_value_head_dim", 2_048, 128, _QWEN3_NEXT, minimum=0),
    SizeLimit("linear_conv_kernel_dim", 64, 4, _QWEN3_NEXT, minimum=0),
    # Llama 4 Scout: max_position_embeddings 10,485,760 in its config.json (text_config), as
    # quoted by the test configs of several public inference projects (retrieved 2026-12-01).
    SizeLimit(
        "max_position_embeddings",
        MAX_REQUEST_TOKENS,
        10_485_760,
        "meta-llama/Llama-4-Scout-17B-16E",
    ),
    SizeLimit("sliding_window", MAX_REQUEST_TOKENS, 131_072, "Qwen/Qwen2.5-72B-Instruct"),
    SizeLimit(
        "attention_chunk_size",
        MAX_REQUEST_TOKENS,
        8_192,
        "meta-llama/Llama-4-Scout-17B-16E-Instruct",
    ),
)

#: Fields that count layers: at least 0 or 1 and at most the model's own layer count.
LAYER_COUNT_FIELDS = {
    "full_attention_interval": 1,
    "first_k_dense_replace": 0,
    "moe_layer_freq": 1,
    "decoder_sparse_step": 1,
    "interleave_moe_layer_step": 1,
    "no_rope_layer_interval": 1,
}


def _integer(field: str, value: Any) -> int | None:
    """``value`` as an int, None when absent; ValueError naming the field when not a whole
    number (JSON has no int type of its own: 4096.0 is accepted, 4096.5 and "4096" are not)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(
            f"config.json field '{field}' is {value!r}: a whole number is required, "
            f"not {type(value).__name__}"
        )
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise ValueError(f"config.json field '{field}' is {value!r}: a whole number is required")
    return int(value)


def check_config_sizes(config: dict[str, Any]) -> None:
    """Raise ``ValueError`` naming the field, the value and the limit (with its reason) for
    the first size field of ``config`` (a config.json, ``text_config`` already merged) that
    is not a whole number within :data:`SIZE_LIMITS`."""
    for rule in SIZE_LIMITS:
        value = _integer(rule.field, config.get(rule.field))
        if value is None:
            continue
        if value < rule.minimum:
            raise ValueError(
                f"config.json field '{rule.field}' is {value}: at least {rule.minimum} is required"
            )
        if value > rule.limit:
            raise ValueError(f"config.json field '{rule.field}' is {value:,}: {rule.why()}")
    layers = _integer("num_hidden_layers", config.get("num_hidden_layers"))
    for field, minimum in LAYER_COUNT_FIELDS.items():
        value = _integer(field, config.get(field))
        if value is None:
            continue
        if value < minimum or (layers is not None and value > max(layers, minimum)):
            top = f"num_hidden_layers ({layers})" if layers is not None else "the layer count"
            raise ValueError(
                f"config.json field '{field}' is {value}: a layer count from {minimum} to {top}"
            )
    heads = _integer("num_attention_heads", config.get("num_attention_heads"))
    kv_heads = _integer("num_key_value_heads", config.get("num_key_value_heads"))
    if heads and kv_heads and kv_heads > heads:
        raise ValueError(
            f"config.json field 'num_key_value_heads' is {kv_heads}: at most "
            f"num_attention_heads ({heads}); query heads share KV heads, never the reverse"
        )
    experts = max(
        (
            _integer(f, config.get(f)) or 0
            for f in ("num_local_experts", "num_experts", "n_routed_experts")
        ),
        default=0,
    )
    top_k = _integer("num_experts_per_tok", config.get("num_experts_per_tok"))
    if experts and top_k is not None and top_k > experts:
        raise ValueError(
            f"config.json field 'num_experts_per_tok' is {top_k}: at most the number of "
            f"experts ({experts})"
        )
    for field in ("mlp_only_layers", "layer_types"):
        items = config.get(field)
        if items is not None and not isinstance(items, list):
            raise ValueError(f"config.json field '{field}' is {items!r}: a list is required")
        if field == "mlp_only_layers" and isinstance(items, list):
            for item in items:
                _integer(f"{field}[]", item)
        if isinstance(items, list) and len(items) > 1_024:
            raise ValueError(
                f"config.json field '{field}' has {len(items):,} entries: at most one per "
                "layer (num_hidden_layers is at most 1,024)"
            )
