"""``python -m benchmarks_runner.simulated``: see :mod:`benchmarks_runner.simulated.cli`."""

import sys

from benchmarks_runner.simulated.cli import main

sys.exit(main())
