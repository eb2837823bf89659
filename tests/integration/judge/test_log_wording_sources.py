"""Each line the log checks read is printed where vfleet.verify.log.wording.WORDING says, in the real
source of every vLLM base of versions.json: the pinned wheels, fetched and checked against their sha256
(the same cache the rebase report uses, .cache/wheels/). A base that rewords a line the checks wait for
fails here, naming the line, before a healthy server of that base fails a gate (or a faulty one passes
it). Issue 24, item 4."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import REPO

from vfleet.patchset.fetch import fetch_base
from vfleet.pins import load as load_pins
from vfleet.verify.log import wording as logwording

BASES = list(load_pins(REPO / "versions.json").bases)


@pytest.mark.parametrize("base", BASES)
def test_every_line_the_checks_read_is_printed_by_the_base(base: str) -> None:
    tree = fetch_base(base, say=lambda m: None)
    assert logwording.unprinted(base, tree) == []


def test_a_reworded_line_is_named(tmp_path: Path) -> None:
    """The base's tree with one line reworded (as a release might): the wording it no longer prints is
    named, with its file."""
    base = BASES[-1]
    src = fetch_base(base, say=lambda m: None)
    data = logwording.sources()
    target = data[base]["autofit-final-reduced"]
    assert isinstance(target, logwording.Source)
    copy = tmp_path / "vllm"
    f = copy / target.file
    f.parent.mkdir(parents=True)
    shutil.copy(src / "vllm" / target.file, f)
    f.write_text(f.read_text().replace("--max-model-len auto reduced", "--max-model-len auto shortened"))
    problems = logwording.unprinted(base, tmp_path)
    assert f"autofit-final-reduced: vllm/{target.file} of {base} does not print" in "\n".join(problems)
    # the copy holds only that file: every wording printed elsewhere is named as missing, and of that
    # file's wordings only the reworded one
    elsewhere = [s for s in data[base].values() if isinstance(s, logwording.Source) and s.file != target.file]
    assert len(problems) == len(elsewhere) + 1, problems
