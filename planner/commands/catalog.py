"""``python -m planner catalog gpus|instances|prices|models|measured [--json]``."""

from __future__ import annotations

import argparse
import json
from typing import Any

from planner.catalog import load_catalog
from planner.settings import get_settings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("catalog", help="print the catalog (GPUs, instances, models)")
    parser.add_argument("table", choices=["gpus", "instances", "prices", "models", "measured"])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(func=run)


def catalog_rows(table: str) -> list[dict[str, Any]]:
    catalog = load_catalog(user_dir=get_settings().user_data_dir / "catalog")
    if table == "gpus":
        return [g.model_dump(mode="json") for g in catalog.gpus.values()]
    if table == "instances":
        return [i.model_dump(mode="json") for i in catalog.instances.values()]
    if table == "prices":
        return [p.model_dump(mode="json") for p in catalog.prices]
    if table == "measured":
        return [m.model_dump(mode="json") for m in catalog.measured]
    rows = []
    for card in catalog.models.values():
        arch = card.architecture
        rows.append(
            {
                "hf_id": card.hf_id,
                "name": card.name,
                "model_type": arch.model_type,
                "layers": arch.num_layers,
                "attention_heads": arch.num_attention_heads,
                "kv_heads": arch.num_kv_heads,
                "head_dim": arch.head_dim,
                "attention": "mla" if arch.is_mla else "gqa",
                "experts": arch.num_experts,
                "experts_per_token": arch.experts_per_token,
                "sliding_window": arch.sliding_window,
                "linear_attention_layers": arch.num_linear_layers,
                "total_params": arch.total_params,
                "active_params": arch.active_params,
                "kv_bytes_per_token_bf16": arch.kv_bytes_per_token(2.0),
                "published_total_params_b": card.published_total_params_b,
                "published_active_params_b": card.published_active_params_b,
                "source": card.source,
                "as_of": card.as_of.isoformat(),
                "origin": card.origin,
            }
        )
    return rows


def run(args: argparse.Namespace) -> int:
    rows = catalog_rows(args.table)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("(empty)")
        return 0
    columns = [c for c in rows[0] if c not in ("source", "notes", "config")]
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for row in rows:
        print("  ".join(str(row.get(c, "")).ljust(widths[c]) for c in columns))
    return 0
