"""Load and validate the catalog files: the embedded ``data/`` and a user's own additions.

A user's files (same names and formats, in ``<user_data_dir>/catalog/``) are layered on top of
the embedded ones: a row with the same key replaces the embedded row, any other row is added.
Every problem is reported as a :class:`CatalogError` naming the file, the row (the line number
in the file, the header being line 1) and the field.
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from planner.catalog.architecture import architecture_from_config
from planner.catalog.names import (
    close_names,
    gpu_candidates,
    gpu_suggestions,
    model_candidates,
)
from planner.catalog.schema import (
    GPU,
    Instance,
    MeasuredResult,
    ModelCard,
    OwnedServer,
    Price,
    PriceHistoryEntry,
)
from planner.errors import CatalogError, UnknownEntityError

log = logging.getLogger(__name__)

EMBEDDED_DATA_DIR = Path(__file__).resolve().parents[2] / "data"

GPUS_FILE = "gpus.csv"
INSTANCES_FILE = "instances.csv"
PRICES_FILE = "prices.csv"
PRICE_HISTORY_FILE = "price_history.csv"  # user catalog only: prices a refresh replaced
MEASURED_FILE = "measured_results.csv"
#: the embedded catalog keeps one measured file a source family (same columns)
MEASURED_GLOB = "measured_*.csv"
#: public disaggregated / wide-EP results (issue 25): their own columns (two pools, a link) and
#: not fitted yet, so not a ``measured_*.csv`` source family of the fit; read with
#: :func:`load_disaggregated_results`
DISAGGREGATED_FILE = "measured_disaggregated.csv"
MODELS_DIR = "models"
OWNED_FILE = "owned_costs.csv"  # servers a team buys: planner.owned prices them

R = TypeVar("R", bound=BaseModel)


def _rows(path: Path) -> Iterable[tuple[int, dict[str, Any]]]:
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        for line_no, row in _csv_lines(reader, path.name):
            if None in row:
                raise CatalogError(path.name, line_no, None, "more cells than header columns")
            yield (
                line_no,
                {k.strip(): (v.strip() if v and v.strip() else None) for k, v in row.items()},
            )


def _csv_lines(
    reader: csv.DictReader[str], file: str
) -> Iterable[tuple[int, dict[str | Any, Any]]]:
    """The reader's rows with their line numbers; a row the csv module cannot parse (a field
    over its size limit, a quote left open) is an error naming the file and row."""
    line_no = 1
    while True:
        line_no += 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise CatalogError(file, line_no, None, f"not a CSV row: {exc}") from None
        yield line_no, row


def _header(path: Path) -> list[str]:
    """The header's column names; a name given twice is refused (the csv module would keep
    the later cell of a row and drop the other without a word)."""
    with path.open(newline="", encoding="utf-8") as handle:
        header = [h.strip() for h in next(csv.reader(handle), [])]
    seen: set[str] = set()
    for name in header:
        if name and name in seen:
            raise CatalogError(path.name, 1, name, "column given twice in the header")
        seen.add(name)
    return header


def _validate(model: type[R], values: dict[str, Any], file: str, line_no: int) -> R:
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or None
        given = values.get(loc) if loc else None
        raise CatalogError(file, line_no, loc, f"{first['msg']} (got {given!r})") from None


def read_records(path: Path, model: type[R]) -> list[R]:
    """Read one CSV into typed records; missing required columns fail before any row."""
    fields = model.model_fields
    required = [name for name, info in fields.items() if info.is_required()]
    header = _header(path)
    for name in required:
        if name not in header:
            raise CatalogError(path.name, 1, name, "required column is missing from the header")
    records = []
    for line_no, row in _rows(path):
        values = {k: v for k, v in row.items() if k in fields and v is not None}
        unknown = [k for k in row if k not in fields]
        if unknown:
            raise CatalogError(
                path.name, 1, unknown[0], f"unknown column; allowed: {sorted(fields)}"
            )
        records.append(_validate(model, values, path.name, line_no))
    return records


def read_records_keeping(path: Path, model: type[R]) -> tuple[list[R], list[CatalogError]]:
    """:func:`read_records` for a user's file of many independent rows (measured results): a
    row the record refuses is left out and returned with its reason (file, row, field, value
    and what is allowed), the other rows are kept. The header is checked as a whole."""
    fields = model.model_fields
    required = [name for name, info in fields.items() if info.is_required()]
    header = _header(path)
    for name in required:
        if name not in header:
            raise CatalogError(path.name, 1, name, "required column is missing from the header")
    unknown = [k for k in header if k and k not in fields]
    if unknown:
        raise CatalogError(path.name, 1, unknown[0], f"unknown column; allowed: {sorted(fields)}")
    records: list[R] = []
    refused: list[CatalogError] = []
    for line_no, row in _rows(path):
        values = {k: v for k, v in row.items() if k in fields and v is not None}
        try:
            records.append(_validate(model, values, path.name, line_no))
        except CatalogError as exc:
            refused.append(
                CatalogError(exc.file, exc.row, exc.field, f"{exc.problem}; the row is left out")
            )
    return records, refused


def model_card_from_config(
    config: dict[str, Any], *, origin: str = "user", file: str = "config.json"
) -> ModelCard:
    """Turn a Hugging Face config.json (with an optional ``_servewise`` block) into a card."""
    if not isinstance(config, dict):
        raise CatalogError(file, None, None, "a config.json must be a JSON object")
    meta = config.get("_servewise") or {}
    body = {k: v for k, v in config.items() if k != "_servewise"}
    try:
        architecture = architecture_from_config(body)
    except ValueError as exc:
        raise CatalogError(file, None, None, str(exc)) from None
    hf_id = str(
        meta.get("hf_id") or body.get("_name_or_path") or Path(file).stem.replace("__", "/")
    )
    as_of = meta.get("as_of") or date.today().isoformat()
    try:
        return ModelCard(
            hf_id=hf_id,
            name=str(meta.get("name") or hf_id.split("/")[-1]),
            source=str(meta.get("source") or f"user upload ({file})"),
            as_of=as_of,
            config=body,
            architecture=architecture,
            published_total_params_b=meta.get("published_total_params_b"),
            published_active_params_b=meta.get("published_active_params_b"),
            params_source=meta.get("params_source"),
            origin="embedded" if origin == "embedded" else "user",
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        raise CatalogError(file, None, ".".join(map(str, first["loc"])), first["msg"]) from None


def read_model_dir(directory: Path, origin: str) -> list[ModelCard]:
    cards = []
    for path in sorted(directory.glob("*.json")):
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise CatalogError(path.name, exc.lineno, None, f"not valid JSON: {exc.msg}") from None
        except RecursionError:
            raise CatalogError(
                path.name, None, None, "nested too deep to be a config.json"
            ) from None
        cards.append(model_card_from_config(config, origin=origin, file=path.name))
    return cards


@dataclass
class Catalog:
    """Everything the planner knows: GPUs, instances, prices, models, measured results."""

    gpus: dict[str, GPU] = field(default_factory=dict)
    instances: dict[str, Instance] = field(default_factory=dict)
    prices: list[Price] = field(default_factory=list)
    models: dict[str, ModelCard] = field(default_factory=dict)  # key: hf_id lower-cased
    measured: list[MeasuredResult] = field(default_factory=list)
    #: prices a catalog refresh replaced, oldest first (not used for planning)
    price_history: list[PriceHistoryEntry] = field(default_factory=list)
    #: server platforms a team can own, by platform; the priced ones are also instances of the
    #: provider "owned" with an hourly price (planner.owned.add_owned_servers)
    owned: dict[str, OwnedServer] = field(default_factory=dict)
    #: what loading the user's files left out or noticed, each naming file, row and field (a
    #: measured row out of bounds, a price given twice alike): shown by the Data page and
    #: ``planner catalog check``, logged on load
    load_notes: list[CatalogError] = field(default_factory=list)
    #: ``prices`` by instance, built on first use and rebuilt when ``prices`` is replaced or
    #: grows (a search asks for an instance's prices per candidate)
    _prices_by_instance: tuple[int, int, dict[str, list[Price]]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def gpu(self, gpu_id: str) -> GPU:
        """The GPU of a catalog id, or of a name that means one GPU (``nvidia-smi``'s, the
        vendor's: :mod:`planner.catalog.names`); UnknownEntityError with the likely ones."""
        found = self.gpus.get(gpu_id)
        if found is not None:
            return found
        candidates = gpu_candidates(gpu_id, self.gpus)
        if len(candidates) == 1:
            return self.gpus[candidates[0]]
        raise UnknownEntityError("gpu", gpu_id, list(self.gpus), gpu_suggestions(gpu_id, self.gpus))

    def model(self, hf_id: str) -> ModelCard:
        """The model of a Hugging Face id (any case) or of its last part where one model has
        it (:mod:`planner.catalog.names`); UnknownEntityError with the likely ones."""
        found = self.models.get(hf_id.lower())
        if found is not None:
            return found
        cards = list(self.models.values())
        candidates = model_candidates(hf_id, cards)
        if len(candidates) == 1:
            return self.models[candidates[0].lower()]
        known = [m.hf_id for m in cards]
        raise UnknownEntityError("model", hf_id, known, candidates or close_names(hf_id, known))

    def instance(self, name: str) -> Instance:
        found = self.instances.get(name)
        if found is None:
            raise UnknownEntityError("instance", name, list(self.instances))
        return found

    def prices_for(
        self,
        instance: str,
        *,
        region: str | None = None,
        pricing: str | None = None,
    ) -> list[Price]:
        index = self._prices_by_instance
        if index is None or index[0] != id(self.prices) or index[1] != len(self.prices):
            by_instance: dict[str, list[Price]] = {}
            for p in self.prices:
                by_instance.setdefault(p.instance, []).append(p)
            index = self._prices_by_instance = (id(self.prices), len(self.prices), by_instance)
        return [
            p
            for p in index[2].get(instance, ())
            if (region is None or p.region == region) and (pricing is None or p.pricing == pricing)
        ]

    def price(self, instance: str, region: str | None = None, pricing: str = "on_demand") -> Price:
        """The price of an instance; without a region, the cheapest region that lists it."""
        matches = self.prices_for(instance, region=region, pricing=pricing)
        if not matches:
            self.instance(instance)
            listed = sorted({f"{p.region}/{p.pricing}" for p in self.prices_for(instance)})
            raise UnknownEntityError(
                "price", f"{instance} in {region or 'any region'} ({pricing})", listed
            )
        return min(matches, key=lambda p: p.usd_per_hour)

    def price_history_for(
        self, instance: str, region: str | None = None, pricing: str | None = None
    ) -> list[Price]:
        """Every known price of ``instance`` (replaced ones and the current one), oldest first."""
        rows: list[Price] = [*self.price_history, *self.prices]
        return sorted(
            (
                p
                for p in rows
                if p.instance == instance
                and (region is None or p.region == region)
                and (pricing is None or p.pricing == pricing)
            ),
            key=lambda p: (p.as_of, not isinstance(p, PriceHistoryEntry)),
        )

    def add_model(self, card: ModelCard) -> None:
        self.models[card.hf_id.lower()] = card


def _measured_order(path: Path) -> tuple[int, str]:
    """measured_results.csv first, then the other sources by name (stable row order)."""
    return (0 if path.name == MEASURED_FILE else 1, path.name)


def _merge(base: dict[str, R], extra: Iterable[R], key: Any) -> dict[str, R]:
    merged = dict(base)
    for record in extra:
        merged[key(record)] = record
    return merged


#: the cells every row of ``measured_disaggregated.csv`` must fill
DISAGGREGATED_REQUIRED = ("source", "source_ref", "date", "engine", "model", "gpu", "tested_phase")
DISAGGREGATED_PHASES = ("decode", "prefill", "both")


def load_disaggregated_results(path: Path | None = None) -> list[dict[str, str]]:
    """The rows of ``data/measured_disaggregated.csv`` (or ``path``) as scenario rows for
    ``planner predict --scenarios`` (two pools and a link, see data/README.md). A row without
    its source, date (YYYY-MM-DD) or tested phase raises CatalogError naming the line and
    column."""
    path = path or EMBEDDED_DATA_DIR / DISAGGREGATED_FILE
    with path.open(newline="", encoding="utf-8") as handle:
        rows = [
            {k: (v or "").strip() for k, v in row.items() if k is not None}
            for row in csv.DictReader(handle)
        ]
    for line_no, row in enumerate(rows, start=2):
        for column in DISAGGREGATED_REQUIRED:
            if not row.get(column):
                raise CatalogError(path.name, line_no, column, "a value (it is blank)")
        try:
            date.fromisoformat(row["date"])
        except ValueError:
            raise CatalogError(path.name, line_no, "date", "a date as YYYY-MM-DD") from None
        if row["tested_phase"] not in DISAGGREGATED_PHASES:
            raise CatalogError(
                path.name, line_no, "tested_phase", f"one of {', '.join(DISAGGREGATED_PHASES)}"
            )
        # The posts name no request count; the pools' steady state simulates none, and a
        # scenario's default (4 x concurrency) would exceed what a simulation may ask for at
        # tens of thousands of sequences in flight: one request a seat.
        if not row.get("num_requests") and row.get("concurrency"):
            row["num_requests"] = row["concurrency"]
    return rows


def _second_price(first: tuple[int, Price], line_no: int, price: Price) -> CatalogError:
    """A user's prices file that gives one price (instance, region, pricing) twice: the same
    price is noted (the later row is used); two that disagree are refused, naming both rows,
    since which one is meant cannot be told."""
    first_line, earlier = first
    what = f"{price.provider}/{price.instance} in {price.region} ({price.pricing})"
    if earlier.usd_per_hour != price.usd_per_hour:
        raise CatalogError(
            PRICES_FILE,
            line_no,
            "usd_per_hour",
            f"{what} is priced twice and the prices disagree: row {first_line} says "
            f"${earlier.usd_per_hour:,.4f}/h, row {line_no} ${price.usd_per_hour:,.4f}/h; "
            "keep the one that is right and delete the other",
        )
    return CatalogError(
        PRICES_FILE,
        line_no,
        "usd_per_hour",
        f"{what} is also row {first_line}, at the same ${price.usd_per_hour:,.4f}/h: one row "
        "is used; the other can be deleted",
    )


def _instance_gpu_named(inst: Instance, catalog: Catalog, line_no: int) -> Instance:
    """An instance row whose ``gpu_id`` is a GPU's name as people write it ("NVIDIA H100 80GB
    HBM3"), with the catalog's id in its place (:meth:`Catalog.gpu`); CatalogError naming the
    row when the name means no catalog GPU or several, with the likely ones."""
    try:
        return inst.model_copy(update={"gpu_id": catalog.gpu(inst.gpu_id).gpu_id})
    except UnknownEntityError as exc:
        problem = f"unknown GPU {inst.gpu_id!r}: {exc.allowed}"
        raise CatalogError(INSTANCES_FILE, line_no, "gpu_id", problem) from None


def load_catalog(data_dir: Path | None = None, user_dir: Path | None = None) -> Catalog:
    """Load the embedded catalog from ``data_dir`` and layer ``user_dir``'s files on top."""
    data_dir = data_dir or EMBEDDED_DATA_DIR
    catalog = Catalog()
    price_index: dict[tuple[str, str, str], Price] = {}
    for directory in [data_dir, user_dir] if user_dir else [data_dir]:
        if directory is None or not directory.exists():
            continue
        embedded = directory == data_dir
        if (directory / GPUS_FILE).exists():
            gpus = read_records(directory / GPUS_FILE, GPU)
            catalog.gpus = _merge(catalog.gpus, gpus, lambda g: g.gpu_id)
        if (directory / INSTANCES_FILE).exists():
            seen: set[str] = set()
            for line_no, inst in enumerate(read_records(directory / INSTANCES_FILE, Instance), 2):
                if inst.instance in seen:
                    raise CatalogError(INSTANCES_FILE, line_no, "instance", "duplicate instance")
                if inst.gpu_id not in catalog.gpus:
                    inst = _instance_gpu_named(inst, catalog, line_no)
                seen.add(inst.instance)
                catalog.instances[inst.instance] = inst
        if (directory / PRICES_FILE).exists():
            in_file: dict[tuple[str, str, str], tuple[int, Price]] = {}
            for line_no, price in enumerate(read_records(directory / PRICES_FILE, Price), start=2):
                listed = catalog.instances.get(price.instance)
                if listed is None or listed.provider != price.provider:
                    raise CatalogError(
                        PRICES_FILE,
                        line_no,
                        "instance",
                        f"{price.provider}/{price.instance} is not in {INSTANCES_FILE}",
                    )
                key = (price.instance, price.region, price.pricing)
                if key in price_index and embedded:
                    raise CatalogError(PRICES_FILE, line_no, "region", f"duplicate price for {key}")
                if key in in_file:
                    catalog.load_notes.append(_second_price(in_file[key], line_no, price))
                in_file[key] = (line_no, price)
                price_index[key] = price
        if (directory / MODELS_DIR).is_dir():
            for card in read_model_dir(directory / MODELS_DIR, "embedded" if embedded else "user"):
                catalog.add_model(card)
        measured_files = [directory / MEASURED_FILE] if not embedded else []
        if embedded:
            # one file a public source family: measured_results.csv, measured_gpustack.csv, ...
            measured_files = sorted(
                (p for p in directory.glob(MEASURED_GLOB) if p.name != DISAGGREGATED_FILE),
                key=_measured_order,
            )
        for path in measured_files:
            if path.exists() and embedded:
                catalog.measured.extend(read_records(path, MeasuredResult))
            elif path.exists():
                kept, refused = read_records_keeping(path, MeasuredResult)
                catalog.measured.extend(kept)
                catalog.load_notes.extend(refused)
        if (directory / OWNED_FILE).exists():
            origin = "embedded" if embedded else "user"
            for server in read_records(directory / OWNED_FILE, OwnedServer):
                catalog.owned[server.platform] = server.model_copy(update={"origin": origin})
        if not embedded and (directory / PRICE_HISTORY_FILE).exists():
            history = read_records(directory / PRICE_HISTORY_FILE, PriceHistoryEntry)
            catalog.price_history = sorted(history, key=lambda p: (p.superseded_on, p.as_of))
    catalog.prices = list(price_index.values())
    for note in catalog.load_notes:
        log.warning("your catalog: %s", note)
    if catalog.owned:
        from planner.owned import add_owned_servers  # it prices with this module's records

        add_owned_servers(catalog)
    return catalog
