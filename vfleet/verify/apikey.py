"""The API key boot-verify sends, taken the way vLLM's server takes it: VLLM_API_KEY.

Sources, first match wins: `--api-key-env VAR` (that variable), `--env-file FILE` (the node's docker env
file, read as `docker run --env-file` reads it), else VLLM_API_KEY from the environment. The key goes
to the suite in memory (it runs in the same process, vfleet.verify.suite), never on a command line or
in another environment; errors and the report name the source, never the value.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from vfleet.errors import VfleetError

VAR = "VLLM_API_KEY"


@dataclass(frozen=True)
class ApiKey:
    value: str | None
    source: str  # for the report: where the key came from, never the key

    def __repr__(self) -> str:  # the key must not reach a log through a repr
        return f"ApiKey(source={self.source!r})"


def parse_env_file(path: Path) -> dict[str, str]:
    """Read a docker env file as `docker run --env-file` does (docker/cli opts/envfile.go): a UTF-8 BOM
    dropped, leading whitespace trimmed, blank lines and lines starting with `#` ignored, `KEY=VALUE`
    split at the first `=` with the value taken as is (no quote processing, no trimming), `KEY` alone
    taken from this process's environment if set. A later line for the same key wins."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise VfleetError(
            f"--env-file {path}: cannot read it ({exc.strerror}); pass the node's docker env file"
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise VfleetError(f"--env-file {path}: not UTF-8 (docker refuses it too)") from None
    out: dict[str, str] = {}
    for number, raw_line in enumerate(text.removeprefix("\ufeff").split("\n"), start=1):
        line = raw_line.removesuffix("\r").lstrip()  # bufio.ScanLines drops one trailing CR
        if not line or line.startswith("#"):
            continue
        name, has_value, value = line.partition("=")
        name = name.lstrip()
        if not name or any(c.isspace() for c in name):
            # The line is not shown: it may hold a secret.
            raise VfleetError(f"--env-file {path}: line {number} is not KEY=VALUE (docker refuses it too)")
        if has_value:
            out[name] = value
        elif name in os.environ:
            out[name] = os.environ[name]
    return out


def add_options(parser: argparse.ArgumentParser) -> None:
    """--api-key-env VAR | --env-file FILE, the sources `resolve` takes, on a command's parser."""
    key = parser.add_mutually_exclusive_group()
    key.add_argument(
        "--api-key-env",
        metavar="VAR",
        help=f"environment variable that holds the API key (default: {VAR}, as vLLM's server reads it)",
    )
    key.add_argument(
        "--env-file",
        type=Path,
        metavar="FILE",
        help=f"the node's docker env file (e.g. /etc/vfleet/secrets.env): the API key is its {VAR}",
    )


def resolve(api_key_env: str | None = None, env_file: Path | None = None, given: ApiKey | None = None) -> ApiKey:
    """The key for a run. ``given`` is one the caller holds in memory (staging: the key it made for the container
    it started), handed down as it is: nothing is read, and no environment variable carries it."""
    if api_key_env and env_file is not None:
        raise VfleetError("give the API key either as --api-key-env VAR or as --env-file FILE, not both")
    if given is not None:
        if api_key_env or env_file is not None:
            raise VfleetError("an API key handed to the run in memory takes no --api-key-env or --env-file as well")
        return given
    if api_key_env:
        value = os.environ.get(api_key_env)
        if not value:
            raise VfleetError(f"--api-key-env {api_key_env}: that environment variable is empty or unset")
        return ApiKey(value, f"environment variable {api_key_env} (--api-key-env)")
    if env_file is not None:
        value = parse_env_file(env_file).get(VAR)
        if not value:
            raise VfleetError(
                f"--env-file {env_file}: no {VAR}=... line (or an empty value); the node's env file must hold the "
                f"key its server was started with"
            )
        return ApiKey(value, f"{VAR} from --env-file {env_file}")
    value = os.environ.get(VAR)
    if value:
        return ApiKey(value, f"environment variable {VAR}")
    return ApiKey(None, f"none ({VAR} is unset; --env-file FILE and --api-key-env VAR not given)")
