"""`vfleet log-check FILE --profile MODEL/PLATFORM`: the boot-verify log check's fault scan on a kept server log.

The node role runs it on the controller against a failed container's kept log (stdout and stderr as lines,
each starting with docker's timestamp, which is set aside before the scan), so that the failure message
names the first fault the log check finds, not the log's last lines (which are mostly the shutdown).
Prints the faults found, one per line, the first first (`--first`: only that one); `no fault found` when
the scan finds none. Exit 0 either way; exit 2 when the file or the profile cannot be read.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from vfleet.errors import VfleetError

#: docker logs --timestamps: RFC 3339 with nanoseconds, then one space, before each line.
DOCKER_TS_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d) ", re.MULTILINE)


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help="the log check's fault scan on a kept server log (the node role runs it)", description=__doc__
    )
    p.add_argument("file", type=Path, help="the server log (docker logs output, with or without --timestamps)")
    p.add_argument("--profile", required=True, help="the serve profile the server ran (MODEL/PLATFORM)")
    p.add_argument("--first", action="store_true", help="print only the first fault")
    return p


def faults(text: str, graphs_expected: bool) -> list[str]:
    """The fault check's events that no allow-list entry excuses, described as boot-verify's report does."""
    from vfleet.verify.log.check import describe_event, scan_faults  # noqa: PLC0415

    return [describe_event(ev) for ev in scan_faults(DOCKER_TS_RE.sub("", text), graphs_expected).denied]


def run(args: argparse.Namespace) -> int:
    from vfleet.profiles import Catalog  # noqa: PLC0415

    try:
        text = args.file.read_text(errors="replace")
    except OSError as exc:
        raise VfleetError(f"{args.file}: cannot read the log ({exc.strerror}); pass the kept log's path") from None
    profile = Catalog().load(args.profile)
    found = faults(text, graphs_expected=profile.verify.graph_mode)
    if not found:
        print("no fault found")
        return 0
    for line in found[:1] if args.first else found:
        print(line)
    return 0
