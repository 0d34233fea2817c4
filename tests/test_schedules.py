"""learning/schedules.py: the step decay, the linear fall to zero at the run's end."""
import pytest

from gluon_bbb import Config


def test_step_decay_schedule():
    assert Config(learning_rate=0.01).learning_rate_at(500) == 0.01  # constant by default
    c = Config(learning_rate=0.01, lr_decay_every=3, lr_decay_factor=0.5)
    rates = [c.learning_rate_at(epoch) for epoch in range(7)]
    assert rates == pytest.approx([0.01] * 3 + [0.005] * 3 + [0.0025])
    assert Config(lr_decay_every=1, lr_decay_factor=1.0).learning_rate_at(9) == 0.001


def test_linear_schedule_falls_to_zero_at_the_runs_end():
    # sparse variational dropout's: lr * (200 - epoch) / 200 over 200 epochs
    c = Config(learning_rate=1e-3, epochs=200, lr_schedule="linear")
    rates = [c.learning_rate_at(epoch) for epoch in range(200)]
    assert rates == pytest.approx([1e-3 * (200 - epoch) / 200 for epoch in range(200)])
    assert rates[0] == 1e-3 and rates[-1] == pytest.approx(5e-6)
    assert c.learning_rate_at(200) == 0.0 and c.learning_rate_at(250) == 0.0
    # the step fields do not enter it; its name is the one config.json keeps
    with_step_fields = Config(**dict(c.to_dict(), lr_decay_every=3))
    assert with_step_fields.learning_rate_at(7) == c.learning_rate_at(7)
    assert c.to_dict()["lr_schedule"] == "linear" and Config().lr_schedule == "step"
    assert Config.from_dict({k: v for k, v in c.to_dict().items() if k != "lr_schedule"}
                            ).lr_schedule == "step"  # a run from before the field
