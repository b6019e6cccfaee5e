"""KV cache page: memory per GPU, sequences against context, occupancy and preemption risk."""

from __future__ import annotations

from collections.abc import Callable

from streamlit.testing.v1 import AppTest

from tests.pages.conftest import frame_with, no_exception

PAGE = "pages/kv_cache.py"


def _memory(at: AppTest):
    return frame_with(at, "layout", "weights_gib", "kv_gib", "kv_capacity_tokens")


def test_default_shows_the_smallest_layout_on_each_gpu(app: Callable[..., AppTest]) -> None:
    at = app(PAGE)
    memory = _memory(at)
    assert len(memory) >= 3
    assert memory["gpu"].is_unique
    # Each GPU's bar adds up to its memory (weights + KV + activations + overhead + free).
    parts = memory[["weights_gib", "kv_gib", "activation_gib", "overhead_gib", "free_gib"]]
    assert ((parts.sum(axis=1) - memory["total_gib"]).abs() < 0.05 * memory["total_gib"]).all()


def test_an_fp8_kv_cache_holds_about_twice_the_tokens(app: Callable[..., AppTest]) -> None:
    at = app(PAGE)
    before = _memory(at).set_index("instance")["kv_capacity_tokens"]
    at.segmented_control(key="kv_dtype").set_value("fp8").run()
    no_exception(at)
    after = _memory(at).set_index("instance")["kv_capacity_tokens"]
    common = before.index.intersection(after.index)
    assert len(common) > 0
    ratio = after[common] / before[common]
    assert ((ratio > 1.8) & (ratio < 2.2)).all(), ratio


def test_more_requests_in_flight_fill_the_cache(app: Callable[..., AppTest]) -> None:
    at = app(PAGE)
    at.number_input(key="kv_concurrency").set_value(2).run()
    low = _memory(at).set_index("layout")["expected_pct"]
    at.number_input(key="kv_concurrency").set_value(64).run()
    no_exception(at)
    high = _memory(at).set_index("layout")["expected_pct"]
    assert (high > low).all()


TINY_CONFIG = b"""{"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16,
"num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 8192,
"vocab_size": 128256, "max_position_embeddings": 131072,
"_servewise": {"hf_id": "acme/tiny-llama"}}"""


def test_an_uploaded_config_json_becomes_the_scenario_model(app: Callable[..., AppTest]) -> None:
    at = app(PAGE)
    at.file_uploader(key="model_upload").upload("config.json", TINY_CONFIG, "application/json")
    at.run()
    no_exception(at)
    assert at.selectbox(key="model").value == "acme/tiny-llama"
    memory = _memory(at)
    assert len(memory) >= 3
    assert (memory["weights_gib"] < 5).all()  # ~1.2 B parameters in bf16


def test_an_empty_trace_says_so_and_the_distributions_stay(app: Callable[..., AppTest]) -> None:
    at = app(PAGE)
    at.segmented_control(key="source").set_value("trace").run()
    at.file_uploader(key="trace_upload").upload("empty.csv", b"", "text/csv")
    at.run()
    no_exception(at)
    assert any("trace cannot be used" in e.value and "empty" in e.value for e in at.warning)
    assert not at.error
    assert len(_memory(at)) >= 3


def test_a_trace_drives_the_occupancy(app: Callable[..., AppTest]) -> None:
    rows = "\n".join(f"{i * 0.5},{8000 + 10 * i},{2000}" for i in range(50))
    trace = f"timestamp,input_tokens,output_tokens\n{rows}\n".encode()
    at = app(PAGE)
    before = _memory(at).set_index("layout")["p99_pct"]
    at.segmented_control(key="source").set_value("trace").run()
    at.file_uploader(key="trace_upload").upload("mine.csv", trace, "text/csv")
    at.run()
    no_exception(at)
    after = _memory(at).set_index("layout")["p99_pct"]
    common = before.index.intersection(after.index)
    assert (after[common] >= before[common]).all() and (after[common] > before[common]).any()
