#!/bin/sh
# The step every vfleet image shares (cpu, cuda, rocm) before its patch layer, written once:
#   steps.sh install-vfleet [WHEELS]  pip-install /opt/vfleet/src into the Python that holds vLLM
# The patch layer itself is one vfleet call per step in each Dockerfile: `vfleet patches apply` and
# `vfleet patches verify --import-check`.
set -eu
step="${1:?usage: steps.sh install-vfleet [WHEELS]}"
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
  *)
    echo "steps.sh: unknown step $step (the patch and verify steps are now \`vfleet patches apply|verify\`)" >&2
    exit 2
    ;;
esac
