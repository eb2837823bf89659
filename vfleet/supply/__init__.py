"""Supply chain of vfleet's images: SBOM, vulnerability report and signed provenance (docs/supply-chain.md).

One module a job:
  store       where an image's records live: STORE/<image-id hex>/ (the image config digest)
  identity    which digest names a reference: the registry manifest digest, or the local image ID
  registry    a registry's login challenge answered with docker's credentials (config.json, helpers)
  sbom        syft's CycloneDX SBOM of the image, with the vfleet patch set added as components
  audit       pip-audit of the Python packages the SBOM lists ("unknown" when its database is unreachable)
  provenance  materials of a build, the in-toto Statement, DSSE signing with an ed25519 key
  policy      the vulnerability policy: what a report's findings (or its "unknown") do to verify
  check       `vfleet image verify`: every check, each failure named
  attest      what `vfleet image build` runs after a build, and `vfleet image sign`
"""

from vfleet.supply.store import SupplyError, default_store, record_dir

__all__ = ["SupplyError", "default_store", "record_dir"]
