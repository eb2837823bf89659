"""Network addresses for tests of what fails: a local port nothing listens on."""

from __future__ import annotations

import socket


def refusing_address() -> str:
    """A local port nothing listens on: bound, then closed, so a connection to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
