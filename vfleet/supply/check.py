"""`vfleet image verify REF`: is REF the image vfleet built, signed by a key we trust, from the pins of
this checkout? Every check is named; the first failure is the one-line reason; a check that could not be
made (its input is missing, or one it depends on failed) is a failure, never a pass.

Checks: digest (REF's digest, asked of its registry or this daemon), record (the store holds the image's
record), signature (a trusted key signed the Statement for this digest), subject (the Statement names
REF's digest and image ID), sbom and vulnerabilities (present, with the digests that were signed),
materials (the base, wheels, versions.json, patch series, patches and profiles match this checkout),
vulnerability-policy (the signed report judged by the vulnerability policy, supply/policy.py: a ``fail``
fails verify, with the IDs and the fix; a ``warn`` passes, and the result says so).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vfleet import pins
from vfleet.digests import sha256_file as file_sha256
from vfleet.digests import tree_digest
from vfleet.errors import VfleetError
from vfleet.images.refs import standin_ref
from vfleet.profiles import Catalog
from vfleet.supply import policy as vpolicy
from vfleet.supply import provenance as prov
from vfleet.supply.identity import Identity, resolve
from vfleet.supply.statements import PROVENANCE, Keyring, how_to_trust, open_statement
from vfleet.supply.store import STATEMENT, SupplyError, envelope_path, record_dir


@dataclass
class Check:
    name: str
    ok: bool
    message: str


#: A byproduct missing from the signed Statement, missing from the record, or changed after signing.
_RECORD_UNLIKE_SIGNED = "The record is not what was signed: rebuild and sign the image, do not edit its record"

#: What to do about each failed check, as the gate's message ends (`vfleet image verify --json`'s `hint`).
HINTS = {
    "digest": "Push the image to the registry the fleet pulls from, or name it by a reference that resolves there",
    "record": "Roll out an image built by `vfleet image build` with this store (--store), or point --store at "
    "the store of the machine that built it",
    "signature": "Sign it with a key declared for the provenance role (--trusted-key provenance=PUB, "
    "vfleet_node_trusted_keys, or VFLEET_TRUSTED_KEYS_PROVENANCE), or roll out an image built and signed from this "
    "checkout",
    "subject": "Roll out the image the signed provenance names, or sign this one (`vfleet image sign REF --key PRIV`)",
    "sbom": _RECORD_UNLIKE_SIGNED,
    "vulnerabilities": _RECORD_UNLIKE_SIGNED,
    "materials": "The image was built from other inputs than this checkout's (base, wheels, series, profiles): "
    "roll out an image built from this checkout, or run the rollout from the checkout it was built from",
    "vulnerability-policy": "Fix what the vulnerability policy names",
}


@dataclass
class Result:
    ref: str
    checks: list[Check] = field(default_factory=list)
    digest: str = ""
    image_id: str = ""
    signer: str = ""
    vulnerabilities: str = ""
    judgement: vpolicy.Judgement | None = None

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    @property
    def reason(self) -> str:
        bad = next((c for c in self.checks if not c.ok), None)
        if bad is None:
            line = f"; {self.judgement.line}" if self.judgement else ""
            return f"verified {self.ref} ({self.digest}): signed by {self.signer}; SBOM and materials match{line}"
        return f"NOT verified {self.ref}: {bad.name}: {bad.message}"

    @property
    def hint(self) -> str:
        """What to do about the first failed check ('' when verified)."""
        bad = next((c for c in self.checks if not c.ok), None)
        return "" if bad is None else HINTS.get(bad.name, "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "verified": self.ok,
            "reason": self.reason,
            "hint": self.hint,
            "digest": self.digest,
            "image_id": self.image_id,
            "signer": self.signer,
            "vulnerabilities": self.vulnerabilities,
            "vulnerability_policy": self.judgement.to_dict() if self.judgement else None,
            "checks": [c.__dict__ for c in self.checks],
        }


def verify(
    ref: str,
    keys: Keyring,
    store: Path,
    home: Path,
    *,
    allow_standin: bool = False,
    rules: vpolicy.Rules | None = None,
) -> Result:
    """RULES: the vulnerability policy to judge the report by; none given is the checkout's for production
    (a caller that does not say which profile runs the image gets the strictest one)."""
    rules = rules or vpolicy.rules(home, production=True)
    res = Result(ref)
    if not keys.of(PROVENANCE):  # nothing could pass: say so before asking the registry anything
        res.checks.append(Check("signature", False, f"no trusted key: {how_to_trust(PROVENANCE)}"))
        return res
    try:
        ident = resolve(ref)
    except SupplyError as exc:
        res.checks.append(Check("digest", False, str(exc)))
        return res
    return verify_identity(ident, keys, store, home, rules, allow_standin=allow_standin)


def verify_identity(
    ident: Identity, keys: Keyring, store: Path, home: Path, rules: vpolicy.Rules, *, allow_standin: bool = False
) -> Result:
    """Every check after the digest: IDENT is what the registry (or this daemon) said REF is."""
    res = Result(ident.ref)

    def fail(name: str, msg: str) -> Result:
        res.checks.append(Check(name, False, msg))
        return res

    res.digest, res.image_id = ident.digest, ident.image_id
    res.checks.append(Check("digest", True, f"{ident.digest} ({ident.kind})"))
    rec = record_dir(store, ident.image_id)
    if not rec.is_dir():
        return fail(
            "record", f"{store} has no record of image {ident.image_id}: not built by `vfleet image build` here"
        )
    res.checks.append(Check("record", True, str(rec)))
    env_path = envelope_path(store, ident.image_id, ident.digest)
    if not env_path.is_file():
        return fail("signature", _unsigned_message(ident, rec))
    try:
        stmt, keyid = open_statement(json.loads(env_path.read_text()), PROVENANCE, keys)
    except (SupplyError, ValueError) as exc:
        return fail("signature", f"{env_path.name}: {exc}")
    res.signer = keyid
    res.checks.append(Check("signature", True, f"signed by trusted keyid {keyid}"))
    problem = _subject_problem(stmt, ident)
    if problem:
        return fail("subject", problem)
    res.checks.append(Check("subject", True, f"names {ident.digest} and image {ident.image_id}"))
    products = {p.get("name"): p for p in stmt.get("predicate", {}).get("runDetails", {}).get("byproducts", [])}
    for name in ("sbom", "vulnerabilities"):
        msg = _byproduct_problem(rec, products.get(name), name)
        if msg:
            return fail(name, msg)
        res.checks.append(Check(name, True, f"{products[name]['uri']} matches the signed sha256"))
    report = json.loads((rec / products["vulnerabilities"]["uri"]).read_text())
    report = report if isinstance(report, dict) else {}
    res.vulnerabilities = str(report.get("status", ""))
    try:
        problems = material_problems(stmt, home, allow_standin=allow_standin)
    except (OSError, VfleetError) as exc:
        return fail("materials", f"cannot read this checkout's pins ({home}): {exc}")
    if problems:
        return fail("materials", "; ".join(problems))
    res.checks.append(Check("materials", True, f"match {home}"))
    res.judgement = vpolicy.judge(report, rules)
    res.checks.append(Check("vulnerability-policy", res.judgement.verdict != "fail", res.judgement.line))
    return res


def _unsigned_message(ident: Identity, rec: Path) -> str:
    others = sorted(p.name.split(".", 1)[0] for p in (rec / "provenance").glob("*.dsse.json"))
    what = "the image is unsigned" if not others else f"signed only for sha256:{', sha256:'.join(others)}"
    if not (rec / STATEMENT).is_file():
        return f"{what}, and its record has no Statement to sign"
    return f"no signed provenance for {ident.digest}: {what} (`vfleet image sign {ident.ref} --key PRIV`)"


def _subject_problem(stmt: dict[str, Any], ident: Identity) -> str:
    # Its type is the provenance role's: statements.open_statement checked it.
    subjects = stmt.get("subject") or []
    want = ident.digest.split(":", 1)[1]
    for s in subjects:
        if s.get("digest", {}).get("sha256") == want:
            if s.get("annotations", {}).get("imageId") != ident.image_id:
                return f"the subject's image ID is {s.get('annotations', {}).get('imageId')}, REF's is {ident.image_id}"
            return ""
    named = ", ".join("sha256:" + str(s.get("digest", {}).get("sha256")) for s in subjects) or "nothing"
    return f"the signed provenance names {named}, but {ident.ref} is {ident.digest}"


def _byproduct_problem(rec: Path, item: dict[str, Any] | None, name: str) -> str:
    if not item:
        return f"the signed Statement records no {name}"
    path = rec / str(item["uri"])
    if not path.is_file():
        return f"{path} is missing (the signed Statement records sha256:{item['digest']['sha256']})"
    got = file_sha256(path)
    if got != item["digest"]["sha256"]:
        return f"{path} is sha256:{got}, not the signed sha256:{item['digest']['sha256']} (changed after signing)"
    return ""


def material_problems(stmt: dict[str, Any], home: Path, *, allow_standin: bool = False) -> list[str]:
    """What in the Statement's materials differs from the checkout HOME (empty: all match)."""
    build = stmt.get("predicate", {}).get("buildDefinition", {})
    family = str(build.get("externalParameters", {}).get("family", ""))
    mats = {str(m.get("name")): m for m in build.get("resolvedDependencies", [])}
    pinned = pins.load(home / "versions.json")
    if family not in pinned.base_images:
        return [f"unknown family {family!r}"]
    # The vLLM base the image was built on, as its signed build labels name it: one this checkout's
    # versions.json knows, or the image is refused (a controller must not roll out a base it cannot check).
    base = str(build.get("internalParameters", {}).get("labels", {}).get("VLLM_VERSION", ""))
    if not base:
        return ["the provenance names no vLLM base (build label VLLM_VERSION): not an image `vfleet image build` made"]
    if base not in pinned.bases:
        return [
            f"the image is built on vLLM {base}, a base this checkout's versions.json does not know (bases: "
            f"{', '.join(pinned.bases)}): update the controller's checkout to a release that has it, or roll out "
            "an image of a known base"
        ]
    pin = pinned.bases[base].base_images.get(family, pinned.base_images[family])
    expect = {
        "versions.json": file_sha256(home / "versions.json"),
        "patch-series": prov.patch_series_digest(home, family, base),
        "patches": tree_digest([home / "patches"], home).split(":", 1)[1],
        "profiles": tree_digest([home / "serve_configs"], home).split(":", 1)[1],
    }
    if family == "cpu":
        expect["requirements"] = file_sha256(home / "requirements" / "cpu.txt")
    problems = []
    for name, want in expect.items():
        got = mats.get(name, {}).get("digest", {}).get("sha256")
        if got != want:
            problems.append(f"{name} is sha256:{got}, this checkout's is sha256:{want}")
    problems += _base_problems(mats.get("base-image"), pin, standin_ref(base) if allow_standin else "")
    if family == "cpu":
        problems += wheel_problems(mats, home, pinned)
    return problems


def _base_problems(mat: dict[str, Any] | None, pin: Any, standin: str) -> list[str]:
    if not mat:
        return ["no base-image material"]
    ref = str(mat.get("uri", "")).removeprefix("docker-image://")
    if standin and ref == standin:
        return []
    if ref != pin.ref:
        hint = "" if standin else " (a stand-in base passes only with --allow-standin)"
        return [f"base image is {ref}, versions.json pins {pin.ref}{hint}"]
    if pin.digest and mat.get("digest", {}).get("sha256") != pin.digest.split(":", 1)[-1]:
        return [f"base image digest is sha256:{mat.get('digest', {}).get('sha256')}, versions.json pins {pin.digest}"]
    return []


def _dist(filename: str) -> tuple[str, str]:
    name, version = filename.split("-")[:2]
    return name.lower().replace("_", "-").replace(".", "-"), version


def wheel_problems(mats: dict[str, dict[str, Any]], home: Path, pinned: Any) -> list[str]:
    """The wheels must be the ones requirements/cpu.txt and versions.json pin, with the pinned sha256."""
    wheels = {n.removeprefix("wheel:"): m for n, m in mats.items() if n.startswith("wheel:")}
    by_dist: dict[str, list[str]] = {}
    for filename in wheels:
        by_dist.setdefault(_dist(filename)[0], []).append(filename)
    problems = []
    for line in (home / "requirements" / "cpu.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" not in line:
            continue
        name, version = (s.strip() for s in line.split("==", 1))
        dist = name.lower().replace("_", "-")
        found = by_dist.get(dist, [])
        if [f for f in found if _dist(f)[1] != version] or not found:
            problems.append(f"wheels for {dist}: {', '.join(found) or 'none'}; requirements/cpu.txt pins {version}")
    for dist, w in pinned.wheels.items():
        if dist in by_dist or w.filename in wheels:
            got = wheels.get(w.filename, {}).get("digest", {}).get("sha256")
            if got != w.sha256:
                problems.append(f"wheel {w.filename} is sha256:{got}, versions.json pins sha256:{w.sha256}")
    return problems


def fleet_provenance(rows: list[dict[str, Any]], keys: Keyring, store: Path, home: Path) -> None:
    """Add ``provenance: {status, detail, vulnerabilities}`` to each status row (ansible/status.yml) that
    runs an image: the same verification as the rollout's gate, once per distinct image and class of
    profile (the vulnerability policy of the row's profile; an unknown profile is judged as production),
    for the registry digest the node runs, and only if the verified image is the one the node's container
    runs. A reference that cannot be tied to a digest (no registry digest, a registry that does not
    answer) or a run with no trusted key is "unknown", with the reason; it is never "verified". The page
    shows a verified image whose report the policy warns about, or which nobody could check for
    vulnerabilities, as not green (``vulnerabilities``: the policy's verdict, checked and line)."""
    seen: dict[tuple[str, bool], Result] = {}
    for row in rows:
        if row.get("container") in (None, "", "absent", "unreachable") or not row.get("image_id"):
            continue
        image = str(row.get("image") or "")
        refs = ([image] if "@sha256:" in image else []) + [str(d) for d in row.get("repo_digests") or []]
        if not refs:
            row["provenance"] = {"status": "unknown", "detail": f"{image or 'the image'} has no registry digest"}
            continue
        if not keys.of(PROVENANCE):
            row["provenance"] = {"status": "unknown", "detail": f"no trusted key: {how_to_trust(PROVENANCE)}"}
            continue
        production = profile_is_production(str(row.get("profile") or ""), home)
        if (refs[0], production) not in seen:
            rules = vpolicy.rules(home, production)
            seen[(refs[0], production)] = verify(refs[0], keys, store, home, rules=rules)
        row["provenance"] = provenance_entry(seen[(refs[0], production)], str(row["image_id"]))


def provenance_entry(res: Result, runs: str) -> dict[str, Any]:
    """The ``provenance`` of a status row whose container runs image RUNS, from the verification RES of
    the digest it was pulled by."""
    if res.ok and res.image_id != runs:
        entry = {"status": "failed", "detail": f"{res.ref} is image {res.image_id}; the container runs {runs}"}
    elif res.ok:
        entry = {"status": "verified", "detail": res.reason}
    elif res.checks and res.checks[-1].name == "digest":
        entry = {"status": "unknown", "detail": f"could not check: {res.reason}"}
    else:
        entry = {"status": "failed", "detail": res.reason}
    j = res.judgement
    if j is not None:
        vulns = {"verdict": j.verdict, "checked": j.checked, "line": j.line, "allowed": j.allowed, "ignored": j.ignored}
        return {**entry, "vulnerabilities": vulns}
    return entry


def profile_is_production(name: str, home: Path) -> bool:
    """Whether the profile NAME takes production traffic (its model's fact); a name that does not load (none
    given, '?', a profile this checkout does not have) counts as production: the stricter policy."""
    try:
        return Catalog(home / "serve_configs").load(name).production if name else True
    except (VfleetError, OSError, ValueError):
        return True
