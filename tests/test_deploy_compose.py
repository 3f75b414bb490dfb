"""``deploy/docker-compose.yml`` and ``deploy/Dockerfile`` agree with qcllp and its example plant.

No Docker daemon or registry is needed (none is on the development machine): every qcllp
command in the compose file is parsed by qcllp's own CLI, the scorers are exactly one per
station of the example plant with the health port that station's scorer listens on, and the
image provides what the services use. Where a ``docker`` client with the compose plugin is
installed, ``docker compose config`` must accept the file as well.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from qcllp.cli import main
from qcllp.plant.config import load_plant_config

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "deploy" / "docker-compose.yml"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
EXAMPLE = load_plant_config(ROOT / "plant_config" / "example.yaml")
SERVICES = yaml.safe_load(COMPOSE.read_text())["services"]
QCLLP = {name: s for name, s in SERVICES.items() if s.get("image") == "qcllp:latest"}
COMMANDED = {name: s for name, s in QCLLP.items() if "command" in s}


@pytest.mark.parametrize("name", sorted(COMMANDED))
def test_every_qcllp_command_parses_with_the_cli(name):
    command = COMMANDED[name]["command"]
    result = CliRunner().invoke(main, [*command, "--help"])  # unknown options still fail
    assert result.exit_code == 0, result.output


def test_one_scorer_per_station_on_its_own_health_port():
    scorers = {n: s for n, s in COMMANDED.items() if s["command"][:2] == ["serve", "scorer"]}
    stations = {s["command"][s["command"].index("--station") + 1] for s in scorers.values()}
    assert stations == set(EXAMPLE.station_names)
    for index, station in enumerate(EXAMPLE.station_names):
        service = SERVICES[f"scorer-{station}"]
        port = EXAMPLE.scorer.base_port + index
        assert f"127.0.0.1:{port}/healthz" in " ".join(service["healthcheck"]["test"])
        assert f"flags-{station}.jsonl" in " ".join(service["command"])
    retrainer = " ".join(SERVICES["retrainer"]["healthcheck"]["test"])
    assert f"127.0.0.1:{EXAMPLE.retrainer.port}/healthz" in retrainer


def test_services_wait_for_the_migration_and_get_the_password_as_a_file():
    for name, service in COMMANDED.items():
        assert "postgres" in service["depends_on"], name
        if name != "init":
            assert service["depends_on"]["init"] == {"condition": "service_completed_successfully"}
        assert service["environment"]["QCLLP_DATABASE_PASSWORD_FILE"] == "/run/secrets/db_password"
        assert "db_password" in service["secrets"]
        assert not any(key.endswith("PASSWORD") for key in service["environment"])


def test_the_image_runs_qcllp_unprivileged_with_the_folders_the_services_write():
    text = DOCKERFILE.read_text()
    assert re.search(r'^ENTRYPOINT \["qcllp"\]$', text, re.M)
    assert re.search(r"^USER qcllp$", text, re.M)
    assert re.search(r'pip install "\.\[postgres,dask\]"', text)
    mounts = {v.split(":")[1] for s in QCLLP.values() for v in s.get("volumes", [])}
    for folder in ("/etc/qcllp/models", "/var/lib/qcllp/flags"):
        assert folder in mounts and folder in text  # created and owned by qcllp in the image
    for service in ("dask-scheduler", "dask-worker"):
        assert SERVICES[service]["profiles"] == ["dask"]


def _compose_plugin() -> bool:
    if shutil.which("docker") is None:
        return False
    done = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
    return done.returncode == 0


@pytest.mark.skipif(not _compose_plugin(), reason="no docker client with the compose plugin")
def test_docker_compose_accepts_the_file(tmp_path):
    folder = tmp_path / "deploy"
    shutil.copytree(ROOT / "deploy", folder)
    (folder / "plant.yaml").write_text("name: x\n")
    (folder / "secrets").mkdir(exist_ok=True)
    (folder / "secrets" / "db-password").write_text("x\n")
    done = subprocess.run(
        ["docker", "compose", "-f", str(folder / "docker-compose.yml"), "config", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
