"""The kernel's configuration pieces: ConfigError, the Config base, the validation toolkit, and
the command line's field -> flag mapping."""

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar

import pytest
import typer

import privrl
from privrl import config as C
from privrl.cli import command_flags, flag_names
from privrl.config import Config, ConfigError


@dataclass(frozen=True)
class Toy(Config):
    presets: ClassVar[dict[str, dict[str, Any]]] = {"paper": {}, "fast": {"steps": 5}}

    preset: str = "paper"
    steps: int = 100
    rate: float = 0.5
    epsilon: float = math.inf
    sizes: tuple[int, ...] = (1, 2)

    def validate(self) -> None:
        C.check_preset(self.preset, self.presets)
        C.integer("steps", self.steps)
        C.positive("rate", self.rate)


def test_config_error_carries_the_field():
    e = ConfigError("buffer_size", "must be >= 1, got 0")
    assert e.field == "buffer_size" and e.message == "must be >= 1, got 0"
    assert str(e) == "buffer_size: must be >= 1, got 0"
    assert isinstance(e, ValueError)


def test_from_preset_applies_the_preset_then_overrides_ignoring_none():
    assert Toy.from_preset("fast") == Toy(preset="fast", steps=5)
    assert Toy.from_preset("fast", steps=7, rate=None) == Toy(preset="fast", steps=7)
    assert Toy.from_preset("paper", rate=0.1).rate == 0.1


def test_unknown_preset_names_the_field_and_the_choices():
    with pytest.raises(ConfigError) as e:
        Toy.from_preset("slow")
    assert e.value.field == "preset"
    assert str(e.value) == "preset: unknown preset 'slow'; choose one of paper, fast"


def test_resolved_validates_and_to_dict_is_json_safe():
    cfg = Toy()
    assert cfg.resolved() is cfg
    with pytest.raises(ConfigError, match=r"^steps: must be an integer >= 1, got 0$"):
        Toy(steps=0).resolved()
    d = cfg.to_dict()
    assert d == {"preset": "paper", "steps": 100, "rate": 0.5, "epsilon": "inf", "sizes": [1, 2]}
    back = Toy(**{**d, "epsilon": float(d["epsilon"]), "sizes": tuple(d["sizes"])})
    assert back == cfg  # round trip


@pytest.mark.parametrize("check, args, message", [
    (C.integer, (0,), "must be an integer >= 1, got 0"),
    (C.integer, (True,), "must be an integer >= 1, got True"),
    (C.integer, (2.0,), "must be an integer >= 1, got 2.0"),
    (C.integer, (-1, 0), "must be an integer >= 0, got -1"),
    (C.at_least, (0, 1), "must be >= 1, got 0"),
    (C.positive, (0,), "must be finite and > 0, got 0"),
    (C.positive, (math.inf,), "must be finite and > 0, got inf"),
    (C.positive, (math.nan,), "must be finite and > 0, got nan"),
    (C.positive, (None,), "must be finite and > 0, got None"),
    (C.non_negative, (-1.0,), "must be finite and >= 0, got -1.0"),
    (C.finite, (math.inf,), "must be finite, got inf"),
    (C.in_range, (0.0, 0, 1, True), "must be in (0, 1], got 0.0"),
    (C.in_range, (1.0, 0, 1, False, True), "must be in [0, 1), got 1.0"),
    (C.probability, (1.5,), "must be in [0, 1], got 1.5"),
    (C.odd, (4,), "must be an odd integer >= 1, got 4"),
    (C.one_of, ("x", ("a", "b")), "unknown the field 'x'; choose one of a, b"),
])
def test_toolkit_messages(check, args, message):
    if check is C.in_range:  # the ends are keyword-only
        value, low, high, *ends = args
        kw = dict(zip(("low_open", "high_open"), ends, strict=False))
        with pytest.raises(ConfigError) as e:
            check("the_field", value, low, high, **kw)
    else:
        with pytest.raises(ConfigError) as e:
            check("the_field", *args)
    assert e.value.field == "the_field" and e.value.message == message


def test_toolkit_returns_good_values():
    assert C.integer("f", 3) == 3 and C.positive("f", 0.5) == 0.5
    assert C.positive("f", math.inf, finite=False) == math.inf
    assert C.in_range("f", 1.0, 0, 1, low_open=True) == 1.0
    assert C.one_of("f", "a", ("a", "b"), what="mode") == "a"
    assert C.odd("f", 5) == 5 and C.non_negative("f", 0.0) == 0.0
    assert C.in_range("f", 0.0, 0, 1) == 0.0  # closed ends take the bound


def test_one_of_names_what_it_is():
    with pytest.raises(ConfigError, match=r"^models: unknown model 'z'; choose one of a$"):
        C.one_of("models", "z", ("a",), what="model")


def test_nested_config_errors_name_the_path():
    with pytest.raises(ConfigError) as e, C.within("obs"):
        C.positive("sigma", -1.0)
    assert e.value.field == "obs.sigma"


# --- the command line maps fields to flags ----------------------------------------------------
def _command(**renames: str):
    @flag_names(**renames)
    def command(
        buffer: Annotated[int, typer.Option(help="|B|")] = 1,
        learning_rate: Annotated[float, typer.Option(help="η")] = 0.1,
        run_dir: Annotated[Path, typer.Argument(help="a directory")] = Path("."),
        raise_field: Annotated[str, typer.Option(help="test hook")] = "",
    ) -> None:
        raise ConfigError(raise_field, "must be >= 1, got 0")

    return command


@pytest.mark.parametrize("field, shown", [
    ("learning_rate", "--learning-rate"),  # spelled like the field
    ("buffer_size", "--buffer"),  # renamed
    ("run_dir", "RUN_DIR"),  # an argument
    ("max_episode_steps", "max_episode_steps"),  # no option sets it: left as it is
    ("--address", "--address"),  # CLI code already named the flag
])
def test_flag_names_maps_fields_to_the_flags_typed(field, shown):
    with pytest.raises(ConfigError) as e:
        _command(buffer_size="--buffer")(raise_field=field)
    assert str(e.value) == f"{shown}: must be >= 1, got 0"


def test_command_flags_reads_the_signature():
    flags = command_flags(_command().__wrapped__)
    assert flags == {"buffer": "--buffer", "learning_rate": "--learning-rate",
                     "run_dir": "RUN_DIR", "raise_field": "--raise-field"}


def test_cli_error_names_the_flag_typed(capsys, tmp_path):
    """End to end: PGC-A3C's config says `buffer_size`, the user typed --buffer."""
    from privrl.main import main

    assert main(["run", "pgc-a3c", "--buffer", "0", "--out", str(tmp_path / "r"),
                 "--no-progress"]) == 2
    assert capsys.readouterr().err.strip() == (
        "privrl: error: --buffer: must be an integer >= 1, got 0")


# --- library code speaks in fields ------------------------------------------------------------
SRC = Path(privrl.__file__).parent
CLI_FILES = {SRC / "cli.py", SRC / "main.py", *SRC.glob("systems/*/cli.py")}
FLAG_FIELD = re.compile(r"""(ConfigError|Theorem5Error|fail)\(\s*f?["']-""")


def test_library_code_never_names_a_flag():
    """ConfigError fields outside the command line are config fields, never `--flags`."""
    library = [p for p in SRC.rglob("*.py") if p not in CLI_FILES]
    assert len(library) > 40 and SRC / "config.py" in library
    offenders = [f"{p.relative_to(SRC)}:{i}" for p in library
                 for i, line in enumerate(p.read_text().splitlines(), 1)
                 if FLAG_FIELD.search(line)]
    assert offenders == []


def test_the_flag_check_can_fail():
    assert FLAG_FIELD.search('raise ConfigError("--epsilon", "must be > 0")')
    assert FLAG_FIELD.search("fail('--d-hat', 'only prs')")
    assert not FLAG_FIELD.search('raise ConfigError("epsilon", "must be > 0")')


def test_other_field_names_the_first_difference_outside_the_allowed_ones():
    """What keeps settings from running as one program: None when they differ only in the
    allowed fields, else the first other field (in declaration order) in which one differs."""

    @dataclass(frozen=True)
    class Setting:
        a: int = 0
        b: float = 0.0
        c: str = "x"

    S = Setting
    assert C.other_field([S(), S(a=1), S(a=2)], ("a",)) is None
    assert C.other_field([S(), S(a=1, c="y")], ("a",)) == "c"
    assert C.other_field([S(), S(b=1.0, c="y")], ()) == "b"
    assert C.other_field([S()], ()) is None
