"""learning/schedules.py: the step decay, the linear and cosine falls to zero at the run's end,
the KL warm-up and IVON's late beta2, as a ``Schedule`` and as a config builds one."""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from gluon_bbb import Config, ConfigError
from gluon_bbb.learning.schedules import Schedule, lr_schedule


def rates(config, epochs):
    schedule = config.build_schedule()
    return [schedule.learning_rate_at(epoch) for epoch in range(epochs)]


def test_step_decay_schedule():
    assert rates(Config(learning_rate=0.01), 501)[500] == 0.01  # constant by default
    c = Config(learning_rate=0.01, lr_decay_every=3, lr_decay_factor=0.5)
    assert rates(c, 7) == pytest.approx([0.01] * 3 + [0.005] * 3 + [0.0025])
    assert rates(Config(lr_decay_every=1, lr_decay_factor=1.0), 10)[9] == 0.001


def test_linear_schedule_falls_to_zero_at_the_runs_end():
    # sparse variational dropout's: lr * (200 - epoch) / 200 over 200 epochs
    c = Config(learning_rate=1e-3, epochs=200, lr_schedule="linear")
    got = rates(c, 251)
    assert got[:200] == pytest.approx([1e-3 * (200 - epoch) / 200 for epoch in range(200)])
    assert got[0] == 1e-3 and got[199] == pytest.approx(5e-6)
    assert got[200] == 0.0 and got[250] == 0.0
    # the step fields do not enter it; its name is the one config.json keeps
    with_step_fields = Config(**dict(c.to_dict(), lr_decay_every=3))
    assert rates(with_step_fields, 8) == rates(c, 8)
    assert c.to_dict()["lr_schedule"] == "linear" and Config().lr_schedule == "step"
    assert Config.from_dict({k: v for k, v in c.to_dict().items() if k != "lr_schedule"}
                            ).lr_schedule == "step"  # a run from before the field


def test_cosine_schedule_and_its_config():
    schedule = Schedule(lr_schedule("cosine"), learning_rate=0.5, epochs=40)
    assert [schedule.learning_rate_at(e) for e in (0, 10, 20, 40)] == pytest.approx(
        [0.5, 0.25 * (1 + math.cos(math.pi / 4)), 0.25, 0.0])
    built = Config(learning_rate=0.5, epochs=40, lr_schedule="cosine").build_schedule()
    assert [built.learning_rate_at(e) for e in range(40)] == [
        schedule.learning_rate_at(e) for e in range(40)]


def test_kl_warm_up_and_late_beta2():
    schedule = Config(epochs=10, kl_warmup_epochs=4).build_schedule()
    assert [schedule.kl_factor_at(e) for e in range(6)] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    ivon = Config(epochs=10, model="ivon", parametrization="log_variance", prior="none",
                  ivon=dict(late_beta2=0.999, late_epochs=3)).build_schedule()
    assert [ivon.beta2_at(e) for e in range(10)] == [0.99999] * 7 + [0.999] * 3
    assert Config().build_schedule().kl_factor_at(0) == 1.0


@given(rate=st.floats(1e-40, 1.0), factor=st.floats(1e-320, 1.0, exclude_min=True),
       every=st.integers(1, 5), epochs=st.integers(1, 60))
def test_a_step_schedule_is_taken_exactly_when_every_epochs_rate_is_a_normal_float32(
        rate, factor, every, epochs):
    tiny = float(np.finfo(np.float32).tiny)
    # the last epoch's rate, from logarithms (the product underflows)
    last_log = math.log(rate) + ((epochs - 1) // every) * math.log(factor)
    # the factor itself a number float32 holds, whether or not the run reaches it
    takes = rate >= tiny and factor >= tiny and last_log >= math.log(tiny) + 1e-9
    borderline = abs(last_log - math.log(tiny)) < 1e-6 or abs(rate - tiny) < 1e-45
    try:
        Config(learning_rate=rate, lr_decay_factor=factor, lr_decay_every=every, epochs=epochs)
    except ConfigError as exc:
        assert not takes or borderline, str(exc)
        assert exc.field in ("learning_rate", "lr_decay_factor")
    else:
        assert takes or borderline
