"""The catalog: GPUs, instances and prices, models and public measured results."""

from planner.catalog.architecture import (
    MODEL_CLASSES,
    ModelArchitecture,
    ModelClass,
    architecture_from_config,
)
from planner.catalog.loader import (
    EMBEDDED_DATA_DIR,
    Catalog,
    load_catalog,
    model_card_from_config,
)
from planner.catalog.schema import (
    BYTES_PER_PARAM,
    GPU,
    MEASURED_ENGINE_SETTINGS,
    PRECISIONS,
    PRICING_MODES,
    Instance,
    MeasuredResult,
    ModelCard,
    Precision,
    Price,
    PriceHistoryEntry,
    PricingMode,
)

__all__ = [
    "BYTES_PER_PARAM",
    "EMBEDDED_DATA_DIR",
    "GPU",
    "MEASURED_ENGINE_SETTINGS",
    "MODEL_CLASSES",
    "PRECISIONS",
    "PRICING_MODES",
    "Catalog",
    "Instance",
    "MeasuredResult",
    "ModelArchitecture",
    "ModelCard",
    "ModelClass",
    "Precision",
    "Price",
    "PriceHistoryEntry",
    "PricingMode",
    "architecture_from_config",
    "load_catalog",
    "model_card_from_config",
]
