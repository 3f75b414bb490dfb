"""The reference data sets ship with the package, and nothing in the repository reaches
outside it for data (a user's clone has no folder beside it)."""

import re
import subprocess
from pathlib import Path

from qcllp.datasets import load_heart, load_toy

ROOT = Path(__file__).resolve().parents[2]
# a path that climbs out of the repository to a sibling folder: "../shared", parents[3] / "shared"
OUTSIDE = re.compile(r"\.\./shared|parents\[\d\]\s*/\s*\"shared\"|\.parent\s*/\s*\"shared\"")


def test_heart_is_the_scaled_statlog_set():
    heart = load_heart()
    assert heart.shape == (270, 14)
    features = heart.drop(columns="label")
    assert features.min().min() >= -1 and features.max().max() <= 1
    assert set(heart["label"]) == {-1, 1}
    assert (heart["label"] == 1).sum() == 120  # Statlog: 120 with heart disease, 150 without


def test_toy_has_the_papers_two_bags_and_shares():
    toy = load_toy()
    assert toy.shape == (200, 4)
    shares = (toy["label"] == 1).groupby(toy["bag"]).mean()
    assert shares.round(2).to_dict() == {1: 0.6, 2: 0.4}


def test_no_tracked_file_reads_from_outside_the_repository():
    tracked = subprocess.run(
        ["git", "ls-files", "*.py", "*.sh", "*.toml", "*.yaml", "*.cfg", "*.ini", ".ci/*"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    this = Path(__file__).relative_to(ROOT).as_posix()
    offenders = [
        f"{name}:{number}"
        for name in tracked
        if name != this
        for number, line in enumerate((ROOT / name).read_text().splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert offenders == []
