"""qcllp: quality control for steel plants by learning from label proportions."""

__version__ = "0.1.0"
