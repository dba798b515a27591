"""Bad options and foreign checkpoints are refused before any work, in one line naming what is wrong (issue 25)."""
import os
import subprocess
import sys

import pytest
import torch

from conftest import REPO, compose_run, needs_mirror
from datamodules import DataConfigError
from zoo.options import OptionError, check_options
from zoo.results import read_rows
from zoo.launch import run
from zoo.train import RunConfigError


def smoke(tmp_path, *overrides):
    return compose_run("debug=smoke", f"results_file={tmp_path / 'runs.csv'}", *overrides)


@pytest.mark.parametrize("override, message", [
    ("seed=abc", "seed='abc': expected an integer"),
    ("seed=-1", "seed=-1: expected an integer"),
    ("trainer.max_epochs=abc", "trainer.max_epochs='abc': expected an integer"),
    ("trainer.max_steps=1.5", "trainer.max_steps=1.5: expected an integer"),
    ("data.limit_train=true", "data.limit_train=True: expected int or null"),
    ("resume=yes", "resume='yes': expected true or false"),
    ("model.params.lr=abc", "model.params.lr='abc': expected float"),
    ("+model.params.hiden_size=3", "model.params.hiden_size: not an option of Seq2Seq (its options: backbone,"),
    ("model.featurizer.max_source_length=1.5", "model.featurizer.max_source_length=1.5: expected int"),
])
def test_a_bad_option_is_named_with_its_value_and_what_was_expected(override, message):
    with pytest.raises(OptionError, match=message.replace("(", r"\(").replace(".", r"\.")):
        check_options(compose_run("debug=smoke", override))


def test_the_data_modules_own_range_checks_run_before_any_work():
    with pytest.raises(DataConfigError, match=r"data\.batch_size=0: expected a whole number of at least 1"):
        check_options(compose_run("debug=smoke", "data.batch_size=0"))


@pytest.mark.parametrize("override", ["model.params.lr=1", "trainer.max_epochs=-1", "trainer.max_epochs=null",
                                      "data.eval_batch_size=null", "trainer.gradient_clip_val=5"])
def test_a_good_option_passes(override):
    check_options(compose_run("debug=smoke", override))  # an int where a float is asked, a null where allowed


@pytest.mark.parametrize("experiment", sorted(p.stem for p in (REPO / "configs" / "experiment").glob("*.yaml")))
def test_every_pinned_experiment_passes_the_checks(experiment):
    check_options(compose_run(f"experiment={experiment}"))


@pytest.mark.parametrize("model", sorted(p.stem for p in (REPO / "configs" / "model").glob("*.yaml")))
def test_every_model_config_passes_the_checks(model):
    check_options(compose_run(f"model={model}"))


def test_cli_names_the_option_and_leaves_no_run_directory(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ZOO_RUNS": str(tmp_path / "runs")}
    result = subprocess.run([sys.executable, "benchmarks/run.py", "debug=smoke", "seed=abc"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == ["error: seed='abc': expected an integer from 0 to 2**32 - 1"]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # no seedabc/ left behind


@pytest.mark.parametrize("content, reason", [(b"", "not a readable checkpoint"),
                                             (os.urandom(256), "not a readable checkpoint"),
                                             (None, "not a checkpoint of this zoo")])
def test_a_file_that_is_no_checkpoint_is_named(tmp_path, content, reason):
    path = tmp_path / "broken.ckpt"
    if content is None:
        torch.save({"weights": torch.zeros(2)}, path)  # a torch file, but not one of ours
    else:
        path.write_bytes(content)
    with pytest.raises(RunConfigError, match=f"{path}: {reason}") as error:
        run(smoke(tmp_path, f"ckpt_path={path}"), tmp_path / "run")
    assert "\n" not in str(error.value)


def test_a_truncated_checkpoint_is_named(tmp_path):
    path = tmp_path / "cut.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(1000)}, "model_name": "seq2seq", "featurizer": {}}, path)
    path.write_bytes(path.read_bytes()[:2000])
    with pytest.raises(RunConfigError, match=f"{path}: not a readable checkpoint"):
        run(smoke(tmp_path, f"ckpt_path={path}"), tmp_path / "run")


def _checkpoint(path, model_name, data):
    torch.save({"state_dict": {}, "model_name": model_name, "featurizer": {},
                "datamodule_hyper_parameters": {"name": data}}, path)
    return path


def test_another_models_or_datasets_checkpoint_is_refused_naming_both(tmp_path):
    ggd = _checkpoint(tmp_path / "ggd.ckpt", "ggd", "scan_simple")
    with pytest.raises(RunConfigError, match="checkpoint of model=ggd, not of this run's model=seq2seq"):
        run(smoke(tmp_path, f"ckpt_path={ggd}"), tmp_path / "run")
    length = _checkpoint(tmp_path / "length.ckpt", "seq2seq", "scan_length")
    with pytest.raises(RunConfigError, match="trained on data=scan_length, not on this run's data=scan_simple"):
        run(smoke(tmp_path, "test_only=true", f"ckpt_path={length}"), tmp_path / "run")


@needs_mirror
def test_a_checkpoint_must_fit_the_runs_featurizer_and_model(tmp_path):
    run_dir = tmp_path / "run"
    run(smoke(tmp_path), run_dir)
    with pytest.raises(RunConfigError, match=r"trained with model\.featurizer\.max_source_length=\d+, not 7"):
        run(smoke(tmp_path, "test_only=true", "model.featurizer.max_source_length=7"), run_dir)
    with pytest.raises(RunConfigError, match="its weights do not fit this run's model: architecture="):
        run(smoke(tmp_path, "test_only=true", "model.params.architecture={d_ff:96}"), run_dir)
    assert len(read_rows(tmp_path / "runs.csv")) == 1
    retested = run(smoke(tmp_path, "test_only=true"), run_dir)  # the same settings: tested again, as asked
    assert retested["retested_checkpoint"]


@needs_mirror
def test_ckpt_path_last_on_a_finished_run_is_refused(tmp_path):
    run_dir = tmp_path / "run"
    row = run(smoke(tmp_path), run_dir)
    with pytest.raises(RunConfigError, match=r"ckpt_path=last: the run in .* already finished \(its row of "):
        run(smoke(tmp_path, "ckpt_path=last"), run_dir)
    assert [r["time"] for r in read_rows(tmp_path / "runs.csv")] == [row["time"]]  # no second row
