"""The examples in ``data/`` stay valid: every space loads, the recorded sequence replays with its digest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from naspipe.sequences.sequence import ReplayStream, sequence_digest
from naspipe.spaces.space import load_space

DATA = Path(__file__).resolve().parent.parent / "data"


@pytest.mark.parametrize("path", sorted((DATA / "spaces").glob("*.json")), ids=lambda p: p.name)
def test_example_spaces_load(path):
    space = load_space(path)
    assert space.name == path.stem and space.num_blocks >= 3


def test_recorded_sequence_replays_with_its_digest():
    files = sorted((DATA / "sequences").glob("*.json"))
    assert files
    for f in files:
        data = json.loads(f.read_text())
        space = load_space(DATA / "spaces" / f"{data['space']}.json")
        stream = ReplayStream.from_file(space, f)
        assert sequence_digest(space.name, [list(stream[j]) for j in range(len(stream))]) == data["sha256"]


def test_readme_names_every_example():
    text = (DATA / "README.md").read_text()
    for f in [*(DATA / "spaces").glob("*.json"), *(DATA / "sequences").glob("*.json")]:
        assert f"{f.parent.name}/{f.name}" in text
