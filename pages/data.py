"""Data: the catalog with its sources and dates; the user's own prices, GPUs and models; the
run files that ingestion quarantined."""

from __future__ import annotations

from datetime import date

import pandas as pd
import streamlit as st

from pages.common.export import ExportSection, export_menu
from pages.common.navigation import ensure_app_navigation
from pages.common.resources import get_catalog, get_store, runs_generation, settings
from pages.common.runs_folder import ingestion_notice, quarantine_section
from pages.common.ui import md_text, planner_errors
from pages.common.url_params import bound
from planner.catalog import Catalog
from planner.catalog.refresh import (
    DEFAULT_THRESHOLD_PCT,
    apply_refresh,
    list_refreshes,
    plan_refresh_from_uploads,
    undo_refresh,
)
from planner.catalog.user_files import (
    TABLES,
    parse_model_config,
    save_model_config,
    save_staged,
    stage_table_upload,
    template_csv,
    user_files,
)
from planner.commands.catalog import catalog_rows
from planner.errors import PlannerError

TABLE_TITLES = {
    "gpus": "GPUs",
    "instances": "Instances",
    "prices": "Prices",
    "history": "Price history",
    "models": "Models",
    "measured": "Measured results",
    "owned": "Owned servers",
}
SKYPILOT_CLOUDS = ["aws", "gcp", "azure", "oci", "lambda", "runpod", "nebius", "vast", "other"]
FIRST_COLUMNS = {
    "models": ["hf_id", "name", "origin", "total_params", "active_params"],
    "measured": ["model", "gpu", "num_gpus", "tp", "pp", "engine", "engine_version"],
}


@st.cache_data(show_spinner=False, max_entries=32)
def table_frame(
    table: str, catalog_key: str, today: date, stale_days: int, _catalog: Catalog
) -> pd.DataFrame:
    del catalog_key  # cache key: the catalog's files (a broken user file: the embedded one's)
    frame = pd.DataFrame(catalog_rows(table, today=today, stale_days=stale_days, catalog=_catalog))
    if frame.empty:
        return frame
    first = [c for c in FIRST_COLUMNS.get(table, []) if c in frame]
    last = [c for c in ("source", "source_ref", "as_of", "notes") if c in frame]
    middle = [c for c in frame.columns if c not in first and c not in last]
    return frame[first + middle + last]


ensure_app_navigation()
ref = get_catalog()
st.title("Data")
st.caption(
    "Everything the planner knows, with where each figure comes from and when. Your own rows "
    f"(in {md_text(ref.user_dir)}) are layered on top: a row with the same key replaces the "
    "embedded one."
)

if ref.catalog.load_notes:
    left_out = sum("left out" in note.problem for note in ref.catalog.load_notes)
    st.warning(
        f"Your catalog files: {left_out} rows left out, "
        f"{len(ref.catalog.load_notes) - left_out} other notes "
        "(`python -m planner catalog check` lists them too):\n\n"
        + "\n".join(f"- {md_text(note)}" for note in ref.catalog.load_notes[:50])
        + (
            f"\n- ... and {len(ref.catalog.load_notes) - 50} more"
            if len(ref.catalog.load_notes) > 50
            else ""
        ),
        icon=":material/rule:",
    )
stale_days = int(
    st.number_input(
        "A price is stale after (days)",
        min_value=1,
        value=settings().price_stale_days,
        key="stale_days",
        help="Default from SERVEWISE_PRICE_STALE_DAYS (90).",
    )
)
frames = {
    TABLE_TITLES[t]: table_frame(t, ref.key, date.today(), stale_days, ref.catalog)
    for t in TABLE_TITLES
}
stale_count = int(frames["Prices"]["stale"].sum()) if not frames["Prices"].empty else 0
if stale_count:
    st.badge(
        f"{stale_count} prices older than {stale_days} days",
        icon=":material/schedule:",
        color="orange",
    )
export_menu(
    "Data",
    [ExportSection(name, table=frame) for name, frame in frames.items()],
    frames,
)
tabs = st.tabs([f"{name} ({len(frame)})" for name, frame in frames.items()])
for tab, (name, frame) in zip(tabs, frames.items(), strict=True):
    with tab:
        if frame.empty:
            st.warning(f"The catalog has no {name.lower()}.")
            continue
        st.dataframe(
            frame,
            hide_index=True,
            column_config={
                "source": st.column_config.TextColumn("source", width="large"),
                "as_of": st.column_config.TextColumn("as of"),
                "usd_per_hour": st.column_config.NumberColumn("$/hour", format="$%.4f"),
                "age_days": st.column_config.NumberColumn("age (days)", format="%d"),
                "stale": st.column_config.CheckboxColumn("stale", help="older than the setting"),
                "kv_bytes_per_token_bf16": st.column_config.NumberColumn(
                    "KV bytes/token (bf16)", format="%d"
                ),
            },
            key=f"table_{name}",
        )

st.header("Add or override prices, instances and GPUs")
left, right = st.columns([1, 2])
with left:
    table = bound(
        st.selectbox,
        "Table",
        list(TABLES),
        key="data_table",
    )
    st.download_button(
        f"Empty {TABLES[table].file} with its columns",
        data=template_csv(table),
        file_name=TABLES[table].file,
        mime="text/csv",
        on_click="ignore",
    )
    st.caption("Columns and units: `data/README.md`. Blank cells mean unknown, never zero.")
with right:
    upload = st.file_uploader(
        f"A CSV of {TABLE_TITLES[table].lower()}", type=["csv"], key="csv_upload"
    )
    if upload is not None:
        staged = None
        with planner_errors(f"{upload.name} was not added"):
            staged = stage_table_upload(
                ref.user_dir, table, upload.getvalue(), upload.name, ref.catalog
            )
        if staged is not None:
            st.success(
                f"{md_text(upload.name)} is valid: {staged.added} new {TABLES[table].noun} rows, "
                f"{staged.replaced} replaced (same key as a row of the catalog)."
            )
            st.dataframe(
                pd.DataFrame([r.model_dump(mode="json") for r in staged.rows]), hide_index=True
            )
            if st.button(f"Save to {TABLES[table].file}", type="primary", key="save_csv"):
                path = save_staged(ref.user_dir, staged)
                st.toast(f"Saved {md_text(path)}")
                st.rerun()

st.header("Owned servers: what a server you buy costs")
st.caption(
    "The inputs of the owned-cost model (`planner.owned`): price, depreciation, residual value, "
    "cost of capital, power at idle and busy, PUE, $/kWh, colocation $/kW-month, network and "
    "storage share, operations. Edit a cell and save: the changed rows go to your "
    f"`{TABLES['owned'].file}` (checked as an upload is), override the embedded ones and are "
    "marked as yours in every price and export. Blank: not known (an unpriced server is not "
    "planned)."
)
owned_frame = frames[TABLE_TITLES["owned"]]
if not owned_frame.empty:
    editable = owned_frame.drop(columns=["origin", "usd_per_hour"], errors="ignore")
    edited = st.data_editor(editable, hide_index=True, key="owned_editor", num_rows="dynamic")
    changed = edited[
        ~edited.astype(str).apply(tuple, axis=1).isin(editable.astype(str).apply(tuple, axis=1))
    ]
    if not changed.empty and st.button(
        f"Save {len(changed)} changed owned-server rows", type="primary", key="save_owned"
    ):
        staged_owned = None
        with planner_errors("The owned-server rows were not saved"):
            staged_owned = stage_table_upload(
                ref.user_dir,
                "owned",
                changed.to_csv(index=False).encode("utf-8"),
                "owned_costs (edited).csv",
                ref.catalog,
            )
        if staged_owned is not None:
            st.toast(f"Saved {md_text(save_staged(ref.user_dir, staged_owned))}")
            st.rerun()

st.header("Refresh prices from SkyPilot's catalog")
st.caption(
    "Upload `vms.csv` files of github.com/skypilot-org/skypilot-catalog (`catalogs/v8/<cloud>/"
    "vms.csv`). The new prices go to your catalog, dated with the snapshot's date; the old ones "
    "move to the price history and the refresh can be undone. The embedded data is not changed. "
    "From a terminal: `python -m planner catalog refresh --skypilot-catalog DIR`."
)
vms_uploads = st.file_uploader(
    "SkyPilot vms.csv files", type=["csv"], accept_multiple_files=True, key="skypilot_upload"
)
cols = st.columns(3)
cloud = cols[0].selectbox("Cloud of the files", SKYPILOT_CLOUDS, key="skypilot_cloud")
if cloud == "other":
    cloud = cols[0].text_input("Cloud name", key="skypilot_cloud_name")
snapshot = cols[1].date_input("Snapshot date", value=date.today(), key="skypilot_as_of")
threshold = cols[2].number_input(
    "Report moves above (%)", min_value=0.0, value=DEFAULT_THRESHOLD_PCT, key="skypilot_pct"
)
if vms_uploads:
    plan = None
    with planner_errors("The SkyPilot files were not read"):
        plan = plan_refresh_from_uploads(
            ref.user_dir,
            [(f.name, f.getvalue(), cloud) for f in vms_uploads],
            ref.catalog,
            snapshot,
            threshold_pct=float(threshold),
        )
    if plan is not None:
        st.info(md_text(f"Snapshot of {plan.as_of}: {plan.summary()}."))
        st.dataframe(pd.DataFrame(plan.change_rows()), hide_index=True, key="table_refresh")
        if plan.skipped:
            st.caption(
                md_text("Skipped: " + "; ".join(f"{k} ({len(v)})" for k, v in plan.skipped.items()))
            )
        if st.button("Apply the refresh", type="primary", key="apply_refresh"):
            record = None
            with planner_errors("The refresh was not written"):
                try:
                    record = apply_refresh(ref.user_dir, plan, ref.catalog)
                except OSError as exc:
                    st.error(f"The refresh was not written: {md_text(exc)}")
            if record is not None:
                st.toast(f"Refresh {md_text(record.refresh_id)} written")
                st.rerun()
refreshes = list_refreshes(ref.user_dir)
if refreshes:
    newest = refreshes[0]
    st.caption(
        md_text(f"Newest refresh: {newest.refresh_id} (snapshot {newest.as_of}): {newest.summary}")
    )
    if st.button("Undo the newest refresh", key="undo_refresh"):
        undone = None
        with planner_errors("The refresh was not undone"):
            try:
                undone = undo_refresh(ref.user_dir)
            except OSError as exc:
                st.error(f"The refresh was not undone: {md_text(exc)}")
        if undone is not None:
            st.toast(f"Undid {md_text(undone.refresh_id)}")
            st.rerun()

st.header("Import a model's config.json")
left, right = st.columns([2, 1])
config_upload = left.file_uploader("config.json", type=["json"], key="config_upload")
hf_id = right.text_input(
    "Hugging Face id",
    key="config_hf_id",
    placeholder="org/model (when the file does not name it)",
)
if config_upload is not None:
    parsed = None
    with planner_errors(f"{config_upload.name} was not imported"):
        parsed = parse_model_config(config_upload.getvalue(), config_upload.name, hf_id)
    if parsed is not None:
        config, card = parsed
        arch = card.architecture
        st.success(
            f"{md_text(card.hf_id)}: {arch.num_layers} layers, "
            f"{arch.total_params / 1e9:,.1f} B parameters "
            f"({arch.active_params / 1e9:,.1f} B active), "
            f"{arch.kv_bytes_per_token(2.0) / 1024:,.0f} KiB of KV cache per token in bf16."
        )
        if card.hf_id.lower() in ref.catalog.models:
            st.caption("A model with this id is in the catalog: saving replaces it.")
        if st.button("Save the model", type="primary", key="save_model"):
            try:
                path = save_model_config(ref.user_dir, config, card)
            except (OSError, PlannerError) as exc:
                st.error(f"Could not save: {md_text(exc)}")
            else:
                st.toast(f"Saved {md_text(path)}")
                st.rerun()

with st.expander("Your files"):
    files = user_files(ref.user_dir)
    if not files:
        st.caption("None yet: everything above is the embedded catalog.")
    for path in files:
        name_col, button_col = st.columns([4, 1])
        name_col.code(str(path.relative_to(ref.user_dir)), language=None)
        if button_col.button("Delete", key=f"delete_{path}"):
            path.unlink(missing_ok=True)
            st.rerun()

# The runs folder: what ingestion left out (the catalog above is read whole or not at all).
store = get_store(ref)
runs_generation(store)
ingestion_notice(store)
quarantine_section(store)
