"""The engineers' CLI end to end on a small simulated plant: ingest, train, registry
promote/rollback, scoring exactly once, report, demo; and every user error exits 1 with one
clear line."""

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from qcllp.cli import main
from qcllp.plant.config import load_plant_config
from qcllp.plant.simulate import simulate_plant, write_simulation

ROOT = Path(__file__).resolve().parents[2]
FAST_METHOD = "invcal"


def _fast_config(folder: Path) -> Path:
    """The example plant with 2 charge folds and a one-point grid: tests check the plumbing."""
    raw = yaml.safe_load((ROOT / "plant_config" / "example.yaml").read_text())
    raw["training"]["cv"] = 2
    raw["training"]["methods"] = {"inv_cal": {"C_p": [1.0]}}
    raw["training"]["default_method"] = "inv_cal"
    raw["training"]["bootstrap"] = 5
    path = folder / "plant.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


_CONFIG_FOLDER = Path(tempfile.mkdtemp(prefix="qcllp-cli-config-"))
atexit.register(shutil.rmtree, _CONFIG_FOLDER, ignore_errors=True)  # each run left one in /tmp
EXAMPLE = _fast_config(_CONFIG_FOLDER)


def run(*args, db=None, expect=0):
    """Invoke the CLI in-process; returns the click Result."""
    base = ["--config", str(EXAMPLE)] + (["--db", db] if db else [])
    result = CliRunner().invoke(main, [*base, *map(str, args)])
    assert result.exit_code == expect, (result.output, result.stderr, result.exception)
    return result


@pytest.fixture(scope="module")
def plant(tmp_path_factory):
    """A database with 20 ingested charges and their counts; files of a fresh batch."""
    folder = tmp_path_factory.mktemp("plant")
    config = load_plant_config(EXAMPLE)
    history = write_simulation(simulate_plant(config, 20, random_state=1), folder / "history")
    fresh_sim = simulate_plant(config, 4, random_state=2, first_charge=21)
    fresh = write_simulation(fresh_sim, folder / "fresh")
    db = f"sqlite:///{folder / 'plant.sqlite'}"
    run("init", db=db)
    run("ingest", "measurements", folder / "history" / "measurements", db=db)
    run("ingest", "defects", history["defects"], db=db)
    return {"folder": folder, "db": db, "fresh": fresh, "history": history}


def test_ingest_reports_counts_as_json_and_a_second_run_stores_nothing(plant):
    result = run("--json", "ingest", "defects", plant["history"]["defects"], db=plant["db"])
    report = json.loads(result.stdout)
    assert report["stored"] == 0 and report["files_skipped"]


def test_train_promote_rollback_and_the_registry_listing(plant):
    db = plant["db"]
    first = json.loads(
        run("--json", "train", "--station", "rolling", "--method", FAST_METHOD, db=db).stdout
    )[0]
    second = json.loads(
        run(
            "--json", "train", "--station", "rolling", "--method", FAST_METHOD, "--seed", "5", db=db
        ).stdout
    )[0]
    assert first["metrics"]["bag_error"] < 0.5 and first["n_charges"] == 20
    run("models", "promote", first["model_id"], db=db)
    run("models", "promote", second["model_id"], db=db)
    listing = {
        m["id"]: m["status"] for m in json.loads(run("--json", "models", "list", db=db).stdout)
    }
    assert listing[first["model_id"]] == "retired" and listing[second["model_id"]] == "active"
    run("models", "rollback", "rolling", db=db)
    listing = {
        m["id"]: m["status"] for m in json.loads(run("--json", "models", "list", db=db).stdout)
    }
    assert listing[first["model_id"]] == "active" and listing[second["model_id"]] == "retired"
    shown = json.loads(run("--json", "models", "show", first["model_id"], db=db).stdout)
    assert shown["method"] == FAST_METHOD and shown["features"]


def test_scoring_flags_each_new_stick_once_and_the_report_embeds_its_plots(plant):
    db = plant["db"]
    trained = json.loads(
        run("--json", "train", "--station", "cooling", "--method", FAST_METHOD, db=db).stdout
    )[0]
    run("models", "promote", trained["model_id"], db=db)
    run("ingest", "measurements", plant["folder"] / "fresh" / "measurements", db=db)
    out = plant["folder"] / "scores.csv"
    first = json.loads(
        run("--json", "score", "--station", "cooling", "--output", out, db=db).stdout
    )
    again = json.loads(run("--json", "score", "--station", "cooling", db=db).stdout)
    assert first["flags_written"] == first["sticks_decided"] > 0
    assert again["sticks_decided"] == 0 and again["flags_written"] == 0
    assert out.read_text().startswith("charge_id,stick_id,probability,decision")
    report = plant["folder"] / "report.html"
    run("report", "--output", report, db=db)
    html = report.read_text()
    assert "Station cooling" in html and html.count("data:image/png;base64,") >= 2


def test_scoring_a_file_checks_every_record_as_ingest_does(plant, tmp_path):
    db = plant["db"]
    trained = json.loads(
        run("--json", "train", "--station", "cooling", "--method", FAST_METHOD, db=db).stdout
    )[0]
    run("models", "promote", trained["model_id"], db=db)
    (good,) = plant["fresh"]["measurements"]
    readings = pd.read_csv(good, dtype=str)
    out = tmp_path / "scores.csv"
    result = json.loads(
        run(
            "--json", "score", "--station", "cooling", "--input", good, "--output", out, db=db
        ).stdout
    )
    scores = pd.read_csv(out, dtype={"charge_id": str, "stick_id": str})
    n_sticks = len(readings.drop_duplicates(["charge_id", "stick_id"]))
    assert result["sticks_decided"] == len(scores) == n_sticks and result["flags_written"] == 0
    assert scores["probability"].between(0, 1).all()

    readings.loc[2, "value"] = "n/a"
    readings.loc[6, "sensor"] = "no_such_sensor"
    bad = tmp_path / "bad.txt"  # a suffix that names no format is read as CSV
    readings.to_csv(bad, index=False)
    result = run("score", "--station", "cooling", "--input", bad, db=db, expect=1)
    assert f"{bad}: 2 of {len(readings)} records invalid, nothing scored" in result.stderr
    assert "row 3: non_numeric_value: value 'n/a' is not a finite number" in result.stderr
    assert "row 7: unknown_sensor" in result.stderr and "no_such_sensor" in result.stderr


def test_a_tampered_artifact_is_refused_with_a_clear_message(plant):
    db = plant["db"]
    trained = json.loads(
        run("--json", "train", "--station", "furnace", "--method", FAST_METHOD, db=db).stdout
    )[0]
    artifact = Path(trained["artifact"])
    artifact.write_bytes(artifact.read_bytes()[:-10] + b"0123456789")
    result = run("models", "promote", trained["model_id"], db=db, expect=1)
    assert "corrupted or was modified" in result.stderr
    assert str(artifact) in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "--station", "pickling"], "unknown station 'pickling'"),
        (["train", "--station", "rolling", "--method", "deep-net"], "unknown method 'deep-net'"),
        (["train", "--station", "rolling", "--target", "rust"], "unknown target 'rust'"),
        (["models", "show", "9999"], "no model with id 9999"),
        (["models", "rollback", "straightening"], "no active model"),
    ],
)
def test_user_errors_on_a_plant_database_exit_1_with_one_line(plant, args, message):
    result = run(*args, db=plant["db"], expect=1)
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("jobs", "message"), [("0", "0 processes cannot train"), ("-2", "-2")])
def test_a_training_on_no_processes_is_a_usage_error_naming_jobs(plant, jobs, message):
    result = run("train", "--station", "rolling", "--jobs", jobs, db=plant["db"], expect=2)
    assert "'--jobs'" in result.stderr and message in result.stderr


def test_training_before_any_defect_counts_says_what_to_do(tmp_path):
    db = f"sqlite:///{tmp_path / 'empty.sqlite'}"
    run("init", db=db)
    result = run("train", "--station", "rolling", db=db, expect=1)
    assert "no labeled charges yet" in result.stderr


def test_an_unreadable_input_file_exits_1_naming_the_file(plant, tmp_path):
    bad = tmp_path / "readings.csv"
    bad.write_bytes(b"\x00\x01 not a csv \xff")
    result = run("score", "--station", "cooling", "--input", bad, db=plant["db"], expect=1)
    assert str(bad) in result.stderr


def test_a_missing_or_invalid_config_exits_1_naming_the_file(tmp_path):
    missing = tmp_path / "nowhere.yaml"
    result = CliRunner().invoke(main, ["--config", str(missing), "init"])
    assert result.exit_code == 1 and str(missing) in result.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: mill\nstations: 5\n")
    result = CliRunner().invoke(main, ["--config", str(broken), "init"])
    assert result.exit_code == 1 and "stations" in result.stderr and str(broken) in result.stderr


def test_global_options_may_follow_the_subcommand(tmp_path):
    db = f"sqlite:///{tmp_path / 'plant.sqlite'}"
    CliRunner().invoke(main, ["--config", str(EXAMPLE), "--db", db, "init"])
    after = CliRunner().invoke(
        main, ["models", "list", "--json", "--config", str(EXAMPLE), "--db", db]
    )
    assert after.exit_code == 0, after.output
    assert json.loads(after.stdout) == []
    assert "--json" in CliRunner().invoke(main, ["models", "list", "--help"]).stdout
    result = CliRunner().invoke(main, ["init", "--debug", "--config", str(tmp_path / "x.yaml")])
    assert result.exit_code == 1 and not isinstance(result.exception, SystemExit)


def test_ingest_of_a_path_that_does_not_exist_exits_1_with_one_line(tmp_path):
    missing = tmp_path / "no_such_folder"
    result = run(
        "ingest", "measurements", missing, db=f"sqlite:///{tmp_path / 'p.sqlite'}", expect=1
    )
    assert result.stderr == f"error: {missing}: no such file or folder\n"


def test_debug_shows_the_traceback(tmp_path):
    result = CliRunner().invoke(main, ["--debug", "--config", str(tmp_path / "x.yaml"), "init"])
    assert result.exit_code == 1 and result.exception is not None
    assert not isinstance(result.exception, SystemExit)


def test_demo_runs_end_to_end_as_a_real_process(tmp_path):
    """The demo runs the plant of --config (here the example under another name)."""
    exe = shutil.which("qcllp", path=str(Path(sys.executable).parent)) or "qcllp"
    env = {k: v for k, v in os.environ.items() if k != "QCLLP_CONFIG"}
    config = tmp_path / "other_mill.yaml"
    config.write_text(EXAMPLE.read_text().replace("name: example_mill", "name: other_mill", 1))
    proc = subprocess.run(
        [
            exe,
            "--json",
            "--config",
            str(config),
            "demo",
            "--folder",
            str(tmp_path / "demo"),
            "--charges",
            "16",
            "--fresh-charges",
            "4",
            "--method",
            FAST_METHOD,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert Path(result["report"]).is_file()
    assert "name: other_mill" in Path(result["config"]).read_text()
    stations = {row["station"]: row for row in result["stations"]}
    assert set(stations) == {"furnace", "rolling", "cooling", "straightening"}
    assert all(row["sticks"] > 0 for row in stations.values())
    # final QC's counts of the fresh charges reached every station's lock-out guard
    qc = {row["station"]: row for row in result["final_qc"]}
    assert set(qc) == set(stations)
    assert all(row["charges_compared"] > 0 for row in qc.values()), qc
    # the commands it prints to look at the results work as printed, without the venv
    looked = _run_as_printed(result["look"][0], cwd=tmp_path)
    assert looked.returncode == 0, looked.stderr
    assert len(looked.stdout.strip().splitlines()) == 1 + 4  # a header, a model a station
    status = _run_as_printed(f"{result['look'][1]} --json", cwd=tmp_path)
    assert len(json.loads(status.stdout)["stations"]) == 4, status.stderr


def _run_as_printed(line: str, cwd: Path) -> subprocess.CompletedProcess:
    """A command line qcllp printed, run by a shell whose PATH holds no qcllp (no venv)."""
    path = os.pathsep.join(
        p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "qcllp").exists()
    )
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "QCLLP_CONFIG")}
    assert shutil.which("qcllp", path=path) is None
    return subprocess.run(
        ["sh", "-c", line], cwd=cwd, env={**env, "PATH": path}, capture_output=True, text=True
    )


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "postgresql+psycopg://user:S3cret@127.0.0.1:1/plant",
            "cannot open the plant database postgresql+psycopg://user:***@127.0.0.1:1/plant",
        ),
        ("mysql://user:S3cret@host/plant", "mysql://user:***@host/plant: no database driver"),
        ("not a url", "not a database URL"),
        (
            "sqlite:////no/such/folder/plant.sqlite",
            "unable to open database file; check that its folder exists and can be written",
        ),
    ],
)
def test_a_database_that_cannot_be_opened_is_one_line_without_the_password(url, message):
    result = run("--json", "init", db=url, expect=1)
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "S3cret" not in result.stderr + result.stdout


def test_a_missing_database_on_a_running_server_is_named(pg_server):
    url = pg_server.url("no_such_plant").replace("postgres@", "postgres:S3cret@")
    result = run("init", db=url, expect=1)
    assert 'database "no_such_plant" does not exist' in result.stderr
    assert "S3cret" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_the_demo_runs_from_any_folder_and_says_how_to_look_at_its_results(tmp_path):
    """A real process started outside the checkout, without --config: the example plant ships
    with the package; the printed follow-up commands work from yet another folder."""
    qcllp = Path(sys.executable).parent / "qcllp"
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "QCLLP_CONFIG"}
    args = ["demo", "--workdir", "demo", "--charges", "8", "--fresh-charges", "2"]
    done = subprocess.run(
        [str(qcllp), *args, "--method", FAST_METHOD],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    looks = done.stdout.split("look at the results:\n")[1].splitlines()
    assert looks[0].startswith(f"  {qcllp} --config ") and looks[0].endswith(" models list")
    listed = _run_as_printed(looks[0].strip(), cwd=tmp_path)  # another folder, no venv
    assert listed.returncode == 0, listed.stderr
    assert len(listed.stdout.strip().splitlines()) == 1 + 4  # a header, a model a station
    assert (cwd / "demo" / "plant.yaml").exists() and (cwd / "demo" / "report.html").exists()


def test_train_of_a_station_someone_else_is_training_exits_1_naming_the_holder(plant):
    from qcllp.store import Store
    from qcllp.store.leases import acquire, release

    with Store.open(plant["db"]) as store:
        assert acquire(store, "train:furnace", "retrainer-host:4242:ab12cd", ttl_s=60)
        try:
            result = run("train", "--station", "furnace", db=plant["db"], expect=1)
        finally:
            release(store, "train:furnace", "retrainer-host:4242:ab12cd")
    message = result.stderr.strip()
    assert len(message.splitlines()) == 1, message
    assert "training of station 'furnace' is held by retrainer-host:4242:ab12cd" in message
    status = json.loads(run("--json", "status", db=plant["db"]).stdout)
    assert status["retrainer"] == {"leader": None, "jobs": []}
    assert all(s["training_by"] is None for s in status["stations"])


def test_train_with_method_auto_prints_what_each_method_did(plant, tmp_path):
    raw = yaml.safe_load(EXAMPLE.read_text())
    raw["training"]["methods"] = {"inv_cal": {"C_p": [1.0]}, "meanmap": {"reg": [1.0]}}
    config = tmp_path / "auto.yaml"
    config.write_text(yaml.safe_dump(raw))
    args = ["--config", str(config), "--db", plant["db"], "train", "--station", "rolling"]
    result = CliRunner().invoke(main, [*args, "--method", "auto"])
    assert result.exit_code == 0, (result.output, result.exception)
    trials = [line for line in result.stdout.splitlines() if "CV bag error" in line]
    assert len(trials) == 2 and sum(line.lstrip().startswith("*") for line in trials) == 1
    assert {
        line.split()[1] if line.lstrip().startswith("*") else line.split()[0] for line in trials
    } == {"invcal", "meanmap"}
