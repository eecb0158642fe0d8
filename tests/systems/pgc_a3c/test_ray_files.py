"""The PGC-A3C Ray aggregator's run files, loaded without starting Ray (so these tests are not
in the `ray` group): a malicious pickle where its state, checkpoint, log or final θ is expected
is refused by the actor's crash recovery and by `privrl replay`, and never runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from privrl.main import main


def _finished_ray_dir(run_dir: Path) -> np.ndarray:
    """A Ray run directory as run_pgc_a3c_ray leaves it (aggregator/ and theta_final.npy),
    written by the aggregator actor's own class, called in-process (no Ray needed)."""
    import jax
    import jax.numpy as jnp

    from privrl.federation.service import AggregatorSpec, Submission
    from privrl.privacy.ledger import PrivacyLedger
    from privrl.privacy.mechanisms import LaplaceMechanism
    from privrl.systems.pgc_a3c.ray import AggregatorActor

    mech = LaplaceMechanism(epsilon=2.0, clip=1.0)
    actor = AggregatorActor(AggregatorSpec(8, 2, "adam", 0.1), np.zeros(8, np.float32), 4,
                            PrivacyLedger(10.0), mech.guarantee, str(run_dir / "aggregator"), 1)
    for n in range(4):
        report = mech.privatize(jax.random.key(n), jnp.arange(8, dtype=jnp.float32))
        assert actor.submit(Submission(n, 0, report)).accepted
    actor.close()
    theta = actor.theta()
    np.save(run_dir / "theta_final.npy", theta)
    return theta


@pytest.mark.parametrize("name", ["aggregator/service.npz", "aggregator/checkpoint.npz",
                                  "aggregator/reports.bin", "theta_final.npy"])
def test_a_malicious_pickle_in_a_ray_run_directory_is_refused(
        tmp_path: Path, plant_pickle, name: str, capsys: pytest.CaptureFixture) -> None:
    """A pickle planted where the Ray aggregator's state, checkpoint or log is expected (or the
    final θ): restarting the aggregator actor (its crash recovery) and `privrl replay` both
    refuse it with one line naming the file, and the payload never runs."""
    from privrl.runfile import RunFileError
    from privrl.systems.pgc_a3c.ray import AggregatorActor

    run_dir = tmp_path / "run"
    _finished_ray_dir(run_dir)
    assert main(["replay", str(run_dir)]) == 0  # intact: θ replays exactly
    capsys.readouterr()
    marker = plant_pickle(run_dir / name)
    if name.startswith("aggregator/"):
        with pytest.raises(RunFileError) as e:  # the restarted actor restores from its files
            AggregatorActor(None, None, 0, None, None, str(run_dir / "aggregator"), 1)
        assert str(e.value).startswith(str(run_dir / name)) and "\n" not in str(e.value)
    if name != "aggregator/checkpoint.npz":  # replay reads θ₀, the log and the final θ
        assert main(["replay", str(run_dir)]) == 2
        err = capsys.readouterr().err.strip()
        assert Path(name).name in err and len(err.splitlines()) == 1, err
    assert not marker.exists()
