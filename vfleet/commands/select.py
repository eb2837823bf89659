"""`vfleet select --model MODEL`: detect this host's GPUs and print the profile that fits it.

VFLEET_PROFILE=MODEL/PLATFORM or VFLEET_PLATFORM=PLATFORM override the detection.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from vfleet.detect import select
from vfleet.gpus import detect_host
from vfleet.profiles import Catalog


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(name, help="pick the profile for this host", description=__doc__)
    p.add_argument("--model", default="", help="model, e.g. glm-5.3-flash (see `vfleet profiles`)")
    p.add_argument("--json", action="store_true", help="print the detection and the choice as JSON")
    return p


def run(args: argparse.Namespace) -> int:
    host = detect_host()
    profile = select(Catalog(), args.model, host=host)
    if args.json:
        print(
            json.dumps(
                {
                    "profile": profile.name,
                    "host": {
                        "vendor": host.vendor,
                        "arch": host.arch,
                        "gpus": host.names,
                        "source": host.source,
                    },
                }
            )
        )
    else:
        print(f"detected: {host.describe()}", file=sys.stderr)
        print(profile.name)
    return 0
