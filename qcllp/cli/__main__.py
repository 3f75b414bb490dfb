"""``python -m qcllp.cli``: the ``qcllp`` command line where its entry point is not on PATH."""

from qcllp.cli import main

main()
