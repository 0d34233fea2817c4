"""learning/trials.py: a spec's trials, their summary over seeds and its table, the example
specs, and the environment a trial's commands get."""
import itertools
import os

import pytest

from test_sweep import write_spec


def test_the_spec_gives_one_trial_per_combination(tmp_path):
    from gluon_bbb.learning.trials import load_spec, markdown_table, summarize, trials
    spec = load_spec(str(write_spec(tmp_path / "spec.json", {"preset": "paper-2x400",
                                                              "eval-train": True},
                                    {"prior": ["gaussian", "scale-mixture"], "seed": [0, 1]})))
    found = trials(spec)
    assert [t["name"] for t in found] == ["prior-gaussian_seed-0", "prior-gaussian_seed-1",
                                          "prior-scale-mixture_seed-0",
                                          "prior-scale-mixture_seed-1"]
    assert found[0]["setting"] == "prior=gaussian" and found[3]["seed"] == 1
    assert found[1]["train_args"] == ["--preset", "paper-2x400", "--eval-train", "--prior",
                                      "gaussian", "--seed", "1"]
    assert found[0]["train_args"][-2:] == ["--seed", "0"]
    # a name holds a value as written, its sign included; other characters become "-"
    spec = load_spec(str(write_spec(tmp_path / "odd.json", {}, {"learning-rate": [1e-5, 2e+30],
                                                               "seed": [0]})))
    assert [t["name"] for t in trials(spec)] == ["learning-rate-1e-05_seed-0",
                                                 "learning-rate-2e+30_seed-0"]
    # median, range, mean and sample standard deviation over the seeds of a setting, written
    # out; a figure only some trials have (the predictive's, say) is left out
    records = [{"setting": "a", "figures": {"test_error": {"0": e}, "seconds": 6000.0 * e}}
               for e in (0.04, 0.01, 0.02)]
    records[0]["figures"]["predictive_ece"] = 0.01
    row = summarize(records, [0])[0]
    stats = row["test_error"]["0"]
    assert row["n"] == 3 and stats["mean"] == pytest.approx(0.07 / 3)
    assert stats["sd"] == pytest.approx(((0.01 - 0.07 / 3) ** 2 + (0.02 - 0.07 / 3) ** 2
                                         + (0.04 - 0.07 / 3) ** 2) ** 0.5 / 2 ** 0.5)
    assert (stats["median"], stats["min"], stats["max"]) == (0.02, 0.01, 0.04)
    assert row["seconds"]["median"] == pytest.approx(120) and "predictive_ece" not in row
    records.append({"setting": "a", "figures": {"test_error": {"0": 0.03}, "seconds": 180.0}})
    assert summarize(records, [0])[0]["test_error"]["0"]["median"] == pytest.approx(0.025)
    text = markdown_table(summarize(records, [0]), [0])
    assert text.splitlines()[0] == "| setting | n | 0% removed | minutes |"
    assert text.splitlines()[2] == "| a | 4 | 2.50 [1.00, 4.00] | 2.5 [1.0, 4.0] |"


@pytest.mark.parametrize("name", sorted(os.listdir(os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "sweeps"))))
def test_the_example_specs_are_sweeps(name):
    """Every spec in examples/sweeps/ reads and plans: its flags are the training command's and
    its trials differ."""
    from gluon_bbb.learning.trials import load_spec, trials
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = load_spec(os.path.join(root, "examples", "sweeps", name))
    assert len(trials(spec)) == len(list(itertools.product(*spec["grid"].values())))


def test_a_trial_gets_its_threads_whatever_the_worker_set():
    """A Dask nanny starts its worker with OMP_NUM_THREADS, MKL_NUM_THREADS and
    OPENBLAS_NUM_THREADS of 1; a trial's commands run with --threads-per-trial of each."""
    from gluon_bbb.learning.trials import trial_environment
    nanny = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
             "GLUON_BBB_DATA": "/data"}
    env = trial_environment(nanny, 2)
    assert env == {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2",
                   "GLUON_BBB_DATA": "/data"}
    assert nanny["MKL_NUM_THREADS"] == "1"


@pytest.mark.parametrize("chosen_here", [True, False])
def test_a_trial_chooses_its_own_engine_unless_the_user_chose_one(monkeypatch, chosen_here):
    # the engine the package chose for the sweep's process is not handed on: the trial's
    # command chooses by its --ctx; one the user set is
    from gluon_bbb.learning import trials
    monkeypatch.setattr(trials, "_ENGINE_CHOSEN_HERE", chosen_here)
    env = trials.trial_environment({"MXNET_ENGINE_TYPE": "NaiveEngine"}, 1)
    assert ("MXNET_ENGINE_TYPE" in env) == (not chosen_here)


def test_a_sweep_plans_with_one_parser_and_counts_its_trials_first(monkeypatch):
    from gluon_bbb.commands import train as train_mnist
    from gluon_bbb.learning import trials
    built = []
    real = train_mnist.build_parser

    def counted(*args, **kwargs):
        built.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(train_mnist, "build_parser", counted)
    spec = {"base": {"epochs": 1}, "grid": {"seed": list(range(400)),
                                            "lr-decay-every": [0, 1, 2]}}
    found, configs = trials.plan(spec)
    assert len(found) == len(configs) == trials.trial_count(spec) == 1200
    assert len(built) == 1  # linear: one parser reads every trial's flags
    spec["grid"]["learning-rate"] = [0.001, 1e-3]
    with pytest.raises(trials.SpecError, match="the grid gives one trial twice"):
        trials.plan(spec)
