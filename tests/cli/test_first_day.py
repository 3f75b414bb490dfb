"""A first day with qcllp (issue 31): a database that cannot be used is one line and exit 1
(missing PostgreSQL driver, malformed URL, a full disk, as real processes), ``qcllp score``
says why it decided nothing, and the demo refuses a folder that holds an earlier database
instead of mixing into it (which left its tables empty)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from qcllp.cli import main
from qcllp.plant.config import load_plant_config
from qcllp.plant.simulate import simulate_plant, write_simulation

ROOT = Path(__file__).resolve().parents[2]
QCLLP = Path(sys.executable).parent / "qcllp"
SECRET = "S3cret"


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Path:
    """The example plant trained with a one-point grid and 2 folds (fast)."""
    raw = yaml.safe_load((ROOT / "plant_config" / "example.yaml").read_text())
    raw["training"].update(
        cv=2, methods={"inv_cal": {"C_p": [1.0]}}, default_method="inv_cal", bootstrap=5
    )
    path = tmp_path_factory.mktemp("first-day") / "plant.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def cli(config: Path, *args, db: str | None = None, expect: int = 0):
    """The CLI in-process on ``config`` (and ``db``); returns click's result."""
    base = ["--config", str(config)] + (["--db", db] if db else [])
    result = CliRunner().invoke(main, [*base, *map(str, args)])
    assert result.exit_code == expect, (result.output, result.exception)
    return result


def qcllp(*args, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The installed ``qcllp`` as a real process."""
    return subprocess.run(
        [str(QCLLP), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
        check=False,
    )


def one_line(proc: subprocess.CompletedProcess) -> str:
    """The process failed with exit code 1 and exactly one line on stderr; that line."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, (proc.returncode, proc.stderr[-3000:])
    assert SECRET not in proc.stderr + proc.stdout
    return lines[0]


# ----------------------------------------------------------------------------- item 3
def test_a_port_that_is_no_number_is_one_line_naming_it_without_the_password():
    url = f"postgresql+psycopg://u:{SECRET}@127.0.0.1:notaport/mill"
    line = one_line(qcllp("--db", url, "init"))
    assert line == (
        "error: not a database URL: postgresql+psycopg://u:***@127.0.0.1:notaport/mill: "
        "the port 'notaport' is not a number"
    )


def test_a_config_whose_database_port_is_no_number_is_one_line(config, tmp_path):
    raw = yaml.safe_load(config.read_text())
    raw["database_url"] = "postgresql+psycopg://qcllp@db:notaport/mill"
    bad = tmp_path / "plant.yaml"
    bad.write_text(yaml.safe_dump(raw))
    line = one_line(qcllp("--config", bad, "status"))
    assert f"{bad}: database_url: not a valid SQLAlchemy URL" in line and "notaport" in line


def _site_packages_without(tmp_path: Path, *dropped: str) -> Path:
    """A folder linking every package of this environment's site-packages except ``dropped``:
    a real Python path on which those packages are not installed."""
    site = next(Path(p) for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    farm = tmp_path / "site"
    farm.mkdir()
    for entry in site.iterdir():
        if not entry.name.lower().startswith(dropped):
            (farm / entry.name).symlink_to(entry)
    return farm


@pytest.mark.parametrize(
    ("url", "tail"),
    [
        (f"postgresql+psycopg://u:{SECRET}@127.0.0.1/mill", "pip install 'qcllp[postgres]'"),
        (f"postgresql://u:{SECRET}@127.0.0.1/mill", "pip install 'qcllp[postgres]'"),
        (
            f"postgresql+psycopg2://u:{SECRET}@127.0.0.1/mill",
            "pip install 'qcllp[postgres]' and write the URL as postgresql+psycopg://...",
        ),
    ],
)
def test_without_the_postgresql_driver_the_line_names_the_extra(tmp_path, url, tail):
    farm = _site_packages_without(tmp_path, "psycopg")
    env = {**os.environ, "PYTHONPATH": f"{farm}{os.pathsep}{ROOT}"}
    python = [sys.executable, "-S"]  # no site: only the linked packages, psycopg not among them
    probe = subprocess.run(
        [*python, "-c", "import importlib.util as u; print(u.find_spec('psycopg'))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == "None"
    proc = subprocess.run(
        [*python, "-m", "qcllp.cli", "--db", url, "init"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    line = one_line(proc)
    assert line.startswith("error: the database URL ") and "needs the PostgreSQL driver" in line
    assert line.endswith(tail) and "u:***@127.0.0.1/mill" in line


@pytest.fixture
def full_disk(tmp_path):
    """A real 2 MiB filesystem (tmpfs), unmounted afterwards; skips where mount is refused."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_disk_is_one_line_naming_the_database(config, full_disk, tmp_path):
    """Ingesting more than the disk holds; then creating a database on the full disk."""
    sim = simulate_plant(load_plant_config(config), 30, random_state=3)
    write_simulation(sim, tmp_path / "sim")  # about 9 MB of readings: more than 2 MiB stored
    db = f"sqlite:///{full_disk / 'plant.sqlite'}"
    assert qcllp("--config", config, "--db", db, "init").returncode == 0
    proc = qcllp(
        "--config", config, "--db", db, "ingest", "measurements", tmp_path / "sim" / "measurements"
    )
    assert one_line(proc) == (
        f"error: cannot use the plant database {db}: database or disk is full; "
        "free space on its disk"
    )
    _fill(full_disk / "filler")
    other = f"sqlite:///{full_disk / 'other.sqlite'}"
    line = one_line(qcllp("--config", config, "--db", other, "init"))
    assert line.startswith("error: cannot ")  # open or use: where SQLite hit the full disk
    assert line.endswith(
        f" the plant database {other}: database or disk is full; free space on its disk"
    )
    line = one_line(qcllp("--config", config, "--db", db, "status"))  # WAL files: no room
    assert line == (
        f"error: cannot open the plant database {db}: disk I/O error; "
        "check its disk: full, read-only or failing"
    )
    debug = qcllp("--debug", "--config", config, "--db", other, "init")
    assert debug.returncode == 1 and "Traceback" in debug.stderr


def _fill(path: Path) -> None:
    """Write ``path`` until its filesystem has no byte left."""
    with path.open("wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 4096)
        except OSError:
            pass


# ----------------------------------------------------------------------------- item 4
def _plant_files(config: Path, folder: Path) -> dict:
    """Six charges of history with final QC's counts, and two fresh charges without."""
    plant = load_plant_config(config)
    history = simulate_plant(plant, 6, random_state=11)
    fresh = simulate_plant(plant, 2, random_state=12, first_charge=7)
    return {
        "history": write_simulation(history, folder / "history"),
        "fresh": write_simulation(fresh, folder / "fresh"),
        "at_rolling": history.readings.query("station == 'rolling'")[["charge_id", "stick_id"]]
        .drop_duplicates()
        .shape[0],
    }


NO_SINK = (
    "; rolling has no sink: the flags are in the database only (give --sink or scorer.sink_dir)"
)


def test_score_says_why_it_decided_no_stick(config, store_url, tmp_path):
    files = _plant_files(config, tmp_path)
    cli(config, "ingest", "measurements", tmp_path / "history" / "measurements", db=store_url)
    cli(config, "ingest", "defects", files["history"]["defects"], db=store_url)
    trained = json.loads(
        cli(config, "--json", "train", "--station", "rolling", db=store_url).stdout
    )
    model = trained[0]["model_id"]
    cli(config, "models", "promote", model, db=store_url)

    past = cli(config, "score", "--station", "rolling", db=store_url).stdout.strip()
    assert past == (
        f"rolling: decided 0 sticks with model {model}: all {files['at_rolling']} sticks that "
        "arrived at rolling belong to charges final QC has already reported (they are past "
        "the line)" + NO_SINK
    )
    again = cli(config, "--json", "score", "--station", "rolling", db=store_url).stdout
    assert json.loads(again)["nothing_decided"] == (
        "no sticks have arrived at rolling since its last scoring run"
    )
    cli(config, "ingest", "measurements", tmp_path / "fresh" / "measurements", db=store_url)
    fresh = json.loads(cli(config, "--json", "score", "--station", "rolling", db=store_url).stdout)
    assert fresh["sticks_decided"] > 0 and "nothing_decided" not in fresh
    last = cli(config, "score", "--station", "rolling", db=store_url).stdout.strip()
    assert last == (
        f"rolling: decided 0 sticks with model {model}: no sticks have arrived at rolling since "
        f"its last scoring run ({fresh['sticks_decided']} sticks there have their flags)" + NO_SINK
    )


def test_score_without_an_active_model_says_what_to_do(config, store_url):
    cli(config, "init", db=store_url)
    none = cli(config, "--json", "score", "--station", "rolling", db=store_url, expect=1)
    assert "station 'rolling' has no active model; train one and promote it" in none.stderr


# ----------------------------------------------------------------------------- items 2 and 4
def test_the_demo_refuses_a_folder_holding_a_database_and_leaves_it_alone(config, tmp_path):
    """An earlier demo's database made a second demo skip its files and score charges final
    QC had reported: tables of zeros. Now it says so, at once, and changes nothing."""
    folder = tmp_path / "demo"
    database = folder / "plant.sqlite"
    folder.mkdir()
    cli(config, "init", db=f"sqlite:///{database}")
    before = database.read_bytes()
    args = ["--config", config, "demo", "--workdir", folder, "--charges", "8"]
    proc = qcllp(*args, "--fresh-charges", "2", "--method", "invcal")
    assert one_line(proc) == (
        f"error: {database} exists (an earlier demo?): the demo starts from an empty plant "
        "database; give it a new --workdir or remove that folder"
    )
    assert database.read_bytes() == before
    assert not (folder / "history").exists() and not (folder / "plant.yaml").exists()


def test_printed_commands_run_as_printed_without_the_virtual_environment(tmp_path):
    """What the demo prints to look at its results, run through a shell whose PATH does not
    hold the virtual environment (nor any other qcllp)."""
    from qcllp.cli import DEMO_LOOKS, own_command

    path = os.pathsep.join(
        p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "qcllp").exists()
    )
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "QCLLP_CONFIG")}
    env["PATH"] = path
    assert shutil.which("qcllp", path=path) is None
    command = own_command()
    assert Path(command[0]).is_absolute() and os.access(command[0], os.X_OK)
    shell = shutil.which("sh")
    printed = " ".join([*command, "--version"])
    done = subprocess.run([shell, "-c", printed], env=env, capture_output=True, text=True)
    assert done.returncode == 0 and "version" in done.stdout, done.stderr
    assert DEMO_LOOKS[0] == ["models", "list"]
