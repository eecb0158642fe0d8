"""Progress a person can read (issue 53 item 5): privrl.progress.RunProgress, the one display
every system's run uses. A fake clock and a recording console: no terminal, no waiting."""

from __future__ import annotations

import pytest

from privrl.progress import RunProgress, emit


class Lines:
    """A console that records what is printed."""

    is_terminal = False

    def __init__(self) -> None:
        self.lines: list[str] = []

    def print(self, text: str, **_: object) -> None:
        self.lines.append(text)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_without_a_terminal_a_line_every_n_seconds_with_the_figures():
    console, clock = Lines(), Clock()
    with RunProgress(console, True, "training", "episodes/agent", every=30, clock=clock) as p:
        assert console.lines == ["training: compiling …"]
        clock.now += 21.5
        emit(p, 100, 5000, mean_return=21.25, epsilon=0.5)  # the first report: compiled
        assert console.lines[1] == "compiled (and ran the first chunk) in 21.5 s"
        assert len(console.lines) == 2  # 21.5 s < 30 s since the start: no line yet
        clock.now += 10
        emit(p, 200, 5000, mean_return=22.0, epsilon=1.0)
        assert console.lines[-1] == ("training: 200/5000 episodes/agent, mean return 22, "
                                     "ε spent 1, 32 s")
        clock.now += 5
        emit(p, 300, 5000, mean_return=23.0, epsilon=1.5)
        assert len(console.lines) == 3  # within 30 s of the last line
        clock.now += 40
        emit(p, 5005, 5000, mean_return=30.0, epsilon=3.26)  # FedPG's last round overshoots
    assert console.lines[-1].startswith("training: 5000/5000 episodes/agent, mean return 30, "
                                        "ε spent 3.26")
    assert not any("5005" in line for line in console.lines)


def test_a_plain_callback_gets_two_arguments_and_nothing_shows_when_hidden():
    seen = []
    emit(lambda d, t: seen.append((d, t)), 3, 10, mean_return=1.0, epsilon=2.0)
    assert seen == [(3, 10)]
    emit(None, 3, 10)
    console = Lines()
    with RunProgress(console, False, clock=Clock()) as p:
        p(1, 2, mean_return=3.0)
    assert console.lines == []
    with pytest.raises(ValueError, match="every"):
        RunProgress(console, every=0)


def test_a_terminal_bar_shows_the_figures(capsys):
    from rich.console import Console

    console = Console(force_terminal=True, width=160, file=__import__("sys").stderr)
    with RunProgress(console, True, "training", "submissions/trial", live=True) as p:
        p(10, 20, mean_return=42.5, epsilon=4.0)
        p.update(None, completed=20)  # a rich-style caller
        assert p._bar.tasks[0].fields["figures"] == "mean return 42.5, ε spent 4"
        assert p._bar.tasks[0].completed == 20 and p._bar.tasks[0].total == 20
    assert "compiled (and ran the first chunk) in" in capsys.readouterr().err
