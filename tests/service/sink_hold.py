"""``python -m tests.service.sink_hold <qcllp arguments>``: the qcllp CLI in a process whose
first sink append that writes lines stops right after them -- written and fsynced, the step's
transaction not committed -- writes the sink's new size to the file named by
``QCLLP_TEST_HOLD_MARKER`` (renamed into place, so it never exists empty) and waits there for
its ``kill -9``. It widens the window between a step's append and its commit
deterministically: everything else is the real scorer.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from qcllp.cli import main
from qcllp.scoring.flag_sink import FlagSink

_append = FlagSink.append


def _append_and_hold(self: FlagSink, lines: list[str]) -> int:
    offset = _append(self, lines)
    if lines:  # the marker appears whole (renamed into place): a test reads it once it exists
        marker = Path(os.environ["QCLLP_TEST_HOLD_MARKER"])
        partial = marker.with_name(f".{marker.name}.partial")
        partial.write_text(f"{offset}\n")
        os.replace(partial, marker)
        while True:
            time.sleep(3600)
    return offset


FlagSink.append = _append_and_hold

if __name__ == "__main__":
    main()
