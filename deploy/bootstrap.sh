#!/usr/bin/env bash
# Set up qcllp on a machine that has only Python >= 3.11: a virtual environment in .venv with
# the package installed from pyproject.toml.
#   bash deploy/bootstrap.sh          runtime only (enough for `qcllp demo`)
#   bash deploy/bootstrap.sh --test   plus the test tools and, where apt-get can be used as
#                                     root, a PostgreSQL server for the engine tests,
#                                     Chromium for the browser tests (the report, the bay
#                                     page; Playwright drives it), Mosquitto for
#                                     the MQTT tests and promtool for the alert rules' test
#                                     (no broker or Prometheus server left running)
set -euo pipefail
cd "$(dirname "$0")/.."

want_tests=0
[[ "${1:-}" == "--test" ]] && want_tests=1

python=${PYTHON:-python3}
"$python" - <<'PY'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"qcllp needs Python >= 3.11, found {sys.version.split()[0]}")
PY

[[ -x .venv/bin/python ]] || "$python" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
if (( want_tests )); then
    .venv/bin/python -m pip install --quiet -e ".[test]"
else
    .venv/bin/python -m pip install --quiet -e .
fi
# pip compiles what it copies into site-packages, but an editable install leaves qcllp's own
# modules as source: compile them once here, so a CLI run or a service start reads bytecode
# instead of compiling some 200 modules (every time where PYTHONDONTWRITEBYTECODE is set, as on
# CI). A module edited later is compiled afresh by Python; a stale file is never used.
.venv/bin/python -m compileall -q qcllp

# apt_install PACKAGE PURPOSE SKIP_NOTE [APT_OPTION...]: install a system package when root with
# apt-get, else say which tests will skip. The package index is fetched once.
apt_updated=0
apt_install() {
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "installing $1 for $2 (apt-get)" >&2
        export DEBIAN_FRONTEND=noninteractive
        if (( ! apt_updated )); then
            apt-get update -qq
            apt_updated=1
        fi
        apt-get install -y -qq "${@:4}" "$1" >/dev/null
    else
        echo "$3" >&2
    fi
}

if (( want_tests )) && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
        && ! command -v initdb >/dev/null 2>&1; then
    apt_install postgresql "the engine tests" \
        "PostgreSQL binaries not found and apt-get not usable: PostgreSQL tests will skip"
fi
if (( want_tests )) && ! command -v chromium >/dev/null 2>&1; then
    apt_install chromium "the HTML report and bay page tests" \
        "chromium not found and apt-get not usable: the browser tests will skip"
fi
# Debian's mosquitto and prometheus packages enable their servers, and start them where
# services may start (under systemd, or by the init script unless a policy-rc.d forbids it, as
# Docker images' does); the tests start their own broker and need only promtool, so a server a
# package started is stopped and disabled again.
stop_server() {
    if [[ $(id -u) -ne 0 ]]; then
        return 0
    fi
    if [[ -d /run/systemd/system ]]; then
        systemctl disable --now "$1.service" >/dev/null 2>&1 || true
    elif [[ -x /etc/init.d/$1 ]]; then
        "/etc/init.d/$1" stop >/dev/null 2>&1 || true
        update-rc.d "$1" disable >/dev/null 2>&1 || true
    fi
}
if (( want_tests )) && ! command -v mosquitto >/dev/null 2>&1 && [[ ! -x /usr/sbin/mosquitto ]]; then
    apt_install mosquitto "the MQTT intake and flag tests" \
        "mosquitto not found and apt-get not usable: the MQTT tests will skip"
    stop_server mosquitto
fi
if (( want_tests )) && ! command -v promtool >/dev/null 2>&1; then
    # without its recommends: prometheus-node-exporter would be one more service started
    apt_install prometheus "the alert rules' test" \
        "promtool not found and apt-get not usable: the alert rules test will skip" \
        --no-install-recommends
    command -v promtool >/dev/null 2>&1 && stop_server prometheus
fi
echo "qcllp is set up in $(pwd)/.venv" >&2
