"""``python -m benchmarks_runner``: see :mod:`benchmarks_runner.cli`."""

import sys

from benchmarks_runner.cli import main

sys.exit(main())
