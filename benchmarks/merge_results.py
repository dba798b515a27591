"""Append the rows of another results file that the runs table lacks: runs made on another machine, such as a GPU
machine's results file copied back (``zoo.results.merge_rows``; merging the same file twice appends nothing).

    python benchmarks/merge_results.py /path/to/device/runs.csv                  # into results/runs.csv
    python benchmarks/merge_results.py /path/to/device/runs.csv results/probes.csv
    python benchmarks/merge_results.py /path/to/device/ggd_speed.csv results/ggd_speed.csv   # rows without run columns
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from zoo.results import ResultsFileError, merge_rows, runs_file  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path, nargs="?", help="default: results/runs.csv ($ZOO_RESULTS)")
    args = parser.parse_args(argv)
    target = args.target or runs_file()
    try:
        print(f"{merge_rows(args.source, target)} rows of {args.source} appended to {target}")
    except ResultsFileError as error:
        sys.exit(f"error: {error}")


if __name__ == "__main__":
    main()
