"""Train, test and record one model on one dataset.

    python benchmarks/run.py model=seq2seq data=scan_simple seed=1
    python benchmarks/run.py -m model=seq2seq data=scan_simple,scan_length seed=1,2,3
    python benchmarks/run.py model=seq2seq data=scan_simple ckpt_path=last      # resume an interrupted run
    python benchmarks/run.py model=seq2seq data=scan_simple debug=smoke         # seconds, on a few examples
    python benchmarks/run.py model=seq2seq ir=lir_ind+rir data=cfq_mcd1          # an IR pipeline (zoo/ir/pipeline.py)
    python benchmarks/run.py model=bert2bert_minilm ir=rir data=scan_length      # warm-started from MiniLM
    python benchmarks/run.py model=seq2seq retrieval=gandr data=geo_sql_iid      # GandR exemplars (zoo/retrieval.py)
    python benchmarks/run.py -m data=scan_simple seed=1,2,3 hydra/launcher=joblib  # the seeds side by side
    python benchmarks/run.py -m data=scan_simple seed=1,2,3 hydra/launcher=slurm trainer=gpu \\
        hydra.launcher.partition=gpu                                             # one SLURM job each (submitit)

The run directory is runs/<model>-<variant>/<data>/seed<seed>; a finished run appends one row to
results/runs.csv (see zoo/train.py).
"""
import os
import shutil
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

REPO = str(Path(__file__).resolve().parents[1])
sys.path.insert(0, REPO)  # run from a checkout without installing
# ... and the processes a multirun launcher starts (joblib's workers, submitit's jobs) import this checkout too:
# they unpickle main() and import zoo afresh, through PYTHONPATH, not this sys.path
os.environ["PYTHONPATH"] = os.pathsep.join([REPO, *filter(None, [os.environ.get("PYTHONPATH")])])

from zoo.threads import use_passive_waiting  # noqa: E402

use_passive_waiting()  # before torch starts OpenMP: a run slows down in proportion to the CPU it loses, no more
from zoo.launch import USER_ERRORS, run  # noqa: E402


@hydra.main(version_base="1.3", config_path="../configs", config_name="run")
def main(cfg: DictConfig) -> None:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        run(cfg, run_dir)
    except USER_ERRORS as error:
        remove_if_unused(run_dir)
        sys.exit(f"error: {error}")


def remove_if_unused(run_dir: Path) -> None:
    """Remove a run directory that holds only what Hydra wrote on launch (``seed=abc`` would leave ``seedabc``),
    and its data and model folders (``runs/<model>-<variant>/<data>/``) if that leaves them empty."""
    if run_dir.is_dir() and {path.name for path in run_dir.iterdir()} <= {".hydra", "run.log"}:
        shutil.rmtree(run_dir)
        for folder in (run_dir.parent, run_dir.parent.parent):
            if any(folder.iterdir()):
                break
            folder.rmdir()


if __name__ == "__main__":
    main()
