"""The sampler registry (issue 45, item 4): a sampler registered in one place is known everywhere a sampler is
named, and its refusals read the registry."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from naspipe.runspec.spec import RunSpec
from naspipe.sequences.samplers import (
    Sampler,
    SamplerError,
    fixed_sampler,
    make_stream,
    parse_sampler,
    register_sampler,
    sampler_forms,
    sampler_help,
    sampler_names,
    unregister_sampler,
)
from naspipe.sequences.sequence import OnlineStream
from naspipe.spaces.space import resolve_space


class _Cyclic:
    def __init__(self, space, seed: int, n: int, step: int):  # noqa: ANN001
        self.space, self.seed, self.n, self.step = space, seed, n, step

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, j: int) -> tuple[int, ...]:
        if not 0 <= j < self.n:
            raise IndexError(j)
        return tuple((self.seed + self.step * j) % b.k for b in self.space.blocks)


def _step(arg: str | None) -> int:
    if arg is None:
        return 1
    if not arg.strip().isdigit() or int(arg) < 1:
        raise SamplerError("use cyclic:STEP with a whole number STEP >= 1")
    return int(arg)


class _Never:
    lag = 2

    def __init__(self, space) -> None:  # noqa: ANN001
        self.space = space

    def propose(self, j: int, results: object) -> tuple[int, ...]:
        return tuple(0 for _ in self.space.blocks)


@pytest.fixture
def cyclic() -> Iterator[Sampler]:
    s = register_sampler(Sampler("cyclic", _Cyclic, parse=_step, metavar="STEP", help=" (steps through)"))
    online = register_sampler(Sampler("zeros", lambda space, seed, n, _: OnlineStream(space, _Never(space), n),
                                      online=True))
    yield s
    unregister_sampler(s.name)
    unregister_sampler(online.name)


def test_the_built_ins_are_registered_in_order() -> None:
    assert sampler_names()[:4] == ["uniform", "fair", "spread", "evolution"]
    assert sampler_forms(full=True) == "uniform, fair, spread[:fair|uniform] or evolution[:LAG]"
    assert sampler_forms(online=False) == "uniform, fair or spread[:BASE]"


def test_a_registered_sampler_is_known_everywhere(cyclic: Sampler) -> None:
    space = resolve_space("tiny-transformer")
    assert str(parse_sampler(" Cyclic:2 ")) == "cyclic:2" and str(parse_sampler("cyclic")) == "cyclic:1"
    assert list(make_stream(space, 1, 3, "cyclic:2")) == [tuple((1 + 2 * j) % b.k for b in space.blocks)
                                                         for j in range(3)]
    spec = RunSpec.create(space, stages=2, subnets=4, sampler="cyclic:2")
    assert spec.sampler == "cyclic:2" and not spec.replayed
    assert list(spec.stream) == list(make_stream(space, 0, 4, "cyclic:2"))
    assert "cyclic[:STEP] (steps through)" in sampler_help(online=False)
    assert sampler_help().endswith("or evolution[:LAG], generated at run time from the losses of subnets <= j - LAG "
                                   "(default LAG 16), zeros")
    with pytest.raises(SamplerError, match=r"bad sampler 'cyclic:0': use cyclic:STEP"):
        parse_sampler("cyclic:0")
    with pytest.raises(SamplerError, match=r"choose uniform, fair, spread\[:fair\|uniform\], evolution\[:LAG\], "
                                           r"cyclic\[:STEP\] or zeros$"):
        parse_sampler("nope")


def test_a_registered_online_sampler_is_refused_where_the_sequence_is_fixed(cyclic: Sampler) -> None:
    assert str(fixed_sampler("cyclic:3", "x")) == "cyclic:3"
    with pytest.raises(SamplerError, match="^sampler zeros needs it fixed$"):
        fixed_sampler("zeros", "needs it fixed")
    with pytest.raises(SamplerError, match="^--sampler Zeros needs it fixed$"):
        fixed_sampler("Zeros", "needs it fixed", "--sampler Zeros")


def test_a_name_is_registered_once() -> None:
    with pytest.raises(SamplerError, match="already registered"):
        register_sampler(Sampler("fair", _Cyclic))
    with pytest.raises(SamplerError, match="bad sampler name"):
        Sampler("a:b", _Cyclic)
