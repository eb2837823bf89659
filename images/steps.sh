#!/bin/sh
# The steps vfleet images share, written once:
#   steps.sh install-vfleet [WHEELS]  pip-install /opt/vfleet/src into the Python that holds vLLM (every image)
#   steps.sh download-kernels         `vllm download-kernels` where the base has it (the GPU images, after
#                                     their patch layer): 0.34 and later fetch FlashInfer's kernels that way
# The patch layer itself is one vfleet call per step in each Dockerfile: `vfleet patches apply` and
# `vfleet patches verify --import-check`.
set -eu
step="${1:?usage: steps.sh install-vfleet [WHEELS] | download-kernels}"
case "$step" in
  install-vfleet)
    echo "vfleet-build: installing vfleet into $(command -v python3)"
    # Offline and pinned: dependencies are already in the base (pydantic, PyYAML come with vLLM); the
    # build backend (setuptools, pinned in pyproject.toml) comes from WHEELS if given, else from the base.
    if [ -n "${2:-}" ]; then
      python3 -m pip install --no-cache-dir --no-deps --no-index --find-links "$2" /opt/vfleet/src
    else
      python3 -m pip install --no-cache-dir --no-deps --no-index --no-build-isolation /opt/vfleet/src
    fi
    rm -rf /opt/vfleet/src/build /opt/vfleet/src/*.egg-info
    vfleet --version
    ;;
  download-kernels)
    vllm_dir="$(python3 -c 'import importlib.util as u; print(u.find_spec("vllm").submodule_search_locations[0])')"
    version="$(python3 -c 'import importlib.metadata as m; print(m.version("vllm"))')"
    if [ ! -f "$vllm_dir/entrypoints/cli/download_kernels.py" ]; then
      echo "vfleet-build: vLLM $version has no \`vllm download-kernels\`: its kernels come with its pip dependencies"
    elif ! python3 -c 'import torch' 2>/dev/null; then
      # Only the local stand-in base (no torch, no vllm CLI) lands here; every vLLM image has torch.
      echo "vfleet-build: NOTICE: no torch in this base (a stand-in?): skipped \`vllm download-kernels\` of vLLM $version"
    else
      echo "vfleet-build: vllm download-kernels (vLLM $version)"
      vllm download-kernels  # a failure fails the build: an air-gapped node could not fetch them later
    fi
    ;;
  *)
    echo "steps.sh: unknown step $step (the patch and verify steps are now \`vfleet patches apply|verify\`)" >&2
    exit 2
    ;;
esac
