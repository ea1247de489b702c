#!/usr/bin/env bash
# Create the peer virtual environment (vLLM, SGLang, LMDeploy streaming parsers) used by
# `python -m benchmarks` to measure the peers next to deltaflow. It stays outside the
# project's dependencies: nothing in deltaflow imports it.
#
# Usage: bash benchmarks/peers/setup.sh [VENV]
#   VENV defaults to $DELTAFLOW_PEERS_VENV, else ../peers-venv beside the checkout.
#   The package set is ../shared/peers/requirements-peers.txt (an exact `pip freeze`,
#   installed with --no-deps; set DELTAFLOW_PEERS_REQUIREMENTS to use another file).
#   Needs Python 3.11 (the set was frozen with CPython 3.11.7) and about 3 GB of disk
#   (torch CPU, xgrammar/triton are imported by vLLM's parser modules).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${1:-${DELTAFLOW_PEERS_VENV:-$repo/../peers-venv}}"
req="${DELTAFLOW_PEERS_REQUIREMENTS:-$repo/../shared/peers/requirements-peers.txt}"
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null 2>&1 || python=python3

if [[ ! -f "$req" ]]; then
    echo "no requirements file at $req (set DELTAFLOW_PEERS_REQUIREMENTS)" >&2
    exit 1
fi
if [[ -x "$venv/bin/python" ]]; then
    echo "peer venv already exists: $venv"
else
    "$python" -m venv "$venv"
fi
"$venv/bin/pip" install --no-deps -r "$req"
"$venv/bin/python" - <<'PY'
from importlib.metadata import version
for pkg in ("vllm", "sglang", "lmdeploy"):
    try:
        print(f"{pkg} {version(pkg)}")
    except Exception as exc:  # noqa: BLE001
        print(f"{pkg}: not installed ({exc})")
PY
echo "peer venv ready: $venv (python -m benchmarks runs the peers when it exists)"
