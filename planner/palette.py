"""One colour per GPU, the same in every chart (no streamlit, no plotly).

Known GPUs get a fixed colour; a GPU a user adds gets one derived from its id, so it keeps its
colour across pages and sessions too.
"""

from __future__ import annotations

import hashlib

#: Fixed GPU -> colour map. Families share a hue (A100s teal, H100/H200 blue/green, Blackwell
#: purple, AMD red) so a chart reads at a glance; variants differ in lightness.
GPU_COLORS: dict[str, str] = {
    "A10G": "#8c564b",
    "L4": "#bcbd22",
    "L40S": "#ff7f0e",
    "A100-40GB-SXM": "#76c7c0",
    "A100-80GB-SXM": "#17becf",
    "A100-80GB-PCIe": "#0e7c86",
    "H100-SXM": "#1f77b4",
    "H100-PCIe": "#7fb2e5",
    "H200": "#2ca02c",
    "GH200": "#98df8a",
    "B200": "#9467bd",
    "GB200": "#c5b0d5",
    "B300": "#6a3d9a",
    "GB300": "#dadaeb",
    "RTXPRO6000": "#a55194",
    "MI300X": "#d62728",
    "MI325X": "#ff9896",
    "MI355X": "#ad494a",
}

#: Colours for GPUs outside the fixed map (none of them used above).
_EXTRA_PALETTE = (
    "#e377c2",
    "#7f7f7f",
    "#393b79",
    "#637939",
    "#8c6d31",
    "#843c39",
    "#7b4173",
    "#3182bd",
    "#e6550d",
    "#31a354",
)


def gpu_color(gpu_id: str) -> str:
    """The colour of ``gpu_id`` (case-insensitive for the fixed map)."""
    if gpu_id in GPU_COLORS:
        return GPU_COLORS[gpu_id]
    lowered = {k.lower(): v for k, v in GPU_COLORS.items()}
    if gpu_id.lower() in lowered:
        return lowered[gpu_id.lower()]
    digest = hashlib.sha256(gpu_id.encode()).digest()
    return _EXTRA_PALETTE[digest[0] % len(_EXTRA_PALETTE)]
