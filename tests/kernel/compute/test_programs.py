"""`settings_program` and `alone_or_program`: the one builder of every system's program of
settings, given the system's facts (refusal, what may differ, how settings become data)."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from privrl.compute.programs import alone_or_program, settings_program
from privrl.config import ConfigError


@dataclass(frozen=True)
class Cfg:
    epsilon: float
    gamma: float = 0.99


def refusal(configs: list[Cfg]) -> str | None:
    return "gamma" if len({c.gamma for c in configs}) > 1 else None


class Algo:
    """A system's algorithm, reduced to what the builder touches."""

    host = False

    def __init__(self, config: Cfg, task: Any, model: Any) -> None:
        self.config, self.task = config, SimpleNamespace(host=self.host)
        self.settings = [self]
        self.data: list[float] | None = None

    def as_data(self, each: list[Algo]) -> None:
        self.data = [a.config.epsilon for a in each]

    @classmethod
    def for_settings(cls, configs: list[Cfg], task: Any = None, model: Any = None) -> Algo:
        return settings_program(cls, configs, task, model, refusal, "epsilon", cls.as_data)


def test_each_setting_is_its_own_algorithm_and_becomes_data() -> None:
    configs = [Cfg(1.0), Cfg(2.0), Cfg(5.0)]
    algo = Algo.for_settings(configs)
    assert [a.config for a in algo.settings] == configs
    assert all(a is not algo and a.data is None for a in algo.settings)  # untouched
    assert algo.config == configs[0] and algo.data == [1.0, 2.0, 5.0]


def test_refusals_name_the_field_and_a_host_task() -> None:
    with pytest.raises(ConfigError, match="may differ only in epsilon") as e:
        Algo.for_settings([Cfg(1.0), Cfg(1.0, gamma=0.9)])
    assert e.value.field == "gamma"

    class Host(Algo):
        host = True

    with pytest.raises(ConfigError) as e:
        Host.for_settings([Cfg(1.0), Cfg(2.0)])
    assert e.value.field == "env"


def test_one_setting_joins_the_programs_path_unless_it_cannot() -> None:
    one = alone_or_program(Algo, [Cfg(1.0)], None, None, refusal)
    assert one.data == [1.0]  # a program of one: the path it takes beside others

    class Host(Algo):
        host = True

    assert alone_or_program(Host, [Cfg(1.0)], None, None, refusal).data is None
    never = alone_or_program(Algo, [Cfg(1.0)], None, None, lambda c: "mechanism")
    assert never.data is None


def test_a_sweep_is_grouped_into_programs_in_order() -> None:
    """Each setting joins the first group it can run with: here settings of one γ share a
    program, whatever their order; each alone when the sweep asks."""
    from privrl.compute.programs import program_groups

    sweep = [Cfg(1.0), Cfg(2.0, gamma=0.9), Cfg(3.0), Cfg(4.0, gamma=0.9), Cfg(5.0, gamma=0.5)]
    groups = program_groups(sweep, refusal)
    assert [[c.epsilon for c in g] for g in groups] == [[1.0, 3.0], [2.0, 4.0], [5.0]]
    assert program_groups(sweep, refusal, together=False) == [[c] for c in sweep]
    assert program_groups([], refusal) == []
