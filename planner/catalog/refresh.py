"""Refresh prices from SkyPilot catalog files into the user's catalog, report, keep, undo.

``plan_refresh`` compares the offers of SkyPilot ``vms.csv`` files
(:mod:`planner.catalog.skypilot`) with the catalog as it loads now and says what would change:
new instance types, new prices, prices that moved by more than a threshold, prices that moved
less or only got a newer date, and prices the files no longer list. ``apply_refresh`` writes
it to the user's catalog directory, never to ``data/``:

- ``prices.csv`` / ``instances.csv`` get the refreshed rows (dated with the file's date), which
  override the embedded rows with the same key, as any user row does;
- every price a refreshed row replaces is appended to ``price_history.csv`` (same columns plus
  ``superseded_on`` and ``refresh_id``), so old prices stay queryable
  (``Catalog.price_history``, ``python -m planner catalog history``);
- the three files as they were before go to ``refreshes/<id>/``; ``undo_refresh`` puts them
  back, newest refresh first.

A price the user set by hand (a user row whose source is not a refresh) is never overwritten:
the report lists it as kept. Prices the files no longer list are reported, not deleted (the
embedded catalog cannot be edited from here); their age shows on the Data page.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from planner.catalog.loader import (
    INSTANCES_FILE,
    PRICE_HISTORY_FILE,
    PRICES_FILE,
    Catalog,
    load_catalog,
    read_records,
)
from planner.catalog.schema import Instance, Price, PriceHistoryEntry
from planner.catalog.skypilot import (
    Offer,
    SkyPilotFile,
    check_snapshot_size,
    read_skypilot_vms,
)
from planner.errors import CatalogError, InvalidInputError

REFRESHES_DIR = "refreshes"
REFRESH_SOURCE_PREFIX = "SkyPilot catalog"
DEFAULT_THRESHOLD_PCT = 5.0
#: the pricing modes a SkyPilot vms.csv carries (its Price and SpotPrice columns): a refresh
#: confirms, moves or drops only these; a 1-/3-year commitment price is never "no longer listed"
SKYPILOT_PRICING = ("on_demand", "spot")
_BACKED_UP = (PRICES_FILE, INSTANCES_FILE, PRICE_HISTORY_FILE)


@dataclass(frozen=True)
class PriceChange:
    provider: str
    instance: str
    region: str
    pricing: str
    old_usd: float | None
    new_usd: float
    old_as_of: str | None
    new_as_of: str

    @property
    def change_pct(self) -> float | None:
        if self.old_usd is None:
            return None
        return (self.new_usd - self.old_usd) / self.old_usd * 100.0


@dataclass
class RefreshPlan:
    """What a refresh would change; nothing is written until :func:`apply_refresh`."""

    as_of: date
    threshold_pct: float
    files: list[str]
    providers: list[str]
    file_by_provider: dict[str, str] = field(default_factory=dict)
    new_instances: list[Instance] = field(default_factory=list)
    new_prices: list[PriceChange] = field(default_factory=list)
    moved: list[PriceChange] = field(default_factory=list)  # by more than the threshold
    small_moves: list[PriceChange] = field(default_factory=list)
    confirmed: list[PriceChange] = field(default_factory=list)  # same price, newer date
    older_than_catalog: list[PriceChange] = field(default_factory=list)  # file older: not used
    removed: list[Price] = field(default_factory=list)  # in the catalog, not in the files
    kept_user_prices: list[Price] = field(default_factory=list)
    skipped: dict[str, list[str]] = field(default_factory=dict)  # reason -> instance types
    rows_read: int = 0

    @property
    def writes(self) -> list[PriceChange]:
        return self.new_prices + self.moved + self.small_moves + self.confirmed

    def change_rows(self) -> list[dict[str, object]]:
        """One row per reported change (new, moved, moved less, vanished), for a table."""
        rows: list[dict[str, object]] = []
        kinds = (("new", self.new_prices), ("moved", self.moved), ("moved less", self.small_moves))
        for kind, changes in kinds:
            for c in changes:
                rows.append(
                    {
                        "change": kind,
                        "provider": c.provider,
                        "instance": c.instance,
                        "region": c.region,
                        "pricing": c.pricing,
                        "old_usd_per_hour": c.old_usd,
                        "new_usd_per_hour": c.new_usd,
                        "change_pct": None if c.change_pct is None else round(c.change_pct, 2),
                        "old_as_of": c.old_as_of,
                        "new_as_of": c.new_as_of,
                    }
                )
        for p in self.removed:
            rows.append(
                {
                    "change": "no longer listed",
                    "provider": p.provider,
                    "instance": p.instance,
                    "region": p.region,
                    "pricing": p.pricing,
                    "old_usd_per_hour": p.usd_per_hour,
                    "new_usd_per_hour": None,
                    "change_pct": None,
                    "old_as_of": p.as_of.isoformat(),
                    "new_as_of": None,
                }
            )
        return rows

    def summary(self) -> str:
        parts = [
            f"{len(self.new_instances)} new instance types",
            f"{len(self.new_prices)} new prices",
            f"{len(self.moved)} moved by more than {self.threshold_pct:g}%",
            f"{len(self.small_moves)} moved less",
            f"{len(self.confirmed)} unchanged (re-dated)",
            f"{len(self.removed)} no longer listed",
        ]
        if self.kept_user_prices:
            parts.append(f"{len(self.kept_user_prices)} of your own prices kept")
        return ", ".join(parts)


@dataclass(frozen=True)
class RefreshRecord:
    """A refresh that was written (``refreshes/<refresh_id>/refresh.json``)."""

    refresh_id: str
    applied_at: str
    as_of: str
    files: list[str]
    providers: list[str]
    summary: str


def _key(record: Price | PriceChange) -> tuple[str, str, str]:
    return (record.instance, record.region, record.pricing)


def _is_refresh_row(price: Price) -> bool:
    return price.source.startswith(REFRESH_SOURCE_PREFIX)


def plan_refresh(
    catalog: Catalog,
    files: Sequence[SkyPilotFile],
    as_of: date,
    *,
    user_prices: Iterable[Price] = (),
    threshold_pct: float = DEFAULT_THRESHOLD_PCT,
    regions: Iterable[str] = (),
) -> RefreshPlan:
    """Compare the offers of ``files`` with ``catalog``; ``user_prices`` are the rows of the
    user's own prices.csv (hand-set ones are protected); ``regions`` restricts the refresh."""
    if not math.isfinite(threshold_pct) or threshold_pct < 0:
        raise InvalidInputError("threshold_pct", threshold_pct, "a finite percentage >= 0")
    wanted_regions = {r for r in regions if r}
    own = {_key(p): p for p in user_prices if not _is_refresh_row(p)}
    current = {_key(p): p for p in catalog.prices}
    plan = RefreshPlan(
        as_of=as_of,
        threshold_pct=threshold_pct,
        files=[str(f.path) for f in files],
        providers=sorted({f.provider for f in files}),
        file_by_provider={f.provider: str(f.path) for f in files},
    )
    seen: set[tuple[str, str, str]] = set()
    listed: set[str] = set()
    covered_regions: dict[str, set[str]] = {}
    new_instances: dict[str, Instance] = {}
    for file in files:
        plan.rows_read += file.rows
        for reason, names in file.skipped.items():
            plan.skipped.setdefault(f"{file.provider}: {reason}", []).extend(sorted(names))
        for offer in file.offers:
            if wanted_regions and offer.region not in wanted_regions:
                continue
            listed.add(offer.instance)
            covered_regions.setdefault(offer.provider, set()).add(offer.region)
            if offer.instance not in catalog.instances and offer.instance not in new_instances:
                new_instances[offer.instance] = _new_instance(offer, catalog, as_of, file.path)
            for pricing, usd in (("on_demand", offer.on_demand_usd), ("spot", offer.spot_usd)):
                if usd is None:
                    continue
                key = (offer.instance, offer.region, pricing)
                seen.add(key)
                old = current.get(key)
                change = PriceChange(
                    provider=offer.provider,
                    instance=offer.instance,
                    region=offer.region,
                    pricing=pricing,
                    old_usd=old.usd_per_hour if old else None,
                    new_usd=round(usd, 6),
                    old_as_of=old.as_of.isoformat() if old else None,
                    new_as_of=as_of.isoformat(),
                )
                if key in own:
                    plan.kept_user_prices.append(own[key])
                elif old is None:
                    plan.new_prices.append(change)
                elif old.as_of > as_of:
                    plan.older_than_catalog.append(change)
                elif change.change_pct is not None and abs(change.change_pct) > threshold_pct:
                    plan.moved.append(change)
                elif change.new_usd != old.usd_per_hour:
                    plan.small_moves.append(change)
                else:
                    plan.confirmed.append(change)
    plan.new_instances = sorted(new_instances.values(), key=lambda i: i.instance)
    for price in sorted(catalog.prices, key=_key):
        instance = catalog.instances.get(price.instance)
        if instance is None or instance.provider not in plan.providers:
            continue
        if price.pricing not in SKYPILOT_PRICING:
            continue  # a 1-/3-year commitment: SkyPilot's files never list one
        if wanted_regions and price.region not in wanted_regions:
            continue
        in_file = price.instance in listed
        region_covered = price.region in covered_regions.get(instance.provider, set())
        if _key(price) not in seen and (region_covered or not in_file):
            plan.removed.append(price)
    return plan


def plan_refresh_from_uploads(
    user_dir: Path,
    uploads: Sequence[tuple[str, bytes, str]],
    catalog: Catalog,
    as_of: date,
    *,
    threshold_pct: float = DEFAULT_THRESHOLD_PCT,
    regions: Iterable[str] = (),
) -> RefreshPlan:
    """:func:`plan_refresh` for uploaded files, ``(file name, bytes, provider)`` each (the Data
    page's upload; an upload has no file date, so the caller names the snapshot's date)."""
    own_path = user_dir / PRICES_FILE
    own = read_records(own_path, Price) if own_path.exists() else []
    with tempfile.TemporaryDirectory(prefix="servewise-skypilot-") as tmp:
        files = []
        for name, data, provider in uploads:
            if not provider.strip():
                raise InvalidInputError("provider", provider, f"the cloud {name} prices")
            check_snapshot_size(name, len(data))  # named as uploaded, not as the temporary copy
            path = Path(tmp) / provider.strip().lower() / Path(name).name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            files.append(read_skypilot_vms(path, provider.strip().lower(), catalog))
        plan = plan_refresh(
            catalog, files, as_of, user_prices=own, threshold_pct=threshold_pct, regions=regions
        )
    plan.files = [Path(f).name for f in plan.files]
    plan.file_by_provider = {k: Path(v).name for k, v in plan.file_by_provider.items()}
    return plan


def _new_instance(offer: Offer, catalog: Catalog, as_of: date, path: Path) -> Instance:
    gpu = catalog.gpu(offer.gpu_id)
    if offer.gpus == 1:
        link, notes = "none", "single GPU"
    else:
        # SkyPilot's catalog does not say how the GPUs of an instance talk; the GPU's own
        # platform is the documented assumption (as for the embedded rows from the same files).
        link = {"nvlink": "nvlink", "infinity_fabric": "infinity_fabric"}.get(
            gpu.interconnect, "pcie"
        )
        notes = (
            f"gpu_link assumed from the {gpu.gpu_id}'s own interconnect ({gpu.interconnect}); "
            "the SkyPilot catalog does not state it: upload an instances.csv row to correct it"
        )
    return Instance(
        provider=offer.provider,
        instance=offer.instance,
        gpu_id=offer.gpu_id,
        gpus=offer.gpus,
        vcpus=offer.vcpus,
        ram_gib=offer.ram_gib,
        gpu_link=link,
        gpu_link_bw_gbps=gpu.interconnect_bw_gbps if link != "pcie" and offer.gpus > 1 else None,
        network_gbps=None,
        source=_source(offer.provider, path),
        as_of=as_of,
        notes=notes + "; network_gbps not in the SkyPilot catalog; added by a catalog refresh",
    )


def _source(provider: str, path: Path) -> str:
    return f"{REFRESH_SOURCE_PREFIX} {provider}/vms.csv ({path.name} as imported)"


def _columns(record: type[BaseModel]) -> list[str]:
    provenance = ["source", "as_of", "notes"]
    fields = list(record.model_fields)
    return [f for f in fields if f not in provenance] + [f for f in provenance if f in fields]


def _csv_text(record: type[BaseModel], rows: Iterable[BaseModel]) -> str:
    columns = _columns(record)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        values = row.model_dump(mode="json")
        writer.writerow({k: "" if values.get(k) is None else values[k] for k in columns})
    return buffer.getvalue()


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


R = TypeVar("R", bound=BaseModel)


def _read(path: Path, record: type[R]) -> list[R]:
    return read_records(path, record) if path.exists() else []


def _refresh_id(user_dir: Path, providers: Sequence[str], now: datetime) -> str:
    base = now.strftime("%Y%m%dT%H%M%SZ") + "-" + "-".join(providers or ["none"])
    candidate, n = base, 1
    while (user_dir / REFRESHES_DIR / candidate).exists():
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def apply_refresh(
    user_dir: Path,
    plan: RefreshPlan,
    catalog: Catalog,
    *,
    embedded_dir: Path | None = None,
    now: datetime | None = None,
) -> RefreshRecord:
    """Write ``plan`` into ``user_dir`` (the user's catalog directory); see the module doc.

    The merged files are loaded together with the embedded catalog in a staging copy first; a
    catalog that does not load is never written (:class:`CatalogError`).
    """
    now = now or datetime.now(UTC)
    refresh_id = _refresh_id(user_dir, plan.providers, now)
    prices = {_key(p): p for p in _read(user_dir / PRICES_FILE, Price)}
    instances = {i.instance: i for i in _read(user_dir / INSTANCES_FILE, Instance)}
    history = _read(user_dir / PRICE_HISTORY_FILE, PriceHistoryEntry)
    current = {_key(p): p for p in catalog.prices}
    for instance in plan.new_instances:
        instances[instance.instance] = instance
    for change in plan.writes:
        path = Path(plan.file_by_provider.get(change.provider, "vms.csv"))
        old = current.get(_key(change))
        if old is not None and (old.usd_per_hour, old.as_of) != (change.new_usd, plan.as_of):
            history.append(
                PriceHistoryEntry(
                    **old.model_dump(),
                    superseded_on=now.date(),
                    refresh_id=refresh_id,
                )
            )
        prices[_key(change)] = Price(
            provider=change.provider,
            instance=change.instance,
            region=change.region,
            pricing=change.pricing,
            usd_per_hour=change.new_usd,
            source=_source(change.provider, path),
            as_of=plan.as_of,
            notes=f"catalog refresh {refresh_id}"
            + (
                "; spot = lowest spot price across the region's zones"
                if change.pricing == "spot"
                else ""
            ),
        )
    texts = {
        PRICES_FILE: _csv_text(Price, prices.values()),
        INSTANCES_FILE: _csv_text(Instance, instances.values()),
        PRICE_HISTORY_FILE: _csv_text(PriceHistoryEntry, history),
    }
    with tempfile.TemporaryDirectory(prefix="servewise-refresh-") as tmp:
        staging = Path(tmp) / "catalog"
        if user_dir.exists():
            shutil.copytree(user_dir, staging, ignore=shutil.ignore_patterns(REFRESHES_DIR))
        for name, text in texts.items():
            _write_atomically(staging / name, text)
        try:
            load_catalog(embedded_dir, user_dir=staging)
        except CatalogError as exc:
            raise CatalogError(
                "refresh", None, None, f"the refreshed catalog would not load: {exc}"
            ) from None
    backup = user_dir / REFRESHES_DIR / refresh_id
    (backup / "before").mkdir(parents=True)
    existed = []
    for name in _BACKED_UP:
        if (user_dir / name).exists():
            shutil.copy2(user_dir / name, backup / "before" / name)
            existed.append(name)
    record = RefreshRecord(
        refresh_id=refresh_id,
        applied_at=now.isoformat(timespec="seconds"),
        as_of=plan.as_of.isoformat(),
        files=plan.files,
        providers=plan.providers,
        summary=plan.summary(),
    )
    manifest = {**asdict(record), "existed_before": existed}
    (backup / "refresh.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    for name, text in texts.items():
        _write_atomically(user_dir / name, text)
    return record


def list_refreshes(user_dir: Path) -> list[RefreshRecord]:
    """Applied refreshes that can still be undone, newest first."""
    root = user_dir / REFRESHES_DIR
    records = []
    for manifest in sorted(root.glob("*/refresh.json")) if root.is_dir() else []:
        data = json.loads(manifest.read_text(encoding="utf-8"))
        data.pop("existed_before", None)
        records.append(RefreshRecord(**data))
    return sorted(records, key=lambda r: (r.applied_at, r.refresh_id), reverse=True)


def undo_refresh(user_dir: Path, refresh_id: str | None = None) -> RefreshRecord:
    """Put back the catalog files as they were before the newest refresh (only the newest
    can be undone: a later one was computed on top of it)."""
    records = list_refreshes(user_dir)
    if not records:
        raise InvalidInputError("refresh", refresh_id or "latest", "an applied refresh; none")
    latest = records[0]
    if refresh_id is not None and refresh_id != latest.refresh_id:
        known = [r.refresh_id for r in records]
        if refresh_id not in known:
            raise InvalidInputError("refresh", refresh_id, f"one of {', '.join(known)}")
        raise InvalidInputError(
            "refresh", refresh_id, f"the newest refresh ({latest.refresh_id}); undo that one first"
        )
    backup = user_dir / REFRESHES_DIR / latest.refresh_id
    manifest = json.loads((backup / "refresh.json").read_text(encoding="utf-8"))
    existed = set(manifest.get("existed_before", []))
    for name in _BACKED_UP:
        target = user_dir / name
        if name in existed:
            _write_atomically(target, (backup / "before" / name).read_text(encoding="utf-8"))
        else:
            target.unlink(missing_ok=True)
    shutil.rmtree(backup)
    return latest
