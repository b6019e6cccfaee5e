"""Read SkyPilot catalog files (``vms.csv`` of one cloud) into instance offers.

SkyPilot publishes one ``vms.csv`` per cloud (github.com/skypilot-org/skypilot-catalog,
``catalogs/v8/<cloud>/vms.csv``). The columns are named, but their order differs by cloud
(AWS: ``InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,
Region,AvailabilityZone,Arch``; GCP puts ``vCPUs,MemoryGiB`` first and ``Price,SpotPrice``
last; Lambda has no ``AvailabilityZone``), so rows are read by name. One row is one instance
type in one zone (or one region where the cloud has no zones).

What becomes an offer, per (instance type, region):

- on-demand price: the lowest ``Price`` over the region's zones; spot: the lowest
  ``SpotPrice`` (the embedded catalog's convention). AWS Local Zones and Wavelength zones
  (zone ids with a location part, ``use1-atl2-az1``) are left out: they price a different
  place than the region.
- GCP lists the GPUs of a machine type as separate rows with a blank ``InstanceType``
  (``,,,A100,1,...``), priced per zone. A host row without an accelerator is priced as the host
  plus the accelerator rows of the same zone *when the catalog already knows which GPU and how
  many the machine type has* (a2/a3/g2 in ``instances.csv``); other host rows have no GPU the
  planner can use and are skipped.
- rows whose accelerator maps to no GPU of the catalog (T4, V100, TPUs, Trainium, ...) and
  fractional GPUs (``AcceleratorCount`` 0.125) are skipped, counted by accelerator.

Nothing here touches the network: the caller hands over a file it already has.
"""

from __future__ import annotations

import csv
import math
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from planner.catalog.loader import Catalog
from planner.catalog.schema import (
    MAX_INSTANCE_GPUS,
    MAX_USD_PER_HOUR,
    MIN_USD_PER_HOUR,
    printable_name,
)
from planner.errors import CatalogError
from planner.input_checks import check_file_size
from planner.settings import get_settings

REQUIRED_COLUMNS = ("InstanceType", "AcceleratorName", "AcceleratorCount", "Price", "Region")
OPTIONAL_COLUMNS = ("SpotPrice", "AvailabilityZone", "vCPUs", "MemoryGiB")

#: SkyPilot's accelerator names for the catalog's GPUs. Used only for instance types the
#: catalog does not know yet (a known one keeps its own ``gpu_id``): SkyPilot's ``A100-80GB``
#: is the SXM part on AWS/GCP but the PCIe one on Azure's NC A100 v4, so check new rows.
SKYPILOT_ACCELERATORS: dict[str, str] = {
    "A10G": "A10G",
    "L4": "L4",
    "L40S": "L40S",
    "A100": "A100-40GB-SXM",
    "A100-80GB": "A100-80GB-SXM",
    "H100": "H100-SXM",
    "H100-MEGA": "H100-SXM",
    "H200": "H200",
    "GH200": "GH200",
    "B200": "B200",
    "GB200": "GB200",
    "B300": "B300",
    "GB300": "GB300",
    "RTXPRO6000": "RTXPRO6000",
    "RTX PRO Server 6000": "RTXPRO6000",
    "MI300X": "MI300X",
    "MI325X": "MI325X",
    "MI355X": "MI355X",
}

_AWS_LOCAL_ZONE = re.compile(r"^[a-z]{2,4}\d-[a-z]{3,}\d+-")  # use1-atl2-az1, usw2-lax1-az1


@dataclass(frozen=True)
class Offer:
    """One instance type in one region at the prices of a SkyPilot file."""

    provider: str
    instance: str
    gpu_id: str
    gpus: int
    vcpus: int | None
    ram_gib: float | None
    region: str
    on_demand_usd: float | None
    spot_usd: float | None
    composed: bool = False  # GCP: host row + accelerator rows


@dataclass
class SkyPilotFile:
    """The offers of one ``vms.csv`` and what was left out of it, and why."""

    path: Path
    provider: str
    offers: list[Offer] = field(default_factory=list)
    skipped: dict[str, set[str]] = field(default_factory=dict)  # reason -> instance types
    rows: int = 0

    def skip(self, reason: str, instance: str) -> None:
        self.skipped.setdefault(reason, set()).add(instance)


@dataclass
class _Row:
    line: int
    instance: str
    accelerator: str
    count: float | None
    vcpus: float | None
    ram_gib: float | None
    region: str
    zone: str
    price: float | None
    spot: float | None


def _number(value: str | None, file: str, line: int, column: str) -> float | None:
    text = (value or "").strip()
    if not text:
        return None
    try:
        number = float(text)
    except ValueError:
        raise CatalogError(file, line, column, f"not a number (got {text!r})") from None
    low, high = _RANGE.get(column, (0.0, math.inf))
    if not math.isfinite(number) or number < low or number > high:
        allowed = f"a number from {low:g} to {high:,g}" if math.isfinite(high) else "a number >= 0"
        raise CatalogError(file, line, column, f"must be {allowed} (got {text!r})")
    return number


def _name(text: str, file: str, line: int, column: str) -> None:
    """A name of the file (instance, region, zone, accelerator) is one the catalog can hold."""
    try:
        printable_name(text)
    except ValueError as exc:
        raise CatalogError(file, line, column, f"must be {exc} (got {text!r})") from None


#: The largest value a column of a vms.csv may hold (the catalog's own bounds: a price within
#: planner.catalog.schema's, GPUs as many as an instance of the catalog may have)
_RANGE = {
    "Price": (MIN_USD_PER_HOUR, MAX_USD_PER_HOUR),
    "SpotPrice": (MIN_USD_PER_HOUR, MAX_USD_PER_HOUR),
    "AcceleratorCount": (0.0, float(MAX_INSTANCE_GPUS)),
    "vCPUs": (0.0, 1_000_000.0),
    "MemoryGiB": (0.0, 1_000_000.0),
}


def check_snapshot_size(name: str, size_bytes: int) -> None:
    """A SkyPilot catalog file over the ``max_price_snapshot_mb`` setting is refused."""
    limit = get_settings().max_price_snapshot_mb
    check_file_size(name, size_bytes, limit, "SERVEWISE_MAX_PRICE_SNAPSHOT_MB")


def _read_rows(path: Path) -> list[_Row]:
    name = str(path)
    try:
        check_snapshot_size(name, path.stat().st_size)
        handle = path.open(newline="", encoding="utf-8-sig")
    except OSError as exc:
        raise CatalogError(name, None, None, f"cannot be read: {exc.strerror}") from None
    with handle:
        reader = csv.DictReader(handle)
        header = [h.strip() for h in reader.fieldnames or []]
        for column in REQUIRED_COLUMNS:
            if column not in header:
                raise CatalogError(
                    name,
                    1,
                    column,
                    "required column of a SkyPilot vms.csv is missing (expected "
                    f"{', '.join(REQUIRED_COLUMNS)}; got {', '.join(header) or 'no header'})",
                )
        rows = []
        for line, raw in enumerate(reader, start=2):
            cells = {(k or "").strip(): (v or "").strip() for k, v in raw.items() if k}
            for column in ("InstanceType", "AcceleratorName", "Region", "AvailabilityZone"):
                _name(cells.get(column, ""), name, line, column)
            rows.append(
                _Row(
                    line=line,
                    instance=cells.get("InstanceType", ""),
                    accelerator=cells.get("AcceleratorName", ""),
                    count=_number(cells.get("AcceleratorCount"), name, line, "AcceleratorCount"),
                    vcpus=_number(cells.get("vCPUs"), name, line, "vCPUs"),
                    ram_gib=_number(cells.get("MemoryGiB"), name, line, "MemoryGiB"),
                    region=cells.get("Region", ""),
                    zone=cells.get("AvailabilityZone", ""),
                    price=_number(cells.get("Price"), name, line, "Price"),
                    spot=_number(cells.get("SpotPrice"), name, line, "SpotPrice"),
                )
            )
    return rows


def gpu_for_accelerator(name: str, catalog: Catalog) -> str | None:
    """The catalog's ``gpu_id`` for a SkyPilot accelerator name, or None."""
    if name in SKYPILOT_ACCELERATORS and SKYPILOT_ACCELERATORS[name] in catalog.gpus:
        return SKYPILOT_ACCELERATORS[name]
    lowered = {g.lower(): g for g in catalog.gpus}
    return lowered.get(name.lower())


def _min(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None and v > 0]
    return min(present) if present else None


def read_skypilot_vms(path: Path, provider: str, catalog: Catalog) -> SkyPilotFile:
    """The GPU offers of one SkyPilot ``vms.csv`` (see the module docstring).

    Raises :class:`CatalogError` (file, row, column) when the file is not a SkyPilot vms.csv.
    """
    rows = _read_rows(path)
    result = SkyPilotFile(path=path, provider=provider, rows=len(rows))
    accelerators: dict[tuple[str, float, str], _Row] = {}  # (name, count, zone) -> GCP GPU row
    hosts: dict[tuple[str, str], list[_Row]] = defaultdict(list)
    for row in rows:
        if provider == "aws" and _AWS_LOCAL_ZONE.match(row.zone):
            continue
        if not row.instance:
            if row.accelerator and row.count:
                accelerators[(row.accelerator, row.count, row.zone or row.region)] = row
            continue
        hosts[(row.instance, row.region)].append(row)
    for (instance, region), zone_rows in sorted(hosts.items()):
        known = catalog.instances.get(instance)
        if known is not None and known.provider != provider:
            result.skip(f"named like a {known.provider} instance of the catalog", instance)
            continue
        first = zone_rows[0]
        if first.accelerator:
            count = first.count or 0.0
            if count < 1 or count != int(count):
                result.skip(f"a fraction of a GPU ({first.accelerator} x {count:g})", instance)
                continue
            gpu_id = known.gpu_id if known is not None else None
            gpu_id = gpu_id or gpu_for_accelerator(first.accelerator, catalog)
            if gpu_id is None:
                reason = f"accelerator {first.accelerator!r} is not a GPU of the catalog"
                result.skip(reason, instance)
                continue
            gpus = int(count)
            on_demand = _min(r.price for r in zone_rows)
            spot = _min(r.spot for r in zone_rows)
            composed = False
        elif known is not None:
            # GCP: the machine type's GPUs are priced on their own rows, zone by zone
            gpu_id, gpus = known.gpu_id, known.gpus
            names = [a for a, g in SKYPILOT_ACCELERATORS.items() if g == gpu_id] + [gpu_id]
            on_demand_by_zone, spot_by_zone = [], []
            for host in zone_rows:
                gpu_row = next(
                    (
                        accelerators[key]
                        for key in ((n, float(gpus), host.zone or region) for n in names)
                        if key in accelerators
                    ),
                    None,
                )
                if gpu_row is None:
                    continue
                if host.price is not None and gpu_row.price is not None:
                    on_demand_by_zone.append(host.price + gpu_row.price)
                if host.spot is not None and gpu_row.spot is not None:
                    spot_by_zone.append(host.spot + gpu_row.spot)
            if not on_demand_by_zone and not spot_by_zone:
                result.skip(f"no {gpu_id} x {gpus} accelerator row in its zones", instance)
                continue
            on_demand, spot, composed = _min(on_demand_by_zone), _min(spot_by_zone), True
        else:
            continue  # a machine type without GPUs
        if on_demand is None and spot is None:
            result.skip("no price", instance)
            continue
        result.offers.append(
            Offer(
                provider=provider,
                instance=instance,
                gpu_id=gpu_id,
                gpus=gpus,
                vcpus=int(first.vcpus) if first.vcpus else None,
                ram_gib=first.ram_gib or None,
                region=region,
                on_demand_usd=on_demand,
                spot_usd=spot,
                composed=composed,
            )
        )
    return result


def find_vms_files(path: Path, providers: Iterable[str] = ()) -> list[tuple[Path, str]]:
    """``(file, provider)`` of every SkyPilot ``vms.csv`` under ``path`` (a catalog checkout
    such as ``catalogs/v8``, a cloud's folder, or one file); the provider is the folder name
    (``aws/vms.csv`` is AWS) unless exactly one ``providers`` is given for a single file.

    Raises :class:`CatalogError` when nothing there is a vms.csv or a provider cannot be told.
    """
    wanted = [p.strip().lower() for p in providers if p.strip()]
    if path.is_file():
        provider = wanted[0] if len(wanted) == 1 else path.parent.name.lower()
        if len(wanted) > 1 or not provider or provider in (".", ""):
            problem = "cannot tell which cloud this file prices: pass one --provider"
            raise CatalogError(str(path), None, None, problem)
        return [(path, provider)]
    if not path.is_dir():
        raise CatalogError(str(path), None, None, "no such file or directory")
    found = sorted(path.glob("vms.csv")) + sorted(path.glob("*/vms.csv"))
    found += sorted(path.glob("*/*/vms.csv"))
    files = []
    for file in found:
        provider = file.parent.name.lower()
        if file.parent == path and len(wanted) == 1:
            provider = wanted[0]
        if not wanted or provider in wanted:
            files.append((file, provider))
    if not files:
        what = f" for {', '.join(wanted)}" if wanted else ""
        problem = f"holds no SkyPilot <cloud>/vms.csv{what} (looked two levels down)"
        raise CatalogError(str(path), None, None, problem)
    return files
