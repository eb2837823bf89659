#!/bin/sh
# The build steps every vfleet image shares (cpu, cuda, rocm), written once and run by the Dockerfiles.
# Each step stops the build on the first error.
#   steps.sh install-vfleet [WHEELS]  pip-install /opt/vfleet/src into the Python that holds vLLM
#   steps.sh patch FAMILY          vfleet patches apply onto that vLLM (site-packages asked from Python)
#   steps.sh verify FAMILY         manifest check, compile of the patched modules, import where torch exists
set -eu
step="${1:?usage: steps.sh install-vfleet|patch FAMILY|verify FAMILY}"
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
  patch|verify)
    family="${2:?steps.sh $step needs the image family: cpu, cuda or rocm}"
    exec vfleet image step "$step" --family "$family"
    ;;
  *)
    echo "steps.sh: unknown step $step" >&2
    exit 2
    ;;
esac
