"""Image references are read in one place (vfleet.imageref.parse): the supply chain's registry host and path
and a report's repository for docker's RepoDigests come from the same parts."""

from __future__ import annotations

import pytest

from vfleet.imageref import ImageRef, parse
from vfleet.supply.identity import split_ref
from vfleet.supply.store import SupplyError

D = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("ref", "want", "repo"),
    [
        (
            "localhost:5000/vfleet-cpu:1",
            ImageRef("localhost:5000", "vfleet-cpu", "1", None),
            "localhost:5000/vfleet-cpu",
        ),
        (f"registry.example.com/a/b@{D}", ImageRef("registry.example.com", "a/b", None, D), "registry.example.com/a/b"),
        (f"localhost/x:t@{D}", ImageRef("localhost", "x", "t", D), "localhost/x"),
        # no registry part: a first part without a dot or a port is a path (Docker Hub, or this daemon only)
        ("myorg/repo:tag", ImageRef("", "myorg/repo", "tag", None), "myorg/repo"),
        ("vfleet-cpu", ImageRef("", "vfleet-cpu", None, None), "vfleet-cpu"),
        ("x:5000", ImageRef("", "x", "5000", None), "x"),
        # a port is not a tag
        ("localhost:5000/x", ImageRef("localhost:5000", "x", None, None), "localhost:5000/x"),
    ],
)
def test_parts_of_a_reference(ref: str, want: ImageRef, repo: str) -> None:
    assert parse(ref) == want
    assert parse(ref).repo == repo


def test_the_tag_a_registry_is_asked_for() -> None:
    assert parse("r.example.com/x").tag_or_latest == "latest"
    assert parse(f"r.example.com/x@{D}").tag_or_latest == ""
    assert split_ref("r.example.com/x") == ("r.example.com", "x", "latest", "")
    assert split_ref(f"r.example.com/x:1@{D}") == ("r.example.com", "x", "1", D)


@pytest.mark.parametrize("ref", ["", "r.example.com/", f"@{D}"])
def test_a_reference_without_a_repository_is_refused_by_the_supply_chain(ref: str) -> None:
    assert parse(ref).path == ""
    with pytest.raises(SupplyError, match="is not an image reference"):
        split_ref(ref)
