"""vfleet: patched, profiled and verified vLLM deployments."""

from pathlib import Path

__version__ = "0.1.0"

#: Repository (or image) root that holds serve_configs/, patches/ and versions.json.
#: Inside an image the entrypoint sets VFLEET_HOME; in a checkout it is the parent of this package.
PACKAGE_DIR = Path(__file__).resolve().parent
