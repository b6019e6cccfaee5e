"""The Plan page's ranking table: which columns of ``planner.recommend.ranking_rows`` it shows
and how each reads."""

from __future__ import annotations

import pandas as pd
import streamlit as st

#: the columns of the ranking shown, in order (the CSV export keeps them all)
SHOWN_COLUMNS = [
    "rank",
    "label",
    "provider",
    "region",
    "gpu",
    "replicas",
    "instances_total",
    "usd_per_million_output_tokens",
    "usd_per_million_total_tokens",
    "usd_per_hour",
    "monthly_usd",
    "kwh_per_million_output_tokens",
    "joules_per_output_token",
    "pred_ttft_ms_p99",
    "pred_tpot_ms_p99",
    "slo_straddle",
    "kv_cache_dtype",
    "memory_fraction",
    "memory_note",
    "spec_method",
    "pred_spec_accept_len",
    "spec_reason",
    "kv_occupancy_peak",
    "confidence",
    "far_from_data",
    "price_as_of",
    "launch_command",
]


def ranking_table(ranked: pd.DataFrame) -> None:
    """The ranked configurations (``ranking_rows`` with a ``label`` column) as a table."""
    st.dataframe(
        ranked[SHOWN_COLUMNS],
        hide_index=True,
        key="table_ranking",
        column_config={
            "label": st.column_config.TextColumn("configuration", width="medium"),
            "usd_per_million_output_tokens": st.column_config.NumberColumn(
                "$/M output", format="$%.2f"
            ),
            "usd_per_million_total_tokens": st.column_config.NumberColumn(
                "$/M total", format="$%.3f"
            ),
            "usd_per_hour": st.column_config.NumberColumn("$/hour", format="$%.2f"),
            "monthly_usd": st.column_config.NumberColumn("$/month", format="$%.0f"),
            "kwh_per_million_output_tokens": st.column_config.NumberColumn(
                "kWh/M output", format="%.2f", help="Energy at the plan's utilisation (Cost page)."
            ),
            "joules_per_output_token": st.column_config.NumberColumn("J/token", format="%.1f"),
            "pred_ttft_ms_p99": st.column_config.NumberColumn("p99 TTFT ms (pred.)", format="%.0f"),
            "pred_tpot_ms_p99": st.column_config.NumberColumn("p99 TPOT ms (pred.)", format="%.1f"),
            "slo_straddle": st.column_config.TextColumn("SLO at risk (80% interval)"),
            "price_as_of": st.column_config.TextColumn("price as of"),
            "memory_fraction": st.column_config.NumberColumn(
                "memory share",
                format="%.3f",
                help="The engine's memory share the plan starts and is predicted with: vLLM's "
                "--gpu-memory-utilization, SGLang's --mem-fraction-static, TensorRT-LLM's "
                "kv_cache_free_gpu_memory_fraction.",
            ),
            "memory_note": st.column_config.TextColumn("raised memory share", width="medium"),
            "spec_method": st.column_config.TextColumn("speculation"),
            "pred_spec_accept_len": st.column_config.NumberColumn(
                "accepted tokens/step (pred.)", format="%.2f"
            ),
            "spec_reason": st.column_config.TextColumn("why this speculation", width="medium"),
            "kv_occupancy_peak": st.column_config.ProgressColumn(
                "peak KV (pred.)", format="percent", min_value=0.0, max_value=1.0
            ),
            "launch_command": st.column_config.TextColumn(
                "launch command",
                width="large",
                help="The plan's own engine's command (vllm serve, SGLang's launch_server or "
                "trtllm-serve); the CSV also has its vLLM equivalent (vllm_command).",
            ),
        },
    )
