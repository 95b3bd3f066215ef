#!/usr/bin/env bash
# The TPU install exactly as README's table says, in a fresh venv on this machine (no TPU):
# tensorflow-tpu first, as a TPU VM image, Colab or Kaggle has it (with the newest libtpu, which
# its own requirement takes), then bertfit's two commands. Then scripts/tpu_install_check.py
# checks that the TPU build is the only TensorFlow and trains a tiny model on the CPU.
# Usage: scripts/tpu_install_check.sh [VENV]   (make test-tpu-install; .ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv-tpu}
export PIP_NO_CACHE_DIR=1
rm -rf "$venv"
# The venv is only this check's (2 GB): it goes when the check ends, passed or failed.
trap 'rm -rf "$venv"' EXIT
python3 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
"$venv/bin/pip" install -q tensorflow-tpu==2.20.0
"$venv/bin/pip" install -q -e '.[tpu]'
"$venv/bin/pip" install -q --no-deps 'tensorflow-text==2.20.*'
"$venv/bin/python" scripts/tpu_install_check.py
