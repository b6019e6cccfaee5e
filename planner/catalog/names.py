"""What a GPU or model name, as people write it, means in the catalog.

People name a GPU as ``nvidia-smi`` prints it ("NVIDIA H100 80GB HBM3"), as its vendor sells it
("AMD Instinct MI300X", "H200 SXM") or as the catalog does ("H100-SXM"), and a model by its
Hugging Face id or the id's last part ("DeepSeek-R1-0528"). :func:`gpu_candidates` and
:func:`model_candidates` list the catalog entries a name can mean; the catalog
(:meth:`planner.catalog.Catalog.gpu`, :meth:`~planner.catalog.Catalog.model`) takes a name that
means exactly one, and for any other names the likely ones (:func:`gpu_suggestions`,
:func:`close_names`) in its error.

A GPU name is read as words (runs of letters and digits): the vendor's words (``nvidia``,
``amd``, ``instinct``, ...) say nothing; a form factor (``sxm``/``sxm5``, ``oam``, ``pcie``), a
memory size (``80gb``) and a memory technology (``hbm3``) must agree with the catalog's
``form_factor``, ``memory_gb`` and ``memory_type`` when the name states them. What remains is
the product ("h100", "rtxpro6000"). A name that leaves two GPUs possible resolves to neither:
an "H100" is an SXM card or a PCIe one, which has 60% of the SXM's memory bandwidth and half
its power (``gpus.csv``: 2,000 against 3,350 GB/s, 350 against 700 W), and the planner does not
guess which.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from planner.catalog.schema import GPU, ModelCard

#: what ``nvidia-smi --query-gpu=name`` prints for the catalog's NVIDIA GPUs (the names quoted
#: in data/gpus.csv's sources and in the outputs found for them; Kubernetes' GPU feature
#: discovery publishes them with dashes as ``nvidia.com/gpu.product``). GPUs without a
#: confirmed name are not listed.
NVIDIA_SMI_NAMES: dict[str, str] = {
    "A10G": "NVIDIA A10G",
    "L4": "NVIDIA L4",
    "L40S": "NVIDIA L40S",
    "A100-40GB-SXM": "NVIDIA A100-SXM4-40GB",
    "A100-80GB-SXM": "NVIDIA A100-SXM4-80GB",
    "H100-SXM": "NVIDIA H100 80GB HBM3",
    "H200": "NVIDIA H200",
    "B200": "NVIDIA B200",
    "B300": "NVIDIA B300 SXM6 AC",
    "RTXPRO6000": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
}

#: words that name the vendor, the product line, the architecture or the server rather than
#: the GPU ("NVIDIA RTX PRO 6000 Blackwell Server Edition" is the RTX PRO 6000)
_NOISE = frozenset(
    {"nvidia", "amd", "instinct", "tesla", "hgx", "dgx", "gpu", "blackwell", "server", "edition"}
)
_FORM_FACTORS = {"sxm": "sxm", "oam": "oam", "pcie": "pcie"}
_MEMORY = re.compile(r"^(\d+)gb$")
_MEMORY_TECH = re.compile(r"^(hbm\d*e?|gddr\d*x?)$")
_SXM_GENERATION = re.compile(r"^sxm\d$")


class _GpuWords(NamedTuple):
    product: str  # the words left, joined ("h100", "a100", "rtxpro6000")
    form_factor: str | None
    memory_gb: int | None
    memory_tech: str | None


def _words(name: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", name.lower())


def _spelled(name: str) -> str:
    """``name``'s letters and digits, lower-case: spaces, dashes and case do not matter."""
    return "".join(_words(name))


def _gpu_words(name: str) -> _GpuWords:
    product: list[str] = []
    form_factor = memory_tech = None
    memory_gb = None
    for word in _words(name):
        if word in _NOISE:
            continue
        if word in _FORM_FACTORS or _SXM_GENERATION.match(word):
            form_factor = _FORM_FACTORS.get(word, "sxm")
        elif (size := _MEMORY.match(word)) is not None:
            memory_gb = int(size.group(1))
        elif _MEMORY_TECH.match(word):
            memory_tech = word
        else:
            product.append(word)
    return _GpuWords("".join(product), form_factor, memory_gb, memory_tech)


def _gpu_matches(query: _GpuWords, gpu: GPU) -> bool:
    own = _gpu_words(gpu.gpu_id)
    if query.product != own.product:
        return False
    if query.form_factor is not None and query.form_factor != gpu.form_factor:
        return False
    if query.memory_gb is not None and query.memory_gb != round(gpu.memory_gb):
        return False
    stated_tech = query.memory_tech
    return stated_tech is None or (gpu.memory_type or "").lower() == stated_tech


def gpu_candidates(name: str, gpus: Mapping[str, GPU]) -> list[str]:
    """The catalog GPUs ``name`` can mean (its id, display name or nvidia-smi name, in any case,
    or its words as the module docstring reads them); empty when it means none."""
    wanted = _spelled(name)
    if not wanted:
        return []
    exact = [
        gid
        for gid, gpu in gpus.items()
        if wanted in {_spelled(gid), _spelled(gpu.name), _spelled(NVIDIA_SMI_NAMES.get(gid, ""))}
    ]
    if exact:
        return exact
    query = _gpu_words(name)
    if not query.product:
        return []
    return [gid for gid, gpu in gpus.items() if _gpu_matches(query, gpu)]


def gpu_suggestions(name: str, gpus: Mapping[str, GPU]) -> list[str]:
    """What to offer for a GPU name that means no catalog GPU or several: the GPUs it can mean,
    else those of its product whatever form factor or memory it stated ("H200 PCIe" -> H200,
    which is the SXM card), else the ids spelled most like it."""
    found = gpu_candidates(name, gpus)
    if found:
        return found
    product = _gpu_words(name).product
    same = [gid for gid in gpus if product and _gpu_words(gid).product == product]
    return same or close_names(name, gpus)


def model_candidates(name: str, models: Iterable[ModelCard]) -> list[str]:
    """The catalog models ``name`` can mean: its Hugging Face id in any case, or the id's
    last part ("DeepSeek-R1-0528" for "deepseek-ai/DeepSeek-R1-0528")."""
    wanted = name.strip().lower()
    cards = list(models)
    exact = [c.hf_id for c in cards if c.hf_id.lower() == wanted]
    if exact or "/" in wanted:
        return exact
    return [c.hf_id for c in cards if c.hf_id.lower().rpartition("/")[2] == wanted]


def close_names(name: str, known: Iterable[str], limit: int = 3) -> list[str]:
    """Up to ``limit`` of ``known`` spelled most like ``name`` (case ignored; a Hugging Face id
    also by its last part), best first."""
    wanted = name.strip().lower()

    def likeness(candidate: str) -> float:
        lowered = candidate.lower()
        forms = {lowered, lowered.rpartition("/")[2]}
        return max(difflib.SequenceMatcher(None, wanted, form).ratio() for form in forms)

    scored = sorted(((likeness(k), k) for k in set(known)), key=lambda t: (-t[0], t[1]))
    return [k for score, k in scored if score >= 0.6][:limit]
