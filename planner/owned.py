"""Own or rent: what a server a team buys costs an hour, the energy every plan draws, when
owning pays back, and the cheapest mix of owned, committed and rented capacity for a day.

The inputs are rows of ``owned_costs.csv`` (:class:`~planner.catalog.schema.OwnedServer`, each
with its source and date; a user's file overrides a row). Formulas:

- **Power at utilisation u** (0..1, the share of the time the server is busy):
  ``P(u) = P_idle + (P_max - P_idle) x u`` in kW per server; ``P_max`` is a published measured
  draw where there is one, else the vendor's rated maximum. Without a published idle draw
  ``P_idle = P_max`` (the server is costed at full draw whatever its load: an upper bound).
- **Capital**: capex ``C = server price x (1 + network/storage share)``; residual value
  ``R = C x residual %``; over ``n`` years at cost of capital ``r`` the yearly payment that
  repays C less the present value of R is ``(C - R / (1 + r)^n) x r / (1 - (1 + r)^-n)``
  (the capital recovery factor; ``(C - R) / n`` at r = 0). Per hour: / 8,760.
- **Energy** $/h = ``P(u) x PUE x $/kWh``.
- **Colocation** $/h = ``P_max x $/kW-month x 12 / 8,760`` (a rack is billed on the power
  provisioned for the server, not on what it draws).
- **Operations** $/h = ``$/server-month x 12 / 8,760``.
- **Hourly cost** = capital + energy + colocation + operations. The catalog lists each priced
  platform as an instance of the provider ``owned`` (region ``colocation``, pricing ``owned``)
  at its hourly cost at full draw (:data:`CATALOG_UTILISATION`), so the search ranks owned
  servers beside rented ones under the same SLOs with the same arithmetic.
- **Energy of a plan** (owned or rented): IT power x PUE. Owned: ``P(u)`` of its servers and the
  row's PUE. Rented: the GPUs' board power (``tdp_w``, no idle draw is published, so at any
  load) at the PUE of :data:`RENTED_PUE` (providers publish none per instance). kWh per million
  output tokens = facility kW / (output tokens/s x 3,600) x 1e6; J per output token =
  facility W / (output tokens/s).
- **Break-even**: owning ``N`` servers costs ``N x C`` at month 0 and ``N x (energy +
  colocation + operations) x 730 h + N x C x r / 12`` a month (the capex's cost of capital);
  renting the same service costs its monthly bill. Owning is cheaper from month
  ``m* = capex / (rent - running - capex x r / 12)``; never when the denominator is <= 0.
  Residual value is not credited (an owner who sells earlier breaks even sooner).
- **Commitment mix** over a day's demand curve (requests/s each hour): ``b`` replicas of a
  committed option (owned or a 1-/3-year reservation) run all day (the spares with them), the
  rest of each hour's demand is rented by the hour (on-demand or spot):
  ``cost(b) = (b + spares) x 24 x p_commit + sum_h ceil(max(0, d_h - b x c_commit) / c_rent)
  x p_rent``; the cheapest ``b`` and pair of options wins.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from planner.catalog.loader import OWNED_FILE, Catalog
from planner.catalog.schema import Instance, OwnedServer, Price
from planner.cost import HOURS_PER_MONTH, GpuEconomics
from planner.errors import CatalogError, InvalidInputError

if TYPE_CHECKING:  # the search imports this module's catalog side; plans come typed
    from planner.recommend.request import Recommendation

HOURS_PER_YEAR = 8_760.0
OWNED_PROVIDER = "owned"
OWNED_REGION = "colocation"
OWNED_PRICING: Literal["owned"] = "owned"
#: utilisation the catalog's hourly price of an owned server is computed at (full draw: the
#: upper bound of its energy cost)
CATALOG_UTILISATION = 1.0
#: PUE assumed for rented GPUs: providers publish no PUE per instance, so the industry average
#: of Uptime Institute's Global Data Center Survey 2023 (1.58, flat for four years) is used
RENTED_PUE = 1.58
RENTED_PUE_SOURCE = (
    "Uptime Institute Global Data Center Survey 2023 (average PUE 1.58), assumed for every "
    "rented plan: providers publish no PUE per instance"
)
#: pricing modes a commitment mix may commit to for the whole day
COMMITTED_PRICING = ("owned", "reserved_1y", "reserved_3y")
#: pricing modes it may rent by the hour
RENTED_PRICING = ("on_demand", "spot")


def _fraction(field: str, value: float) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and 0 <= value <= 1):
        raise InvalidInputError(field, value, "a fraction in [0, 1]")


def _non_negative(field: str, value: float) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
        raise InvalidInputError(field, value, "a number >= 0")


# ----- one server ---------------------------------------------------------------------------
class OwnedHourlyCost(BaseModel):
    """What one owned server costs an hour at one utilisation, by part (USD)."""

    model_config = ConfigDict(frozen=True)

    platform: str
    utilisation: float
    power_kw: float = Field(description="IT draw of the server at the utilisation")
    capex_usd: float
    capital_usd_per_hour: float
    energy_usd_per_hour: float
    colocation_usd_per_hour: float
    ops_usd_per_hour: float
    usd_per_hour: float

    @property
    def running_usd_per_hour(self) -> float:
        """What it costs an hour once bought: energy, colocation and operations."""
        return self.energy_usd_per_hour + self.colocation_usd_per_hour + self.ops_usd_per_hour


def capex_usd(server: OwnedServer) -> float:
    """Server price x (1 + network and storage share)."""
    if server.server_usd is None:
        raise InvalidInputError(
            f"{OWNED_FILE}[{server.platform}].server_usd", None, "a server price in USD"
        )
    return server.server_usd * (1.0 + server.network_storage_pct / 100.0)


def capital_recovery_factor(rate: float, years: float) -> float:
    """r / (1 - (1 + r)^-n): the yearly payment per dollar repaid over n years (1 / n at 0)."""
    _non_negative("cost_of_capital", rate)
    if not (math.isfinite(years) and years > 0):
        raise InvalidInputError("depreciation_years", years, "years > 0")
    if rate == 0:
        return 1.0 / years
    # 1 - (1 + r)^-n as -expm1(-n log1p(r)): exact for a rate near zero too
    return rate / -math.expm1(-years * math.log1p(rate))


def capital_usd_per_year(server: OwnedServer) -> float:
    """(C - R / (1 + r)^n) x r / (1 - (1 + r)^-n) with R = C x residual %."""
    capex = capex_usd(server)
    rate = server.cost_of_capital_pct / 100.0
    years = server.depreciation_years
    residual = capex * server.residual_value_pct / 100.0
    return (capex - residual / (1.0 + rate) ** years) * capital_recovery_factor(rate, years)


def power_kw(server: OwnedServer, utilisation: float) -> float:
    """P(u) = P_idle + (P_max - P_idle) x u; P_idle = P_max where no idle draw is published."""
    _fraction("utilisation", utilisation)
    idle = server.power_idle_kw if server.power_idle_kw is not None else server.power_max_kw
    return idle + (server.power_max_kw - idle) * utilisation


def hourly_cost(
    server: OwnedServer,
    utilisation: float = CATALOG_UTILISATION,
    *,
    usd_per_kwh: float | None = None,
) -> OwnedHourlyCost:
    """The server's cost an hour at ``utilisation`` (``usd_per_kwh`` replaces the row's)."""
    price = server.usd_per_kwh if usd_per_kwh is None else usd_per_kwh
    _non_negative("usd_per_kwh", price)
    draw = power_kw(server, utilisation)
    capital = capital_usd_per_year(server) / HOURS_PER_YEAR
    energy = draw * server.pue * price
    colocation = server.power_max_kw * server.colocation_usd_per_kw_month * 12.0 / HOURS_PER_YEAR
    ops = server.ops_usd_per_server_month * 12.0 / HOURS_PER_YEAR
    return OwnedHourlyCost(
        platform=server.platform,
        utilisation=utilisation,
        power_kw=draw,
        capex_usd=capex_usd(server),
        capital_usd_per_hour=capital,
        energy_usd_per_hour=energy,
        colocation_usd_per_hour=colocation,
        ops_usd_per_hour=ops,
        usd_per_hour=capital + energy + colocation + ops,
    )


def hourly_cost_rows(
    server: OwnedServer, utilisation: float = CATALOG_UTILISATION
) -> list[dict[str, Any]]:
    """The server's hourly cost part by part (:func:`hourly_cost`), each part with the row's
    figures it is computed from and the row's sources: the table behind an owned price."""
    cost = hourly_cost(server, utilisation)
    idle = "" if server.power_idle_kw is not None else " (no idle draw published: full draw)"
    parts = [
        (
            "capital",
            cost.capital_usd_per_hour,
            f"USD {server.server_usd or 0:,.0f} x (1 + {server.network_storage_pct:g}% network "
            f"and storage) = USD {cost.capex_usd:,.0f}, recovered over "
            f"{server.depreciation_years:g} years at {server.cost_of_capital_pct:g}% cost of "
            f"capital less a {server.residual_value_pct:g}% residual value",
        ),
        (
            "energy",
            cost.energy_usd_per_hour,
            f"{cost.power_kw:g} kW at {utilisation:.0%} busy{idle} x PUE {server.pue:g} x "
            f"USD {server.usd_per_kwh:g}/kWh",
        ),
        (
            "colocation",
            cost.colocation_usd_per_hour,
            f"{server.power_max_kw:g} kW provisioned x USD "
            f"{server.colocation_usd_per_kw_month:g} per kW-month",
        ),
        (
            "operations",
            cost.ops_usd_per_hour,
            f"USD {server.ops_usd_per_server_month:,.2f} a server-month",
        ),
        ("total", cost.usd_per_hour, f"one {server.platform} server ({server.gpus} GPUs)"),
    ]
    source = owned_source(server)
    return [
        {
            "part": part,
            "usd_per_hour": usd,
            "usd_per_gpu_hour": usd / server.gpus,
            "basis": basis,
            "source": source,
            "as_of": server.as_of.isoformat(),
        }
        for part, usd, basis in parts
    ]


def owned_assumptions(server: OwnedServer) -> str:
    """The owned-cost inputs of ``server`` on one line and where they come from on a second."""
    who = "your own" if server.origin == "user" else "embedded"
    return (
        f"USD {server.server_usd or 0:,.0f} + {server.network_storage_pct:g}% network/storage, "
        f"{server.depreciation_years:g} years, {server.residual_value_pct:g}% residual, "
        f"{server.cost_of_capital_pct:g}% cost of capital, {server.power_max_kw:g} kW x PUE "
        f"{server.pue:g} x USD {server.usd_per_kwh:g}/kWh, USD "
        f"{server.colocation_usd_per_kw_month:g}/kW-month, USD "
        f"{server.ops_usd_per_server_month:,.0f}/month operations\n{who} {OWNED_FILE} row "
        f"'{server.platform}', as of {server.as_of.isoformat()}; every figure's source in the "
        "owned-server table and the exports"
    )


def owned_source(server: OwnedServer) -> str:
    """Where an owned price comes from, marking a user's own row as theirs."""
    who = "your own" if server.origin == "user" else "embedded"
    return f"owned-cost model over the {who} {OWNED_FILE} row '{server.platform}': {server.source}"


def add_owned_servers(catalog: Catalog, utilisation: float = CATALOG_UTILISATION) -> None:
    """List every priced platform of ``catalog.owned`` as an instance of the provider
    ``owned`` with its hourly cost at ``utilisation`` (pricing ``owned``, region
    ``colocation``), replacing what an earlier call listed. Unpriced platforms stay out."""
    catalog.instances = {k: v for k, v in catalog.instances.items() if v.provider != OWNED_PROVIDER}
    prices = [p for p in catalog.prices if p.provider != OWNED_PROVIDER]
    for server in catalog.owned.values():
        if server.gpu_id not in catalog.gpus:
            raise CatalogError(
                OWNED_FILE, None, "gpu_id", f"unknown GPU {server.gpu_id!r}; known: "
                f"{sorted(catalog.gpus)}"
            )  # fmt: skip
        if server.server_usd is None:
            continue
        if server.instance in catalog.instances:
            raise CatalogError(
                OWNED_FILE, None, "platform", f"{server.instance} is already a rented instance"
            )
        catalog.instances[server.instance] = Instance(
            provider=OWNED_PROVIDER,
            instance=server.instance,
            gpu_id=server.gpu_id,
            gpus=server.gpus,
            gpu_link=server.gpu_link,
            gpu_link_bw_gbps=server.gpu_link_bw_gbps,
            network_gbps=server.network_gbps,
            source=owned_source(server),
            as_of=server.as_of,
            notes="an owned server in a colocation rack (planner.owned)",
        )
        prices.append(
            Price(
                provider=OWNED_PROVIDER,
                instance=server.instance,
                region=OWNED_REGION,
                pricing=OWNED_PRICING,
                usd_per_hour=hourly_cost(server, utilisation).usd_per_hour,
                source=owned_source(server),
                as_of=server.as_of,
                notes=f"at {utilisation:.0%} utilisation (power at full draw)",
            )
        )
    catalog.prices = prices


def owned_server(catalog: Catalog, instance: str) -> OwnedServer | None:
    """The owned platform behind ``instance`` (None for a rented instance)."""
    for server in catalog.owned.values():
        if server.instance == instance:
            return server
    return None


# ----- energy of a plan -----------------------------------------------------------------------
class PlanEnergy(BaseModel):
    """The energy a deployment draws serving its load."""

    model_config = ConfigDict(frozen=True)

    it_power_kw: float = Field(description="servers (owned) or GPU boards (rented) at the load")
    pue: float
    facility_power_kw: float
    kwh_per_million_output_tokens: float
    joules_per_output_token: float
    kwh_per_month: float
    basis: str = Field(description="how the power and the PUE were found")


def deployment_energy(
    catalog: Catalog,
    instance: str,
    instances_total: int,
    utilisation: float,
    output_tokens_per_s: float,
) -> PlanEnergy | None:
    """Energy of ``instances_total`` x ``instance`` at ``utilisation`` serving
    ``output_tokens_per_s`` (served, not peak); None when no power figure is known."""
    _fraction("utilisation", utilisation)
    if not (math.isfinite(output_tokens_per_s) and output_tokens_per_s > 0):
        raise InvalidInputError("output_tokens_per_s", output_tokens_per_s, "tokens/s > 0")
    server = owned_server(catalog, instance)
    if server is not None:
        it_kw = power_kw(server, utilisation) * instances_total
        pue = server.pue
        idle = "its idle draw" if server.power_idle_kw is not None else "no idle draw published"
        basis = f"owned server draw P(u) x {instances_total} ({idle}) x its PUE {pue:g}"
    else:
        inst = catalog.instance(instance)
        tdp_w = catalog.gpu(inst.gpu_id).tdp_w
        if tdp_w is None:
            return None
        it_kw = tdp_w / 1000.0 * inst.gpus * instances_total
        pue = RENTED_PUE
        basis = (
            f"{inst.gpus * instances_total} x {inst.gpu_id} board power {tdp_w:g} W (no idle "
            f"draw published: at any load; host excluded) x PUE {pue:g} ({RENTED_PUE_SOURCE})"
        )
    facility_kw = it_kw * pue
    return PlanEnergy(
        it_power_kw=it_kw,
        pue=pue,
        facility_power_kw=facility_kw,
        kwh_per_million_output_tokens=facility_kw / (output_tokens_per_s * 3600.0) * 1e6,
        joules_per_output_token=facility_kw * 1000.0 / output_tokens_per_s,
        kwh_per_month=facility_kw * HOURS_PER_MONTH,
        basis=basis,
    )


# ----- break-even ----------------------------------------------------------------------------
def break_even_month(
    capex_usd: float,
    running_usd_per_month: float,
    rent_usd_per_month: float,
    cost_of_capital_pct: float = 0.0,
) -> float | None:
    """m* = capex / (rent - running - capex x r / 12): the month from which owning (capex at
    month 0, then running costs and the capex's cost of capital) has cost less than renting;
    None when renting is never dearer."""
    for name, value in (
        ("capex_usd", capex_usd),
        ("running_usd_per_month", running_usd_per_month),
        ("rent_usd_per_month", rent_usd_per_month),
        ("cost_of_capital_pct", cost_of_capital_pct),
    ):
        _non_negative(name, value)
    saving = rent_usd_per_month - running_usd_per_month - capex_usd * cost_of_capital_pct / 1200
    if saving <= 0:
        return None
    return capex_usd / saving


class OwnedFleet(BaseModel):
    """``servers`` x one owned platform at a utilisation: what it costs up front and a month."""

    model_config = ConfigDict(frozen=True)

    platform: str
    servers: int
    utilisation: float
    capex_usd: float
    running_usd_per_month: float
    cost_of_capital_pct: float

    def break_even(self, rent_usd_per_month: float) -> float | None:
        return break_even_month(
            self.capex_usd, self.running_usd_per_month, rent_usd_per_month,
            self.cost_of_capital_pct,
        )  # fmt: skip


def owned_fleet(
    server: OwnedServer, servers: int, utilisation: float, *, usd_per_kwh: float | None = None
) -> OwnedFleet:
    if not isinstance(servers, int) or servers < 1:
        raise InvalidInputError("servers", servers, "an integer >= 1")
    cost = hourly_cost(server, utilisation, usd_per_kwh=usd_per_kwh)
    return OwnedFleet(
        platform=server.platform,
        servers=servers,
        utilisation=utilisation,
        capex_usd=cost.capex_usd * servers,
        running_usd_per_month=cost.running_usd_per_hour * HOURS_PER_MONTH * servers,
        cost_of_capital_pct=server.cost_of_capital_pct,
    )


def break_even_grid(
    server: OwnedServer,
    servers: int,
    rent_usd_per_month: float,
    utilisation_now: float,
    utilisations: Iterable[float],
    usd_per_kwh_values: Iterable[float],
) -> list[dict[str, float | None]]:
    """Break-even month of the fleet against one rented option as the load and the price of
    electricity move: at utilisation u the owned servers draw P(u) and the same work rented
    costs ``rent x u / utilisation_now`` (renting scales with the work; owning does not)."""
    _fraction("utilisation_now", utilisation_now)
    if utilisation_now == 0:
        raise InvalidInputError("utilisation_now", utilisation_now, "a fraction in (0, 1]")
    rows: list[dict[str, float | None]] = []
    kwh_prices = list(usd_per_kwh_values)
    for u in utilisations:
        for price in kwh_prices:
            fleet = owned_fleet(server, servers, u, usd_per_kwh=price)
            rows.append(
                {
                    "utilisation": u,
                    "usd_per_kwh": price,
                    "break_even_months": fleet.break_even(rent_usd_per_month * u / utilisation_now),
                }
            )
    return rows


# ----- the commitment mix ---------------------------------------------------------------------
class MixOption(BaseModel):
    """A way to buy replicas of a plan: its price per replica-hour and what one carries."""

    model_config = ConfigDict(frozen=True)

    name: str
    pricing: str
    usd_per_replica_hour: float = Field(gt=0, allow_inf_nan=False)
    replica_rps: float = Field(gt=0, allow_inf_nan=False)

    @property
    def committed(self) -> bool:
        return self.pricing in COMMITTED_PRICING


class CommitmentMix(BaseModel):
    """The cheapest way to serve a day's demand: a committed base and a rented peak."""

    model_config = ConfigDict(frozen=True)

    committed: MixOption | None
    committed_replicas: int = Field(description="always on, spares included")
    rented: MixOption | None
    rented_replica_hours: int = Field(description="a day's rented replica-hours")
    usd_per_day: float
    usd_per_month: float
    hourly: list[dict[str, float]]
    assumptions: list[str]


def _replicas(demand_rps: float, replica_rps: float) -> int:
    return math.ceil(max(0.0, demand_rps) / replica_rps - 1e-9)


def _mix_cost(
    demand: Sequence[float],
    base: int,
    spares: int,
    commit: MixOption | None,
    rent: MixOption | None,
) -> tuple[float, int]:
    hours = len(demand)
    always_on = base + spares
    if commit is not None:
        cost = always_on * hours * commit.usd_per_replica_hour
        covered = base * commit.replica_rps
    else:
        assert rent is not None
        cost = spares * hours * rent.usd_per_replica_hour
        covered = 0.0
    rented_hours = 0
    for rps in demand:
        left = rps - covered
        if left > 1e-12:
            if rent is None:
                return math.inf, 0
            n = _replicas(left, rent.replica_rps)
            rented_hours += n
            cost += n * rent.usd_per_replica_hour
    return cost, rented_hours


def cheapest_mix(
    demand_rps: Sequence[float],
    options: Sequence[MixOption],
    *,
    spare_replicas: int = 0,
    hours_per_month: float = HOURS_PER_MONTH,
) -> CommitmentMix:
    """The cheapest committed base and rented peak for ``demand_rps`` (one value an hour of a
    day), searched over every pair of options and every base size (see the module's formula)."""
    demand = [float(d) for d in demand_rps]
    if not demand or any(not math.isfinite(d) or d < 0 for d in demand):
        raise InvalidInputError("demand_rps", demand_rps, "requests/s >= 0, one value an hour")
    if not isinstance(spare_replicas, int) or spare_replicas < 0:
        raise InvalidInputError("spare_replicas", spare_replicas, "an integer >= 0")
    commits = [o for o in options if o.committed]
    rents = [o for o in options if not o.committed]
    if not commits and not rents:
        raise InvalidInputError("options", [], "at least one way to buy replicas")
    best: tuple[float, int, MixOption | None, int, MixOption | None] | None = None
    for commit in [None, *commits]:
        for rent in [None, *rents]:
            if commit is None and rent is None:
                continue
            if commit is None:
                bases = [0]
            else:
                top = max(_replicas(d, commit.replica_rps) for d in demand)
                bases = list(range(top + 1)) if rent is not None else [top]
            for base in bases:
                cost, rented_hours = _mix_cost(demand, base, spare_replicas, commit, rent)
                if best is None or cost < best[0] - 1e-9:
                    best = (cost, base, commit, rented_hours, rent)
    assert best is not None
    cost, base, commit, rented_hours, rent = best
    covered = base * commit.replica_rps if commit else 0.0
    hourly = [
        {
            "hour": float(h),
            "requests_per_s": d,
            "committed_rps": min(d, covered),
            "rented_rps": max(0.0, d - covered),
            "rented_replicas": float(
                _replicas(d - covered, rent.replica_rps) if rent and d > covered else 0
            ),
        }
        for h, d in enumerate(demand)
    ]
    per_day = cost * 24.0 / len(demand)
    assumptions = [
        f"demand: {len(demand)} hourly averages of a day, repeated every day of a "
        f"{hours_per_month:g}-hour month",
        "committed replicas (owned servers or 1-/3-year reservations) run and are paid for "
        "every hour; spare replicas are committed too",
        "rented replicas are started for the hours the committed base cannot carry and "
        "billed by the whole hour (on-demand, or spot where allowed: interruptions not priced)",
        "each replica carries the requests/s its plan was predicted to sustain inside the SLOs",
        "owned servers are priced with planner.owned's hourly cost (capital recovered over the "
        "depreciation years at the cost of capital, energy at full draw, colocation, operations)",
    ]
    return CommitmentMix(
        committed=commit,
        committed_replicas=(base + spare_replicas) if commit else 0,
        rented=rent,
        rented_replica_hours=rented_hours,
        usd_per_day=per_day,
        usd_per_month=per_day * hours_per_month / 24.0,
        hourly=hourly,
        assumptions=assumptions,
    )


def usd_per_replica_hour(rec: Recommendation) -> float:
    """One replica's share of a plan's bill: its price x instances a group / replicas a group."""
    return rec.usd_per_hour / rec.instances_total * rec.nodes / max(rec.dp, 1)


def mix_options(catalog: Catalog, recs: Iterable[Recommendation]) -> list[MixOption]:
    """Every way to buy replicas of the given plans: each at its own price, and a rented plan
    also at the other pricing modes the catalog lists for its instance and region (its
    replica-hour price scaled by the ratio of the instance prices)."""
    options: list[MixOption] = []
    seen: set[tuple[str, str]] = set()
    for rec in recs:
        base = usd_per_replica_hour(rec)
        own_price = rec.plan.price.usd_per_hour if rec.plan.price else None
        pricings = [rec.pricing]
        if rec.provider != OWNED_PROVIDER:
            pricings += [
                p.pricing
                for p in catalog.prices_for(rec.instance, region=rec.region)
                if p.pricing != rec.pricing
            ]
        for pricing in pricings:
            key = (rec.label + rec.region, pricing)
            if key in seen:
                continue
            seen.add(key)
            price = base
            if pricing != rec.pricing and own_price:
                listed = catalog.prices_for(rec.instance, region=rec.region, pricing=pricing)
                price = base * min(p.usd_per_hour for p in listed) / own_price
            options.append(
                MixOption(
                    name=f"{rec.label} ({rec.region}, {pricing.replace('_', ' ')})",
                    pricing=pricing,
                    usd_per_replica_hour=price,
                    replica_rps=rec.max_rps_per_replica,
                )
            )
    return options


# ----- break-even of a ranking -----------------------------------------------------------------
#: electricity prices ($/kWh) the break-even is also shown at, beside each row's own: what-ifs
#: spanning cheap industrial power to expensive retail power, not sourced figures
WHAT_IF_USD_PER_KWH = (0.05, 0.15, 0.30)


def break_even_options(
    catalog: Catalog, ranked: Sequence[Recommendation], limit: int = 8
) -> tuple[Recommendation | None, list[dict[str, Any]]]:
    """The cheapest owned plan of ``ranked`` and, for each of the ``limit`` cheapest rented
    plans serving the same demand, the month from which owning it has cost less (its capex,
    running costs at its utilisation and cost of capital against the rented monthly bill)."""
    owned = next((r for r in ranked if r.provider == OWNED_PROVIDER), None)
    server = owned_server(catalog, owned.instance) if owned else None
    if owned is None or server is None:
        return None, []
    fleet = owned_fleet(server, owned.instances_total, owned.utilisation)
    rows: list[dict[str, Any]] = []
    for rec in ranked:
        if rec.provider == OWNED_PROVIDER:
            continue
        rows.append(
            {
                "option": f"{rec.label} ({rec.provider}, {rec.region}, "
                f"{rec.pricing.replace('_', ' ')})",
                "rent_usd_per_month": rec.monthly_usd,
                "owned_servers": fleet.servers,
                "owned_capex_usd": fleet.capex_usd,
                "owned_running_usd_per_month": fleet.running_usd_per_month,
                "cost_of_capital_pct": fleet.cost_of_capital_pct,
                "break_even_months": fleet.break_even(rec.monthly_usd),
                "owned_inputs": "user" if server.origin == "user" else "embedded",
            }
        )
        if len(rows) >= limit:
            break
    return owned, rows


def break_even_sensitivity(
    catalog: Catalog, owned: Recommendation, rent_usd_per_month: float
) -> list[dict[str, float | None]]:
    """:func:`break_even_grid` of an owned plan against one rented bill, from 10 % to 100 %
    utilisation, at the row's electricity price and :data:`WHAT_IF_USD_PER_KWH`."""
    server = owned_server(catalog, owned.instance)
    if server is None:
        raise InvalidInputError("owned.instance", owned.instance, "an owned server's instance")
    prices = sorted({server.usd_per_kwh, *WHAT_IF_USD_PER_KWH})
    return break_even_grid(
        server,
        owned.instances_total,
        rent_usd_per_month,
        owned.utilisation,
        [u / 10 for u in range(1, 11)],
        prices,
    )


# ----- GPU economics, owned against rented ------------------------------------------------------
def owned_vs_rented(
    rented: Sequence[GpuEconomics],
    owned: Sequence[GpuEconomics],
    ranked: Sequence[Recommendation] = (),
    *,
    catalog: Catalog | None = None,
) -> list[dict[str, Any]]:
    """Per GPU with an owned server: $/dense BF16 TFLOP-hour owned (the server's hourly cost
    at full draw / its GPUs) and rented (the GPU's cheapest rented instance in ``rented``), and
    the cheapest $/M output tokens of ``ranked`` owned and rented on that GPU (None where the
    ranking has no such plan); with ``catalog``, where the owned cost comes from."""
    rented_by_gpu = {e.gpu_id: e for e in rented}
    rows: list[dict[str, Any]] = []
    for own in owned:
        rent = rented_by_gpu.get(own.gpu_id)
        plans = [r for r in ranked if r.gpu == own.gpu_id]
        owned_plans = [r.usd_per_million_output_tokens for r in plans if r.provider == "owned"]
        rented_plans = [r.usd_per_million_output_tokens for r in plans if r.provider != "owned"]
        rows.append(
            {
                "gpu": own.gpu_id,
                "owned_usd_per_gpu_hour": own.usd_per_gpu_hour,
                "rented_usd_per_gpu_hour": rent.usd_per_gpu_hour if rent else None,
                "rented_instance": rent.instance if rent else None,
                "owned_usd_per_bf16_tflop_hour": own.usd_per_dense_tflop_hour.get("bf16"),
                "rented_usd_per_bf16_tflop_hour": (
                    rent.usd_per_dense_tflop_hour.get("bf16") if rent else None
                ),
                "owned_usd_per_m_output": min(owned_plans) if owned_plans else None,
                "rented_usd_per_m_output": min(rented_plans) if rented_plans else None,
                "owned_instance": own.instance,
            }
        )
        server = owned_server(catalog, own.instance) if catalog else None
        if server is not None:
            rows[-1]["owned_source"] = owned_source(server)
    return rows
