"""``python -m benchmarks_runner``: see :mod:`benchmarks_runner.cli`."""

import signal
import sys

# SIGINT or SIGTERM while the command's modules are imported (a second or more) is recorded,
# not acted on at once: a run then still ends ``cancelled`` with its run files and 130 or 143.
_early: list[signal.Signals] = []
_handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
for _sig in _handlers:
    signal.signal(_sig, lambda signum, frame: _early.append(signal.Signals(signum)))

from benchmarks_runner import cli  # noqa: E402

if sys.argv[1:2] == ["run"]:
    cli._early_signals = _early  # the run takes the signals over and looks here first
else:
    for _sig, _handler in _handlers.items():
        signal.signal(_sig, _handler)
    if _early:  # nothing to keep: the usual exit of the signal
        sys.exit(cli.EXIT_TERMINATED if _early[0] == signal.SIGTERM else cli.EXIT_CANCELLED)
sys.exit(cli.main())
