"""``python -m planner ...``: the planner's command line."""

from planner.cli import main

raise SystemExit(main())
