"""The lab: what exists to prove vfleet, not what users run. The Docker-in-Docker test fleet and its
fake images (testfleet, fleetmodel, images, docker, registrylog), the load generator (loadgen), the
stage runner of `make test` (stages) and the test fleet's command line (`python -m lab fleet ...`, behind
`make fleet-up` and friends).

It lives beside the package, not in it: no image copies it (images/Dockerfile.* copy vfleet/ only), no
install of vfleet contains it (pyproject.toml packages vfleet* only), and no module of vfleet imports it
(the import contract "lab" in pyproject.toml). It imports vfleet freely. Run it from the checkout's root,
where `python -m lab` finds it."""
