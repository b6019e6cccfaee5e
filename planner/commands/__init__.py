"""Sub-commands of ``python -m planner``."""
