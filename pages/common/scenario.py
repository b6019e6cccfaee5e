"""The scenario every page looks at, edited in the sidebar and kept in the URL.

The scenario's widgets are drawn by ``app.py`` (the main script) before the page runs, with
``bind="query-params"``: their values live in the URL, survive page switches, and a shared
link reproduces the view. Values equal to their defaults are left out of the URL, so the
default scenario's link is clean. A URL value that is not valid (a model since removed, a
negative length, a typo) is not used: the widget shows its default and a notice under it names
the parameter, the value and what is allowed (``pages.common.url_params``).

Uploaded files (a model's config.json, a request trace) cannot travel in a URL: they stay in
the session, and the sidebar says so.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import streamlit as st

from pages.common.ui import md_text
from pages.common.url_params import bound
from planner.catalog import PRECISIONS, PRICING_MODES, Catalog, ModelCard
from planner.catalog.user_files import parse_model_config
from planner.engine import DEFAULT_GPU_MEMORY_UTILIZATION, SPECULATIVE_CHOICES, EngineConfig
from planner.errors import PlannerError
from planner.input_checks import MAX_REQUEST_TOKENS, check_file_size
from planner.loads import DEFAULT_CONCURRENCY, PLAN_LOAD_KINDS
from planner.plan import DEFAULT_KV_HEADROOM
from planner.recommend.request import DISAGGREGATION_MODES, Disaggregation
from planner.workload import LengthDistribution, Workload, load_trace

SHAPES = ("fixed", "uniform", "normal", "lognormal")
TRACE_FORMATS = ("auto", "mooncake", "burstgpt", "azure", "csv")
PREFERRED_MODEL = "meta-llama/Llama-3.1-70B-Instruct"  # a 70B Llama, as in the brief

#: Session keys of uploaded files and the errors they raised.
UPLOADED_MODEL = "_uploaded_model_card"
UPLOADED_MODEL_ERROR = "_uploaded_model_error"
UPLOADED_TRACE = "_uploaded_trace"
UPLOADED_TRACE_ERROR = "_uploaded_trace_error"


#: the engines a plan can be made for (their families' names in planner.engine)
ENGINE_LABELS = {"vllm": "vLLM", "sglang": "SGLang", "tensorrt-llm": "TensorRT-LLM"}


@dataclass(frozen=True)
class LengthSpec:
    """A length distribution as the sidebar edits it: a shape, a mean and a spread."""

    shape: str
    mean: int
    spread: int

    def distribution(self) -> LengthDistribution:
        """``spread`` is the half-width of a uniform and the standard deviation otherwise."""
        return LengthDistribution.from_mean_spread(self.shape, self.mean, self.spread)


@dataclass(frozen=True)
class TraceRef:
    """An uploaded trace: where its bytes were saved and their digest (the cache key)."""

    name: str
    path: str
    digest: str
    format: str


@dataclass(frozen=True)
class Scenario:
    """Everything the Plan page asks: hashable, so cached computations can key on it."""

    model_id: str
    precisions: tuple[str, ...]
    input_len: LengthSpec
    output_len: LengthSpec
    trace: TraceRef | None
    load_mode: str  # "concurrency" (requests in flight) or "rate" (requests/s)
    load_avg: float
    load_peak: float
    slo_ttft_ms: float | None
    slo_tpot_ms: float | None
    providers: tuple[str, ...]  # empty: every provider
    regions: tuple[str, ...]  # empty: every region
    pricing: str
    utilisation: float | None  # None: average demand / capacity bought
    engine: EngineConfig = field(default_factory=EngineConfig)  # what layouts are judged at
    kv_headroom: float | None = DEFAULT_KV_HEADROOM  # peak KV share a plan may hold
    speculative: str = "auto"  # auto, off or a method (planner.perf.speculative)
    spec_accept_len: float | None = None  # mean accepted tokens a step; None: the defaults
    uploaded_model: ModelCard | None = None  # a config.json uploaded in this session
    #: prefill/decode disaggregation in the search: off, auto (both kinds) or on (only)
    disaggregation: Disaggregation = "off"

    def model_card(self, catalog: Catalog) -> ModelCard:
        """The card of the scenario's model: the uploaded config.json's or the catalog's."""
        if self.uploaded_model is not None and self.uploaded_model.hf_id == self.model_id:
            return self.uploaded_model
        return catalog.model(self.model_id)

    def catalog_with_model(self, catalog: Catalog) -> Catalog:
        """``catalog`` itself, or a shallow copy that also holds the uploaded model."""
        if self.model_id.lower() in catalog.models:
            return catalog
        card = self.model_card(catalog)
        return Catalog(
            gpus=catalog.gpus,
            instances=catalog.instances,
            prices=catalog.prices,
            models={**catalog.models, card.hf_id.lower(): card},
            measured=catalog.measured,
            owned=catalog.owned,
        )

    def describe(self) -> str:
        """The scenario in one sentence, for people who do not read sidebars."""
        if self.trace is not None:
            lengths = f"the requests of the trace {self.trace.name}"
        else:
            lengths = f"{self.input_len.mean:,} tokens in and {self.output_len.mean:,} out" + (
                " on average"
                if "lognormal" in (self.input_len.shape, self.output_len.shape)
                or self.input_len.shape != "fixed"
                or self.output_len.shape != "fixed"
                else ""
            )
        if self.load_mode == "concurrency":
            load = f"{self.load_avg:g} requests in flight on average, {self.load_peak:g} at peak"
        else:
            load = f"{self.load_avg:g} requests/s on average, {self.load_peak:g} at peak"
        slos = [
            f"p99 TTFT ≤ {self.slo_ttft_ms:,.0f} ms" if self.slo_ttft_ms else "",
            f"p99 TPOT ≤ {self.slo_tpot_ms:,.0f} ms" if self.slo_tpot_ms else "",
        ]
        slo = " and ".join(s for s in slos if s) or "no latency target"
        where = ", ".join(self.providers) if self.providers else "any provider"
        if self.regions:
            where += f" in {', '.join(self.regions)}"
        return (
            f"Serve {self.model_id} ({'/'.join(self.precisions) or 'bf16'}), {lengths}, "
            f"{load}, {slo}; {self.pricing.replace('_', ' ')} prices from {where}."
        )

    def workload_key(self) -> tuple[object, ...]:
        """What :meth:`workload` depends on (a cache key)."""
        trace = (self.trace.digest, self.trace.format) if self.trace else None
        return (self.input_len, self.output_len, trace)

    def workload(self) -> Workload:
        """The workload the planner sees (the uploaded trace's, when one is used)."""
        if self.trace is not None:
            return cached_trace(
                self.trace.path, self.trace.format, self.trace.digest, self.trace.name
            )
        return Workload(
            input_len=self.input_len.distribution(),
            output_len=self.output_len.distribution(),
        )


# A resource: the same frozen Workload object on every rerun, so what the planner memoises on
# its length distributions (sorted values, quantiles) is reused, and no unpickling of the
# trace's lengths on each rerun
@st.cache_resource(show_spinner=False, max_entries=8)
def cached_trace(path: str, fmt: str, digest: str, name: str | None = None) -> Workload:
    del digest  # part of the cache key: same path, new bytes
    return load_trace(Path(path), fmt, name=name)  # type: ignore[arg-type]


# ----- uploads --------------------------------------------------------------------------------
def _uploads_dir() -> Path:
    from pages.common.resources import settings

    directory = settings().user_data_dir / "uploads"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def _on_model_upload() -> None:
    upload = st.session_state.get("model_upload")
    st.session_state.pop(UPLOADED_MODEL_ERROR, None)
    if upload is None:
        if st.session_state.get(UPLOADED_MODEL) is not None:
            st.session_state.pop(UPLOADED_MODEL, None)
        return
    card, error = parse_config_upload(upload.getvalue(), upload.name)
    if error:
        st.session_state[UPLOADED_MODEL_ERROR] = error
        st.session_state.pop(UPLOADED_MODEL, None)
        return
    st.session_state[UPLOADED_MODEL] = card
    st.session_state["model"] = card.hf_id if card else st.session_state.get("model")


def parse_config_upload(data: bytes, name: str) -> tuple[ModelCard | None, str | None]:
    """A model card from an uploaded config.json, or the message saying why it is not one
    (the Data page's check: size, encoding, nesting, the file's name, the sizes and heads)."""
    try:
        return parse_model_config(data, name)[1], None
    except PlannerError as exc:
        return None, md_text(exc)


def _on_trace_upload() -> None:
    from pages.common.resources import settings

    upload = st.session_state.get("trace_upload")
    st.session_state.pop(UPLOADED_TRACE_ERROR, None)
    st.session_state.pop(UPLOADED_TRACE, None)
    if upload is None:
        return
    try:  # before reading the bytes: a trace larger than the setting stays unread
        check_file_size(upload.name, upload.size, settings().max_trace_mb, "SERVEWISE_MAX_TRACE_MB")
    except PlannerError as exc:
        st.session_state[UPLOADED_TRACE_ERROR] = str(exc)
        return
    data = upload.getvalue()
    digest = hashlib.sha256(data).hexdigest()[:16]
    suffix = Path(upload.name).suffix or ".csv"
    path = _uploads_dir() / f"trace-{digest}{suffix}"
    path.write_bytes(data)
    st.session_state[UPLOADED_TRACE] = (upload.name, str(path), digest)


# ----- the sidebar ----------------------------------------------------------------------------
def _model_options(catalog: Catalog) -> list[str]:
    ids = sorted((card.hf_id for card in catalog.models.values()), key=str.lower)
    uploaded: ModelCard | None = st.session_state.get(UPLOADED_MODEL)
    if uploaded is not None and uploaded.hf_id.lower() not in catalog.models:
        ids.insert(0, uploaded.hf_id)
    return ids


def _length_inputs(prefix: str, title: str, mean: int, spread: int) -> LengthSpec:
    st.markdown(f"**{title}**")
    shape = bound(
        st.selectbox,
        "Shape",
        SHAPES,
        key=f"{prefix}_shape",
        help="fixed: every request the same; uniform: mean ± spread; normal and lognormal: "
        "mean and standard deviation (lognormal has a long right tail, like real prompts).",
    )
    left, right = st.columns(2)
    mean_tokens = bound(
        left.number_input,
        "Mean (tokens)",
        min_value=1,
        max_value=1_000_000,
        value=mean,
        step=64,
        key=f"{prefix}_mean",
    )
    spread_tokens = bound(
        right.number_input,
        "Spread (tokens)",
        min_value=0,
        max_value=1_000_000,
        value=spread,
        step=64,
        key=f"{prefix}_spread",
        disabled=shape == "fixed",
        help="Half-width for uniform, standard deviation for normal and lognormal.",
    )
    return LengthSpec(str(shape), int(mean_tokens), int(spread_tokens))


def scenario_sidebar(catalog: Catalog) -> Scenario:
    """Draw the scenario's widgets in the sidebar and return what they say."""
    sb = st.sidebar
    with sb:
        st.header("Scenario")
        st.caption("Every page uses this scenario; the URL keeps it, so a link shares it.")

        # --- model
        options = _model_options(catalog)
        if not options:
            st.error("The catalog holds no model: import a config.json on the Data page.")
            model_id = ""
        else:
            default = options.index(PREFERRED_MODEL) if PREFERRED_MODEL in options else 0
            model_id = bound(st.selectbox, "Model", options, index=default, key="model")
        st.file_uploader(
            "…or upload a config.json",
            type=["json"],
            key="model_upload",
            on_change=_on_model_upload,
            help="The model's Hugging Face config.json. Kept for this session only; to keep it, "
            "import it on the Data page.",
        )
        if st.session_state.get(UPLOADED_MODEL_ERROR):
            st.warning(st.session_state[UPLOADED_MODEL_ERROR])
        precisions = bound(
            st.multiselect,
            "Weight precisions to consider",
            PRECISIONS,
            default=["bf16", "fp8"],
            key="precision",
            help="bf16/fp16: the published weights; fp8: quantised on load; int4/fp4 need a "
            "quantised checkpoint.",
        )

        # --- workload
        st.subheader("Workload")
        source = bound(
            st.segmented_control,
            "Request lengths from",
            ["distributions", "trace"],
            default="distributions",
            required=True,
            key="source",
        )
        trace: TraceRef | None = None
        if source == "trace":
            trace_format = bound(st.selectbox, "Trace format", TRACE_FORMATS, key="trace_format")
            st.file_uploader(
                "Trace file (Mooncake JSONL, BurstGPT, Azure or timestamp,input_tokens,"
                "output_tokens CSV)",
                type=["csv", "jsonl", "json"],
                key="trace_upload",
                on_change=_on_trace_upload,
            )
            saved = st.session_state.get(UPLOADED_TRACE)
            if st.session_state.get(UPLOADED_TRACE_ERROR):
                st.warning(
                    f"The trace cannot be used: {md_text(st.session_state[UPLOADED_TRACE_ERROR])}"
                )
            elif saved is None:
                st.info("No trace uploaded yet: the distributions below are used.")
            else:
                name, path, digest = saved
                trace = TraceRef(name=name, path=path, digest=digest, format=str(trace_format))
                try:
                    cached_trace(trace.path, trace.format, trace.digest, trace.name)
                except PlannerError as exc:
                    st.warning(f"The trace cannot be used: {md_text(exc)}")
                    trace = None
        input_len = _length_inputs("in", "Input (prompt) length", 2048, 0)
        output_len = _length_inputs("out", "Output (answer) length", 512, 0)

        # --- load and SLOs
        st.subheader("Load and SLOs")
        load_mode = bound(
            st.segmented_control,
            "Load given as",
            PLAN_LOAD_KINDS,
            default="concurrency",
            required=True,
            key="load",
            help="concurrency: requests in flight at once (a closed loop of users); rate: "
            "requests arriving per second.",
        )
        unit = "requests in flight" if load_mode == "concurrency" else "requests/s"
        left, right = st.columns(2)
        load_avg = bound(
            left.number_input,
            f"Average ({unit})",
            min_value=0.1,
            max_value=100_000.0,
            value=DEFAULT_CONCURRENCY / 2 if load_mode == "concurrency" else 2.0,
            step=1.0,
            key=f"avg_{load_mode}",
        )
        load_peak = bound(
            right.number_input,
            f"Peak ({unit})",
            min_value=0.1,
            max_value=100_000.0,
            value=float(DEFAULT_CONCURRENCY) if load_mode == "concurrency" else 5.0,
            step=1.0,
            key=f"peak_{load_mode}",
            help="Capacity is bought for the peak; the average decides utilisation.",
        )
        if load_peak < load_avg:
            st.warning(
                f"Peak ({load_peak:g}) is below the average ({load_avg:g}): the peak must be at "
                "least the average. Using the average as the peak."
            )
            load_peak = load_avg
        left, right = st.columns(2)
        ttft = bound(
            left.number_input,
            "p99 TTFT ≤ (ms)",
            min_value=0,
            max_value=600_000,
            value=3000,
            step=100,
            key="ttft_ms",
            help="Time to first token, 99th percentile. 0: no limit.",
        )
        tpot = bound(
            right.number_input,
            "p99 TPOT ≤ (ms)",
            min_value=0,
            max_value=10_000,
            value=100,
            step=5,
            key="tpot_ms",
            help="Time per output token after the first, 99th percentile. 0: no limit.",
        )

        # --- engine settings every layout is judged and started with
        st.subheader("Engine")
        engine = bound(
            st.segmented_control,
            "Engine",
            list(ENGINE_LABELS),
            format_func=ENGINE_LABELS.__getitem__,
            default="vllm",
            required=True,
            key="engine",
            help="The serving engine every plan is predicted, launched and deployed with.",
        )
        left, right = st.columns(2)
        gpu_util = bound(
            left.slider,
            "gpu_memory_utilization",
            min_value=0.50,
            max_value=0.98,
            value=DEFAULT_GPU_MEMORY_UTILIZATION,
            step=0.01,
            key="gpu_util",
            help="vLLM's budget: the share of the GPU it may use for weights, activations and "
            "KV cache (SGLang's mem_fraction_static). At 0.90 each engine keeps its own default, "
            "raised (up to 0.97) only for a layout that does not start at it; any other value is "
            "kept as set.",
        )
        kv_dtype = bound(
            right.segmented_control,
            "KV cache dtype",
            ["auto", "fp8"],
            default="auto",
            required=True,
            key="kv_dtype",
            help="auto: the weights' 16-bit type. fp8 halves the bytes per token.",
        )
        left, right = st.columns(2)
        max_model_len = bound(
            left.number_input,
            "max_model_len (0: the longest request)",
            min_value=0,
            max_value=MAX_REQUEST_TOKENS,
            value=0,
            step=1024,
            key="max_model_len",
            help="The context vLLM must admit (--max-model-len); layouts are judged at it.",
        )
        headroom = bound(
            right.slider,
            "KV headroom at peak (%)",
            min_value=50,
            max_value=100,
            value=round(DEFAULT_KV_HEADROOM * 100),
            step=5,
            key="kv_headroom",
            help="The most of the KV cache a plan may hold at peak; above it vLLM preempts "
            "requests. 100: the whole pool.",
        )

        left, right = st.columns(2)
        speculative = bound(
            left.selectbox,
            "Speculative decoding",
            SPECULATIVE_CHOICES,
            index=SPECULATIVE_CHOICES.index("auto"),
            key="speculative",
            help="Search plans that draft tokens and verify them in one pass: auto tries MTP "
            "where the model has the layers and EAGLE-3 where a draft is published, and n-gram "
            "(prompt lookup) for a model with neither: its acceptance is the workload's own, "
            "so verify it with a run.",
        )
        accept_len = bound(
            right.number_input,
            "Mean accepted tokens per step (0: published)",
            min_value=0.0,
            max_value=9.0,
            value=0.0,
            step=0.1,
            key="spec_accept",
            help="Tokens a speculative step yields on your workload, the bonus token "
            "included (vLLM's mean acceptance length). 0: each method's published figure.",
        )

        # --- where and what price
        st.subheader("Where and at what price")
        providers = sorted({inst.provider for inst in catalog.instances.values()})
        chosen_providers = bound(
            st.multiselect,
            "Providers",
            providers,
            key="providers",
            placeholder="All providers",
        )
        regions = sorted(
            {
                p.region
                for p in catalog.prices
                if not chosen_providers or p.provider in chosen_providers
            }
        )
        chosen_regions = bound(
            st.multiselect, "Regions", regions, key="regions", placeholder="All regions"
        )
        pricing = bound(
            st.selectbox,
            "Pricing",
            PRICING_MODES,
            key="pricing",
        )
        disaggregation = bound(
            st.selectbox,
            "Disaggregated prefill/decode",
            DISAGGREGATION_MODES,
            index=DISAGGREGATION_MODES.index("off"),
            key="disaggregation",
            help="off: aggregated replicas only; auto: separate prefill and decode pools ranked "
            "with them (MoE models, or dense ones of 8+ GPUs, on instances with a network); "
            "on: disaggregated plans only.",
        )
        manual = bound(
            st.toggle,
            "Set the observed utilisation",
            key="util_manual",
            help="Off: utilisation is the average demand over the capacity bought for the peak.",
        )
        utilisation = bound(
            st.slider,
            "Observed utilisation (%)",
            min_value=5,
            max_value=100,
            value=60,
            step=5,
            key="util",
            disabled=not manual,
            help="Share of the bought capacity doing useful work on average. A GPU at 20% "
            "costs 5x per token what it costs at 100%.",
        )

    return Scenario(
        model_id=str(model_id),
        precisions=tuple(precisions),
        input_len=input_len,
        output_len=output_len,
        trace=trace,
        load_mode=str(load_mode),
        load_avg=float(load_avg),
        load_peak=float(load_peak),
        slo_ttft_ms=float(ttft) or None,
        slo_tpot_ms=float(tpot) or None,
        providers=tuple(chosen_providers),
        regions=tuple(chosen_regions),
        pricing=str(pricing),
        utilisation=utilisation / 100 if manual else None,
        engine=EngineConfig.of(
            engine=str(engine or "vllm"),
            # the default states no share: each engine starts at its own default, raised only
            # for a layout that does not start there (planner.recommend.startup)
            **(
                {}
                if float(gpu_util) == DEFAULT_GPU_MEMORY_UTILIZATION
                else {"gpu_memory_utilization": float(gpu_util)}
            ),
            kv_cache_dtype=str(kv_dtype),
            max_model_len=int(max_model_len) or None,
        ),
        kv_headroom=headroom / 100 if headroom < 100 else None,
        speculative=str(speculative or "auto"),
        spec_accept_len=float(accept_len) if accept_len and accept_len >= 1 else None,
        uploaded_model=st.session_state.get(UPLOADED_MODEL),
        disaggregation=cast(Disaggregation, str(disaggregation)),
    )


SCENARIO_KEY = "_scenario"


def current_scenario() -> Scenario:
    """The scenario ``app.py`` read from the sidebar for this run."""
    scenario = st.session_state.get(SCENARIO_KEY)
    if scenario is None:  # a page run on its own (never in the app)
        raise RuntimeError("run the dashboard with `streamlit run app.py`")
    return scenario
