"""Write a user's additions to their catalog directory (``<user_data_dir>/catalog``).

No streamlit here: the Data page calls these. Uploads are validated with the catalog's own
reader (``planner.catalog.loader``), first alone (columns, types: the error names the file, row
and field), then together with the rest of the catalog (a price must name a known instance),
in a staging copy; only a catalog that loads is written.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from planner.catalog import GPU, Catalog, Instance, ModelCard, Price, load_catalog
from planner.catalog.loader import (
    GPUS_FILE,
    INSTANCES_FILE,
    MODELS_DIR,
    OWNED_FILE,
    PRICES_FILE,
    model_card_from_config,
    read_records,
)
from planner.catalog.schema import OwnedServer, printable_name
from planner.errors import CatalogError, InvalidInputError


@dataclass(frozen=True)
class TableSpec:
    file: str
    record: type[BaseModel]
    key: Callable[[Any], tuple[str, ...]]
    rows: Callable[[Catalog], list[Any]]  # the table's rows in a loaded catalog
    noun: str


TABLES: dict[str, TableSpec] = {
    "gpus": TableSpec(
        GPUS_FILE, GPU, lambda r: (r.gpu_id,), lambda c: list(c.gpus.values()), "GPU"
    ),
    "instances": TableSpec(
        INSTANCES_FILE,
        Instance,
        lambda r: (r.instance,),
        lambda c: list(c.instances.values()),
        "instance",
    ),
    "prices": TableSpec(
        PRICES_FILE,
        Price,
        lambda r: (r.instance, r.region, r.pricing),
        lambda c: list(c.prices),
        "price",
    ),
    "owned": TableSpec(
        OWNED_FILE,
        OwnedServer,
        lambda r: (r.platform,),
        lambda c: list(c.owned.values()),
        "owned server",
    ),
}


@dataclass
class StagedTable:
    """An upload checked against the catalog, ready to be written."""

    table: str
    rows: list[BaseModel]  # the user's file after the merge
    added: int  # rows the catalog did not have
    replaced: int  # rows replacing a row with the same key (embedded or the user's)
    catalog: Catalog  # the catalog as it will load after saving


def _columns(record: type[BaseModel]) -> list[str]:
    """The record's columns as the data files order them: the facts, then where they came
    from (source, as_of, notes)."""
    provenance = ["source", "as_of", "notes"]
    # "origin" is the loader's mark (embedded or the user's), never a column of a file
    fields = [f for f in record.model_fields if f != "origin"]
    return [f for f in fields if f not in provenance] + [f for f in provenance if f in fields]


def template_csv(table: str) -> str:
    """The header of ``table``'s file: what an upload must look like."""
    return ",".join(_columns(TABLES[table].record)) + "\n"


def _write_rows(path: Path, record: type[BaseModel], rows: list[BaseModel]) -> None:
    fields = _columns(record)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        values = row.model_dump(mode="json")
        writer.writerow({k: "" if values.get(k) is None else values[k] for k in fields})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(buffer.getvalue(), encoding="utf-8")


def _check_upload_size(name: str, data: bytes) -> None:
    """An upload larger than the setting ``SERVEWISE_MAX_UPLOAD_MB`` is refused unread."""
    from planner.input_checks import check_file_size
    from planner.settings import get_settings

    try:
        check_file_size(name, len(data), get_settings().max_upload_mb, "SERVEWISE_MAX_UPLOAD_MB")
    except InvalidInputError as exc:
        raise CatalogError(name, None, None, f"{exc.value} is too large: {exc.allowed}") from None


def stage_table_upload(
    user_dir: Path,
    table: str,
    data: bytes,
    name: str,
    current: Catalog,
    embedded_dir: Path | None = None,
) -> StagedTable:
    """Merge an uploaded CSV into the user's ``table`` file, in a staging copy.

    ``current`` is the catalog as it loads now: a row whose key it holds replaces that row.

    Raises :class:`CatalogError` (naming the uploaded file, row and field) when the upload or
    the merged catalog does not load.
    """
    spec = TABLES[table]
    _check_upload_size(name, data)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise CatalogError(name, None, None, "not a UTF-8 text file; upload a CSV") from None
    if not text.strip():
        raise CatalogError(name, None, None, f"the file is empty; expected {spec.file} columns")
    with tempfile.TemporaryDirectory(prefix="servewise-upload-") as tmp:
        upload = Path(tmp) / Path(name).name
        upload.write_text(text, encoding="utf-8")
        new_rows = read_records(upload, spec.record)
        if not new_rows:
            raise CatalogError(name, None, None, "the file has a header but no rows")
        _refuse_conflicting_duplicates(name, spec, new_rows)
        existing_path = user_dir / spec.file
        existing = read_records(existing_path, spec.record) if existing_path.exists() else []
        merged: dict[tuple[str, ...], BaseModel] = {spec.key(r): r for r in existing}
        known = {spec.key(r) for r in spec.rows(current)} | set(merged)
        replaced = sum(1 for r in new_rows if spec.key(r) in known)
        for row in new_rows:
            merged[spec.key(row)] = row
        staging = Path(tmp) / "catalog"
        if user_dir.exists():
            shutil.copytree(user_dir, staging)
        _write_rows(staging / spec.file, spec.record, list(merged.values()))
        try:
            catalog = load_catalog(embedded_dir, user_dir=staging)
        except CatalogError as exc:
            raise CatalogError(name, None, None, f"does not fit the catalog: {exc}") from None
    return StagedTable(
        table=table,
        rows=list(merged.values()),
        added=len(new_rows) - replaced,
        replaced=replaced,
        catalog=catalog,
    )


def _refuse_conflicting_duplicates(name: str, spec: TableSpec, rows: list[BaseModel]) -> None:
    """Two rows of one upload with the same key (a price's instance, region and pricing) and
    different values: which one is meant cannot be told, so the upload is refused naming both
    rows and the first field they differ in (an identical repeat is harmless and kept once)."""
    first: dict[tuple[str, ...], tuple[int, BaseModel]] = {}
    for line_no, row in enumerate(rows, start=2):
        key = spec.key(row)
        if key not in first:
            first[key] = (line_no, row)
            continue
        earlier_line, earlier = first[key]
        if earlier == row:
            continue
        old, new = earlier.model_dump(), row.model_dump()
        field = next(f for f in old if old[f] != new[f])
        raise CatalogError(
            name,
            line_no,
            field,
            f"duplicate {spec.noun} {' '.join(key)}: row {earlier_line} says {old[field]!r}, "
            f"this row {new[field]!r}; keep one",
        )


def save_staged(user_dir: Path, staged: StagedTable) -> Path:
    spec = TABLES[staged.table]
    path = user_dir / spec.file
    _write_rows(path, spec.record, staged.rows)
    return path


def parse_model_config(data: bytes, name: str, hf_id: str = "") -> tuple[dict[str, Any], ModelCard]:
    """Check an uploaded config.json; ``hf_id`` names it when the file does not.

    Raises :class:`CatalogError` naming the file and the problem.
    """
    _check_upload_size(name, data)
    try:
        printable_name(name)
    except ValueError as exc:
        raise CatalogError(repr(name), None, None, f"the file name must be {exc}") from None
    try:
        config = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise CatalogError(name, None, None, "not a UTF-8 text file; upload config.json") from None
    except json.JSONDecodeError as exc:
        raise CatalogError(name, exc.lineno, None, f"not valid JSON: {exc.msg}") from None
    except RecursionError:
        raise CatalogError(name, None, None, "nested too deep to be a config.json") from None
    if not isinstance(config, dict):
        raise CatalogError(name, None, None, "a config.json must be a JSON object")
    if hf_id.strip():
        meta = dict(config.get("_servewise") or {})
        meta["hf_id"] = hf_id.strip()
        config = {**config, "_servewise": meta}
    card = model_card_from_config(config, origin="user", file=name)
    return config, card


def save_model_config(user_dir: Path, config: dict[str, Any], card: ModelCard) -> Path:
    """Write the config to ``models/<hf_id with / as __>.json`` (the embedded naming)."""
    meta = dict(config.get("_servewise") or {})
    meta.setdefault("hf_id", card.hf_id)
    meta.setdefault("name", card.name)
    meta.setdefault("source", card.source)
    meta.setdefault("as_of", card.as_of.isoformat())
    path = user_dir / MODELS_DIR / (card.hf_id.replace("/", "__") + ".json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**config, "_servewise": meta}, indent=2), encoding="utf-8")
    return path


def user_files(user_dir: Path) -> list[Path]:
    if not user_dir.is_dir():
        return []
    return sorted(p for p in user_dir.rglob("*") if p.is_file())
