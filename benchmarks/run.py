"""Train, test and record one model on one dataset.

    python benchmarks/run.py model=seq2seq data=scan_simple seed=1
    python benchmarks/run.py -m model=seq2seq data=scan_simple,scan_length seed=1,2,3
    python benchmarks/run.py model=seq2seq data=scan_simple ckpt_path=last      # resume an interrupted run
    python benchmarks/run.py model=seq2seq data=scan_simple debug=smoke         # seconds, on a few examples
    python benchmarks/run.py model=seq2seq ir=lir_ind+rir data=cfq_mcd1          # an IR pipeline (zoo/ir/pipeline.py)
    python benchmarks/run.py model=bert2bert_minilm ir=rir data=scan_length      # warm-started from MiniLM
    python benchmarks/run.py model=seq2seq retrieval=gandr data=geo_sql_iid      # GandR exemplars (zoo/retrieval.py)

The run directory is runs/<model>-<variant>/<data>/seed<seed>; a finished run appends one row to
results/runs.csv (see zoo/train.py).
"""
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from datamodules import DataConfigError, DataFormatError, MissingDataError  # noqa: E402
from zoo.ir import UnsupportedIRError  # noqa: E402
from zoo.parser import UnsupportedFormalismError  # noqa: E402
from zoo.registry import RegistryError  # noqa: E402
from zoo.retrieval import RetrievalError  # noqa: E402
from zoo.train import RunConfigError, run  # noqa: E402

# Mistakes in the command or the data: reported in one message, without a traceback.
USER_ERRORS = (RegistryError, RunConfigError, UnsupportedFormalismError, UnsupportedIRError, RetrievalError,
               MissingDataError, DataFormatError, DataConfigError)


@hydra.main(version_base="1.3", config_path="../configs", config_name="run")
def main(cfg: DictConfig) -> None:
    try:
        run(cfg, HydraConfig.get().runtime.output_dir)
    except USER_ERRORS as error:
        sys.exit(f"error: {error}")


if __name__ == "__main__":
    main()
