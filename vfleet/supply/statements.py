"""The one home of vfleet's signed statements: in-toto Statements (v1) in DSSE envelopes, signed with
ed25519 keys, and which keys each kind of statement is trusted from (its role).

A role is a kind of statement and the keys trusted to sign it:

  provenance  an image build's provenance (SLSA provenance v1)        `vfleet image build/sign`
  verify      a boot-verify run's verification summary (SLSA VSA v1)  `vfleet verify --sign-key`
  ab          a promotion A/B's summary                               `vfleet ab --promotion --sign-key`
  deploy      a node's deployment record (deployed.json)              the controller, at deploy time
  model       a model directory's manifest (OpenSSF model signing)    `vfleet model manifest --sign-key`

A key is trusted for the roles it is declared for, and only those: `--trusted-key ROLE[,ROLE...]=PUB`
(repeatable), else `VFLEET_TRUSTED_KEYS_<ROLE>` (files or directories of *.pub, separated by ':'). A
signature made by a key of another role does not verify, and the error says which role the key has; a
statement whose type is not its role's is refused too, whoever signed it. The old `VFLEET_TRUSTED_KEYS`,
one list for every role, is refused with the per-role variables to use instead (docs/supply-chain.md,
"Keys per role").

Keys: the private key is a PEM (PKCS#8) ed25519 key the operator keeps in a file or a secret mount; it is
read only to sign, never copied, logged or written anywhere. Public keys are PEM SubjectPublicKeyInfo.
cryptography and securesystemslib (controller tools, not in the images) are imported where a key is used,
so that the role table and its constants load anywhere.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vfleet import settings
from vfleet.models.manifest import PREDICATE as MODEL_PREDICATE
from vfleet.supply.store import SupplyError

if TYPE_CHECKING:
    from securesystemslib.signer import CryptoSigner, Key  # type: ignore[attr-defined]

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
LEGACY_ENV = "VFLEET_TRUSTED_KEYS"
DOCS = 'docs/supply-chain.md, "Keys per role"'


@dataclass(frozen=True)
class Role:
    name: str
    predicate_type: str
    what: str  # the statements it signs, for messages

    @property
    def env(self) -> str:
        return f"{LEGACY_ENV}_{self.name.upper()}"


PROVENANCE = Role("provenance", "https://slsa.dev/provenance/v1", "image build provenance")
VERIFY = Role("verify", "https://slsa.dev/verification_summary/v1", "boot-verify verification summaries")
AB = Role("ab", "https://github.com/vfleet/vfleet/ab/v1", "promotion A/B summaries")
DEPLOY = Role("deploy", "https://github.com/vfleet/vfleet/deploy-record/v1", "nodes' deployment records")
#: The weights' manifest (vfleet.models.manifest, OpenSSF model signing's predicate), signed by the controller.
MODEL = Role("model", MODEL_PREDICATE, "model manifests")
ROLES: dict[str, Role] = {r.name: r for r in (PROVENANCE, VERIFY, AB, DEPLOY, MODEL)}


def how_to_trust(role: Role) -> str:
    """How an operator declares a key for ROLE, for the messages of a gate that has none."""
    return f"declare the public key that signs {role.what} with --trusted-key {role.name}=PUB or {role.env}=PUB"


# -- declaring keys by role -------------------------------------------------------------------------


def parse_spec(spec: str, default: Role | None = None) -> tuple[tuple[Role, ...], Path]:
    """ROLE[,ROLE...]=PUB -> (roles, path). A bare PUB is DEFAULT's (a command that checks one kind of
    statement only); without DEFAULT it is an error naming the fix."""
    names, sep, path = spec.partition("=")
    if not sep or "/" in names:
        if default is None:
            raise SupplyError(
                f"trusted key {spec!r} names no role: a key is trusted for the statements of its roles only; write "
                f"ROLE=PUB, ROLE one of {', '.join(ROLES)} (several: verify,ab=PUB) ({DOCS})"
            )
        return (default,), Path(spec).expanduser()
    roles: list[Role] = []
    for name in names.split(","):
        if name.strip() not in ROLES:
            raise SupplyError(f"trusted key {spec!r}: {name.strip()!r} is not a role; roles: {', '.join(ROLES)}")
        roles.append(ROLES[name.strip()])
    if not path:
        raise SupplyError(f"trusted key {spec!r} names no public key file after '='")
    return tuple(roles), Path(path).expanduser()


def normalized(specs: list[str], default: Role | None = None) -> list[str]:
    """SPECS as ROLE,...=ABSOLUTE-PATH, each file checked to exist (what a rollout passes to its plays)."""
    out: list[str] = []
    for spec in specs:
        roles, path = parse_spec(spec, default)
        if not path.is_file():
            raise SupplyError(f"--trusted-key {spec}: {path} is no such file; name the public key (PEM) file")
        out.append(f"{','.join(r.name for r in roles)}={path.resolve()}")
    return out


def _expand(items: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in items:
        out += sorted(p.glob("*.pub")) if p.is_dir() else [p]
    return out


def key_paths(
    given: list[str], default: Role | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, list[Path]]:
    """Role -> public key files: the keys GIVEN for a role (--trusted-key ROLE=PUB), else its
    VFLEET_TRUSTED_KEYS_<ROLE>. VFLEET_TRUSTED_KEYS (one list for every role) is an error naming the fix."""
    env = settings.load(environ)
    if env.trusted_keys:
        raise SupplyError(
            f"{LEGACY_ENV} is no longer read: it trusted every key for every kind of statement. Declare each key "
            f"for the statements it signs: {', '.join(r.env for r in ROLES.values())} (the same file in "
            f"several is allowed), or --trusted-key ROLE=PUB; then unset {LEGACY_ENV} ({DOCS})"
        )
    flagged: dict[str, list[Path]] = {}
    for spec in given:
        roles, path = parse_spec(spec, default)
        for role in roles:
            flagged.setdefault(role.name, []).append(path)
    declared = {
        PROVENANCE.name: env.trusted_keys_provenance,
        VERIFY.name: env.trusted_keys_verify,
        AB.name: env.trusted_keys_ab,
        DEPLOY.name: env.trusted_keys_deploy,
        MODEL.name: env.trusted_keys_model,
    }
    out: dict[str, list[Path]] = {}
    for name in ROLES:
        items = flagged.get(name) or [Path(i).expanduser() for i in (declared[name] or "").split(os.pathsep) if i]
        out[name] = _expand(items)
    return out


@dataclass(frozen=True)
class Keyring:
    """The public keys trusted for each role (name -> keys)."""

    by_role: Mapping[str, tuple[Key, ...]] = field(default_factory=dict)

    def of(self, role: Role) -> list[Key]:
        return list(self.by_role.get(role.name, ()))

    def plus(self, role: Role, keys: list[Key]) -> Keyring:
        return Keyring({**self.by_role, role.name: (*self.by_role.get(role.name, ()), *keys)})


def keyring(given: list[str], default: Role | None = None) -> Keyring:
    """The keys of GIVEN (--trusted-key specs) and the environment, each role's loaded (SupplyError naming
    a bad file). A role with no key is empty: the gate that needs one refuses and says how to declare it."""
    loaded: dict[Path, Key] = {}
    by_role: dict[str, tuple[Key, ...]] = {}
    for name, paths in key_paths(given, default).items():
        for p in paths:
            if p not in loaded:
                loaded[p] = load_public_key(p)
        by_role[name] = tuple(loaded[p] for p in paths)
    return Keyring(by_role)


def trusting(role: Role, keys: list[Key]) -> Keyring:
    """A keyring that trusts KEYS for ROLE alone."""
    return Keyring({role.name: tuple(keys)})


# -- keys -------------------------------------------------------------------------------------------


def load_private_key(path: Path) -> CryptoSigner:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: PLC0415
    from cryptography.hazmat.primitives.serialization import load_pem_private_key  # noqa: PLC0415
    from securesystemslib.signer import CryptoSigner, SSlibKey  # type: ignore[attr-defined]  # noqa: PLC0415

    try:
        key = load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise SupplyError(
            f"signing key {path}: cannot read an unencrypted PEM private key ({type(exc).__name__})"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SupplyError(f"signing key {path} is not an ed25519 key (`openssl genpkey -algorithm ed25519`)")
    return CryptoSigner(key, SSlibKey.from_crypto(key.public_key()))


def create_private_key(path: Path) -> None:
    """A new ed25519 key at PATH (PEM, mode 0600, its directory 0700); a key another process made first is
    kept (os.link does not replace)."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: PLC0415

    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def load_public_key(path: Path) -> Key:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey  # noqa: PLC0415
    from cryptography.hazmat.primitives.serialization import load_pem_public_key  # noqa: PLC0415
    from securesystemslib.signer import SSlibKey  # type: ignore[attr-defined]  # noqa: PLC0415

    try:
        key = load_pem_public_key(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise SupplyError(f"trusted key {path}: cannot read a PEM public key ({type(exc).__name__})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise SupplyError(f"trusted key {path} is not an ed25519 public key")
    return SSlibKey.from_crypto(key)


# -- signing and opening ----------------------------------------------------------------------------


def sign(stmt: dict[str, Any], signer: CryptoSigner) -> dict[str, Any]:
    """The DSSE envelope of STMT signed by SIGNER."""
    from securesystemslib.dsse import Envelope  # noqa: PLC0415

    env = Envelope(json.dumps(stmt, sort_keys=True).encode(), PAYLOAD_TYPE, {})
    env.sign(signer)
    return dict(env.to_dict())


def open_statement(data: dict[str, Any], role: Role, keys: Keyring) -> tuple[dict[str, Any], str]:
    """(statement, keyid that signed it) when a key trusted for ROLE signed the envelope DATA and the
    statement is ROLE's kind; else SupplyError naming why: no key for the role, a key of another role
    (named), an unknown signer, or a statement of another type."""
    from securesystemslib.dsse import Envelope  # noqa: PLC0415
    from securesystemslib.exceptions import VerificationError  # noqa: PLC0415

    try:
        env = Envelope.from_dict(data)
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        raise SupplyError(f"not a DSSE envelope ({exc})") from None
    if env.payload_type != PAYLOAD_TYPE:
        raise SupplyError(f"payload type {env.payload_type!r}, not {PAYLOAD_TYPE}")
    trusted = keys.of(role)
    if not trusted:
        raise SupplyError(f"no key is trusted for the {role.name} role: {how_to_trust(role)}")
    try:
        accepted = env.verify(trusted, 1)
    except VerificationError:
        raise SupplyError(_not_trusted(env, role, keys)) from None
    try:
        stmt = json.loads(env.payload)
    except ValueError:
        raise SupplyError("its payload is not JSON") from None
    if not isinstance(stmt, dict) or stmt.get("_type") != STATEMENT_TYPE:
        raise SupplyError("its payload is not an in-toto Statement")
    if stmt.get("predicateType") != role.predicate_type:
        raise SupplyError(
            f"a {stmt.get('predicateType')!r} statement, not one of {role.what} ({role.predicate_type}): a key of "
            f"the {role.name} role signs only those"
        )
    return stmt, sorted(accepted)[0]


def _not_trusted(env: Any, role: Role, keys: Keyring) -> str:
    """Why no key of ROLE verified ENV: the roles whose keys do verify it, when any."""
    from securesystemslib.exceptions import VerificationError  # noqa: PLC0415

    signed_by = ", ".join(sorted(env.signatures)) or "nobody"
    others = []
    for other in ROLES.values():
        if other is role or not keys.of(other):
            continue
        try:
            env.verify(keys.of(other), 1)
        except VerificationError:
            continue
        others.append(other.name)
    if others:
        return (
            f"signed by keyid {signed_by}, a key of the {' and '.join(others)} role, not of the {role.name} role "
            f"({role.what}): a key signs only the statements of its roles; if this key is meant to sign "
            f"{role.what}, declare it: --trusted-key {role.name}=PUB or {role.env}"
        )
    trusted = ", ".join(k.keyid for k in keys.of(role))
    return f"not signed by a trusted key of the {role.name} role (signed by keyid {signed_by}; trusted: {trusted})"
