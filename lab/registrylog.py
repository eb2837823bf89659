"""The requests a fleet registry answered, read from its log (REGISTRY_LOG_LEVEL=info writes one
"response completed" line per request): who fetched which blob, and how many bytes went out.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass


@dataclass
class RegistryRequest:
    time: float  # epoch seconds
    remote: str  # client IP
    method: str
    uri: str
    status: int
    written: int  # response bytes

    FIELD = re.compile(r'(\S+?)=("(?:[^"\\]|\\.)*"|\S+)')

    @classmethod
    def parse(cls, line: str) -> RegistryRequest | None:
        if 'msg="response completed"' not in line:
            return None
        f = {k: v.strip('"') for k, v in cls.FIELD.findall(line)}
        try:
            when = datetime.datetime.fromisoformat(f["time"].replace("Z", "+00:00")[:26] + "+00:00")
            return cls(
                time=when.timestamp(),
                remote=f["http.request.remoteaddr"].rsplit(":", 1)[0],
                method=f["http.request.method"],
                uri=f["http.request.uri"],
                status=int(f["http.response.status"]),
                written=int(f.get("http.response.written", "0")),
            )
        except (KeyError, ValueError):
            return None

    @property
    def blob(self) -> str:
        """The blob digest of a GET .../blobs/sha256:D (a layer or config download), else ''."""
        return self.uri.rsplit("/", 1)[-1] if self.method == "GET" and "/blobs/" in self.uri else ""
