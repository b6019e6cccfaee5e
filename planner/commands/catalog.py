"""``python -m planner catalog gpus|instances|prices|history|models|measured [--json]``,
``python -m planner catalog refresh --skypilot-catalog DIR|FILE [...] | --undo | --list`` and
``python -m planner catalog check``."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from planner.catalog import Catalog, load_catalog
from planner.catalog.loader import PRICES_FILE, read_records
from planner.catalog.refresh import (
    DEFAULT_THRESHOLD_PCT,
    RefreshPlan,
    apply_refresh,
    list_refreshes,
    plan_refresh,
    undo_refresh,
)
from planner.catalog.schema import Price
from planner.catalog.skypilot import find_vms_files, read_skypilot_vms
from planner.commands.args import number
from planner.input_checks import known_names
from planner.settings import get_settings

#: A price that moved 100-fold is a move; a threshold above it would report none (nor would
#: infinity, and NaN compares false with every move and so hides them all).
MAX_THRESHOLD_PCT = 10_000.0

TABLES = ("gpus", "instances", "prices", "history", "models", "measured", "owned")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "catalog", help="print the catalog (GPUs, instances, prices, models); refresh prices"
    )
    tables = parser.add_subparsers(dest="table", required=True, metavar="TABLE|refresh")
    for table in TABLES:
        sub = tables.add_parser(table, help=f"print the {table}")
        sub.add_argument("--json", action="store_true", help="print JSON instead of a table")
        sub.set_defaults(func=run)
    refresh = tables.add_parser(
        "refresh",
        help="refresh prices from SkyPilot catalog files into your catalog (undoable)",
        description="Read SkyPilot vms.csv files (a checkout of skypilot-org/skypilot-catalog, "
        "e.g. catalogs/v8, one cloud's folder, or one file) into your catalog directory, dated "
        "with the file's date; report new, moved and vanished prices. data/ is never changed.",
    )
    action = refresh.add_mutually_exclusive_group(required=True)
    action.add_argument("--skypilot-catalog", type=Path, metavar="DIR|FILE")
    action.add_argument(
        "--undo",
        nargs="?",
        const="",
        metavar="ID",
        help="undo the newest refresh (or name it)",
    )
    action.add_argument("--list", action="store_true", help="list refreshes that can be undone")
    refresh.add_argument(
        "--provider",
        action="append",
        default=[],
        help="only this cloud (repeatable); names the cloud of a single file",
    )
    refresh.add_argument("--region", action="append", default=[], help="only this region")
    refresh.add_argument(
        "--as-of",
        type=date.fromisoformat,
        help="date of the snapshot (default: the file's modification date)",
    )
    refresh.add_argument(
        "--threshold-pct",
        type=number(low=0.0, high=MAX_THRESHOLD_PCT),
        default=DEFAULT_THRESHOLD_PCT,
        help=f"report prices that moved by more than this (default {DEFAULT_THRESHOLD_PCT:g}%%)",
    )
    refresh.add_argument("--dry-run", action="store_true", help="report only, write nothing")
    refresh.set_defaults(func=run_refresh)
    check = tables.add_parser(
        "check",
        help="check your catalog files: what is refused or left out, and why",
        description="Load the embedded catalog and your catalog directory as the planner does "
        "and list what loading your files left out or noticed (a measured row out of bounds, "
        "a price given twice), each with its file, row, field and value. Exit 1 when a row was "
        "left out, 2 when your files cannot be used at all, else 0.",
    )
    check.set_defaults(func=run_check)


def _user_catalog_dir() -> Path:
    return get_settings().user_data_dir / "catalog"


def file_date(path: Path) -> date:
    """The modification date (UTC) of a catalog file: the snapshot date of a SkyPilot file."""
    return datetime.fromtimestamp(path.stat().st_mtime, tz=UTC).date()


def refresh_report(plan: RefreshPlan, *, limit: int = 20) -> str:
    """The plan in words: what is new, what moved and by how much, what vanished."""
    lines = [f"Snapshot of {plan.as_of.isoformat()} ({', '.join(plan.providers)}): "]
    lines[0] += plan.summary() + "."

    def section(title: str, rows: list[str]) -> None:
        if not rows:
            return
        lines.append(f"{title}:")
        lines.extend(f"  {r}" for r in rows[:limit])
        if len(rows) > limit:
            lines.append(f"  ... and {len(rows) - limit} more")

    section(
        "New instance types",
        [f"{i.provider}/{i.instance}: {i.gpus} x {i.gpu_id}" for i in plan.new_instances],
    )
    section(
        "New prices",
        [f"{c.instance} {c.region} {c.pricing}: ${c.new_usd:,.4f}/h" for c in plan.new_prices],
    )
    section(
        f"Moved by more than {plan.threshold_pct:g}%",
        [
            f"{c.instance} {c.region} {c.pricing}: ${c.old_usd:,.4f} (as of {c.old_as_of}) -> "
            f"${c.new_usd:,.4f} ({c.change_pct:+.1f}%)"
            for c in sorted(plan.moved, key=lambda c: -abs(c.change_pct or 0))
        ],
    )
    section(
        "No longer listed (kept with their old date)",
        [f"{p.instance} {p.region} {p.pricing} (as of {p.as_of})" for p in plan.removed],
    )
    section(
        "Your own prices, kept",
        [
            f"{p.instance} {p.region} {p.pricing}: ${p.usd_per_hour:,.4f}"
            for p in plan.kept_user_prices
        ],
    )
    section(
        "Older than the catalog's (not used)",
        [
            f"{c.instance} {c.region} {c.pricing} (catalog: {c.old_as_of})"
            for c in plan.older_than_catalog
        ],
    )
    section(
        "Skipped",
        [
            f"{reason}: {', '.join(names[:6])}{' ...' if len(names) > 6 else ''}"
            for reason, names in plan.skipped.items()
        ],
    )
    return "\n".join(lines)


def run_refresh(args: argparse.Namespace) -> int:
    user_dir = _user_catalog_dir()
    if args.list:
        records = list_refreshes(user_dir)
        if not records:
            print("No refresh to undo.")
        for record in records:
            print(f"{record.refresh_id}  snapshot {record.as_of}  {record.summary}")
        return 0
    if args.undo is not None:
        record = undo_refresh(user_dir, args.undo or None)
        print(f"Undid refresh {record.refresh_id} (snapshot {record.as_of}); prices are back.")
        return 0
    catalog = load_catalog(user_dir=user_dir)
    found = find_vms_files(args.skypilot_catalog, args.provider)
    files = [read_skypilot_vms(path, provider, catalog) for path, provider in found]
    as_of = args.as_of or max(file_date(path) for path, _ in found)
    # a region of neither the files nor the catalog's prices of these clouds would refresh
    # nothing, silently
    clouds = {f.provider for f in files}
    regions_known = {o.region for f in files for o in f.offers} | {
        p.region for p in catalog.prices if p.provider in clouds
    }
    known_names("--region", args.region, regions_known)
    own = read_records(user_dir / PRICES_FILE, Price) if (user_dir / PRICES_FILE).exists() else []
    plan = plan_refresh(
        catalog,
        files,
        as_of,
        user_prices=own,
        threshold_pct=args.threshold_pct,
        regions=args.region,
    )
    print(refresh_report(plan))
    if args.dry_run:
        print("Dry run: nothing written.")
        return 0
    if not plan.writes and not plan.new_instances:
        print("Nothing to write.")
        return 0
    record = apply_refresh(user_dir, plan, catalog)
    print(
        f"Written to {user_dir} as refresh {record.refresh_id}; old prices are in "
        "price_history.csv. Undo: python -m planner catalog refresh --undo"
    )
    return 0


def catalog_rows(
    table: str,
    *,
    today: date | None = None,
    stale_days: int | None = None,
    catalog: Catalog | None = None,
) -> list[dict[str, Any]]:
    """The rows of one catalog table of ``catalog`` (default: loaded with the user's files);
    prices carry their age in days and a ``stale`` flag (older than ``stale_days``, default
    the ``SERVEWISE_PRICE_STALE_DAYS`` setting, 90)."""
    if catalog is None:
        catalog = load_catalog(user_dir=_user_catalog_dir())
    if table == "history":
        return [p.model_dump(mode="json") for p in catalog.price_history]
    if table == "prices":
        today = today or datetime.now(UTC).date()
        limit = stale_days or get_settings().price_stale_days
        return [
            {
                **p.model_dump(mode="json"),
                "age_days": p.age_days(today),
                "stale": p.is_stale(today, limit),
            }
            for p in catalog.prices
        ]
    if table == "gpus":
        return [g.model_dump(mode="json") for g in catalog.gpus.values()]
    if table == "instances":
        return [i.model_dump(mode="json") for i in catalog.instances.values()]
    if table == "measured":
        return [m.model_dump(mode="json") for m in catalog.measured]
    if table == "owned":
        from planner.owned import hourly_cost

        return [
            {
                **s.model_dump(mode="json"),
                "usd_per_hour": hourly_cost(s).usd_per_hour if s.server_usd else None,
            }
            for s in catalog.owned.values()
        ]
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


def run_check(args: argparse.Namespace) -> int:
    """``catalog check``: a catalog that cannot load raises (one line, exit 2); else each note
    of :attr:`~planner.catalog.Catalog.load_notes`, and exit 1 when a row was left out."""
    del args
    user_dir = _user_catalog_dir()
    catalog = load_catalog(user_dir=user_dir)
    counts = (
        f"{len(catalog.gpus)} GPUs, {len(catalog.instances)} instances, "
        f"{len(catalog.prices)} prices, {len(catalog.models)} models, "
        f"{len(catalog.measured)} measured results"
    )
    for note in catalog.load_notes:
        print(f"{user_dir / note.file}: {note}")
    left_out = sum("left out" in note.problem for note in catalog.load_notes)
    print(
        f"catalog loads ({counts}); {left_out} rows of your files left out, "
        f"{len(catalog.load_notes) - left_out} other notes"
    )
    return 1 if left_out else 0
