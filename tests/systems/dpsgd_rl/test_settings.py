"""paper 003's settings as one program (`Reinforce.for_settings`, `DQN.for_settings`,
`run_episodic_settings`): each setting's results are its own run's, bit for bit, with its own
privacy record.

A trial's episode is computed in blocks of its own run's trials (`in_blocks`), and a run that
could join a program computes through the same per-trial mechanisms: with the non-private
gradient's own code (the mean), σ = 0.2's curves here drift from its own run's after about 50
episodes (checked: this test then fails). A low solve rule makes seeds stop at different
chunks, so each setting's curves end where its own run's end.
"""

from dataclasses import replace

import numpy as np
import pytest

from privrl.config import ConfigError
from privrl.systems.dpsgd_rl import local
from privrl.systems.dpsgd_rl.config import ObservationPrivacy
from privrl.systems.dpsgd_rl.dqn import DQN, DQNConfig
from privrl.systems.dpsgd_rl.local import _compact as compact
from privrl.systems.dpsgd_rl.local import run_episodic, run_episodic_settings
from privrl.systems.dpsgd_rl.reinforce import Reinforce, ReinforceConfig

# A mean of 10 evaluations (not 5): the settings still end at different chunks (90, 100, 50
# and 100 episodes; σ·IQR = 0.2 still runs to 100 with one seed), and the batch is compacted
# once, after 90 episodes, to the 3 seeds still running: the program of 3 trials with
# observation noise that σ·IQR = 0.2's own run compiles (a persistent-cache hit). With 5,
# 4 seeds ran on from 50 episodes: a fourth program of this size (~2.7 s of compile).
BASE = ReinforceConfig(seeds=3, episodes=100, seed=0, solve_threshold=200.0, solve_window=10)
SETTINGS = {
    "dp-sigma0": replace(BASE, dp=True),  # clipping only
    "dp-sigma0.4": replace(BASE, dp=True, noise_multiplier=0.4),
    "ldp-sigma0": BASE,  # non-private
    "ldp-sigma0.2": replace(BASE, obs=ObservationPrivacy(mode="sigma", sigma=0.2)),
}


@pytest.mark.learning(llvm_level=2)  # compiled as runs are: the floats under test are theirs
def test_each_setting_of_one_program_equals_its_own_run(monkeypatch):
    sizes = []  # the batch's rows after each chunk: running seeds leave stopped ones behind

    def spy(state, trial, *args):
        state, trial = compact(state, trial, *args)
        sizes.append(trial.size)
        return state, trial

    monkeypatch.setattr(local, "_compact", spy)
    configs = list(SETTINGS.values())
    together = run_episodic_settings(Reinforce.for_settings(configs), list(SETTINGS),
                                     devices=1, chunk=10)
    assert sizes[0] == 12 and sizes[-1] < 12  # the batch was compacted on the way
    widths = set()
    for name, cfg, out in zip(SETTINGS, configs, together, strict=True):
        alone = run_episodic(Reinforce.settings_algorithm([cfg]), name, devices=1, chunk=10)
        np.testing.assert_array_equal(out.train_returns, alone.train_returns)
        np.testing.assert_array_equal(out.eval_returns, alone.eval_returns)
        np.testing.assert_array_equal(out.updates, alone.updates)
        np.testing.assert_array_equal(out.solved_at, alone.solved_at)
        assert out.privacy == alone.privacy
        assert out.program == {"settings": 4, "seeds": 12} and alone.program is None
        widths.add(out.train_returns.shape[1])
    assert len(widths) > 1  # settings stopped at different chunks
    eps = [o.privacy["dpsgd"].get("epsilon") for o in together]
    assert eps[1] is not None and eps[0] is eps[2] is None  # σ = 0.4 alone states an ε


def test_settings_that_differ_in_more_than_numbers_are_refused():
    configs = list(SETTINGS.values())
    assert Reinforce.one_program_field(configs) is None
    for field, other in (("gamma", replace(BASE, gamma=0.9)),
                         ("max_epsilon", replace(BASE, dp=True, noise_multiplier=1.0,
                                                 max_epsilon=5.0)),
                         ("obs.mode", replace(BASE, obs=ObservationPrivacy(mode="box")))):
        assert Reinforce.one_program_field([*configs, other]) == field
        with pytest.raises(ConfigError, match=f"^{field}: "):
            Reinforce.for_settings([*configs, other])


DQN_BASE = DQNConfig(seeds=2, episodes=12, seed=1, buffer_size=500, batch_size=16, hidden=(8, 8),
                     solve_threshold=30.0, solve_window=3)
# σ = 2, not 0.6: the record's PLD (q = 16/500, ~220 releases) is narrow at σ = 2 (about
# 1 CPU-s less to compose); the promise under test holds at any σ.
DQN_SETTINGS = {  # DP-SGD's program, and the observation noise's
    "dp": {"dp-sigma0": replace(DQN_BASE, dp=True),
           "dp-sigma2": replace(DQN_BASE, dp=True, noise_multiplier=2.0)},
    "ldp": {"ldp-sigma0": DQN_BASE,
            "ldp-sigma0.2": replace(DQN_BASE, obs=ObservationPrivacy(mode="sigma", sigma=0.2))},
}


@pytest.mark.parametrize("kind", ["dp", "ldp"])
def test_each_dqn_setting_of_one_program_equals_its_own_run(kind):
    """DQN's updates are made inside the episode's step loop, with the trial's noise level as
    data. (Compiled as the suite's logic tests are: at these sizes DQN's floats matched even
    without blocks, so this checks keys and settings as data, not XLA's kernels;
    benchmarks/log/04-*.md has the check at 3 seeds × 300 episodes.)"""
    settings = DQN_SETTINGS[kind]
    together = run_episodic_settings(DQN.for_settings(list(settings.values())),
                                     list(settings), devices=1, chunk=4)
    for (name, cfg), out in zip(settings.items(), together, strict=True):
        alone = run_episodic(DQN.settings_algorithm([cfg]), name, devices=1, chunk=4)
        np.testing.assert_array_equal(out.train_returns, alone.train_returns)
        np.testing.assert_array_equal(out.eval_returns, alone.eval_returns)
        np.testing.assert_array_equal(out.updates, alone.updates)
        # θ too: in 12 episodes of mostly ε-greedy steps the curves are the same at any σ,
        # θ is not (it shows the trial's noise level)
        np.testing.assert_array_equal(out.policy.theta, alone.policy.theta)
        assert out.privacy == alone.privacy
        assert (out.updates > 0).all()


def test_dqn_settings_with_and_without_dp_sgd_are_two_programs():
    configs = [*DQN_SETTINGS["dp"].values(), *DQN_SETTINGS["ldp"].values()]
    assert DQN.one_program_field(configs) == "dp"
    with pytest.raises(ConfigError, match=r"^dp: "):
        DQN.for_settings(configs)


def test_the_sweep_runs_three_programs_or_each_setting_alone():
    from privrl.systems.dpsgd_rl.reproduce import SweepConfig, programs

    settings = SweepConfig().settings()
    groups = programs(settings)
    assert [len(g) for g in groups] == [12, 5, 7]
    assert {(s.algorithm, s.kind) for s in groups[1]} == {("dqn", "dp")}
    assert sorted(s.name for g in groups for s in g) == sorted(s.name for s in settings)
    assert programs(settings, one_program=False) == [[s] for s in settings]
    for g in groups:  # each group can run as one program
        group_cls = type(SweepConfig().make(g[0]))
        assert group_cls.for_settings([SweepConfig().make(s).config for s in g]).settings


def test_per_setting_flag_reaches_the_sweep(monkeypatch, tmp_path):
    """`--per-setting` runs each setting alone; the default, the three programs."""
    from privrl.main import main
    from privrl.systems.dpsgd_rl import reproduce

    seen = []

    class Stop(Exception):
        pass

    def capture(cfg, path, *a, one_program=True, **k):
        seen.append(one_program)
        raise Stop

    monkeypatch.setattr(reproduce, "run_sweep", capture)
    for i, flags in enumerate(([], ["--per-setting"], ["--one-program"])):
        with pytest.raises(Stop):
            main(["reproduce", "dpsgd-rl", *flags, "--out", str(tmp_path / str(i))])
    assert seen == [True, False, True]


def test_resuming_a_sweep_with_other_options_is_refused(tmp_path):
    """A resumed sweep must be the sweep that began (a setting run with other options would be
    mixed into its tables); sweep.json written before the check (its "config") counts too."""
    import json

    from privrl.output import open_sweep
    from privrl.systems.dpsgd_rl.reproduce import SweepConfig, run_sweep

    began = SweepConfig(seeds_reinforce=2, episodes=25)
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "sweep.json").write_text(json.dumps({"config": began.to_dict()}))
    open_sweep(tmp_path / "new", began.to_dict())
    for path in (tmp_path / "old", tmp_path / "new"):
        with pytest.raises(ConfigError, match=r"^resume: "):
            run_sweep(SweepConfig(), path)  # the defaults: 5 seeds, 1,000 episodes
        assert not (path / "settings").exists()  # refused before anything ran
