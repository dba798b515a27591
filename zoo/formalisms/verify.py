"""``python -m zoo.formalisms verify <dataset> ...``: check every gold program of every split against its formalism.

Per split it counts the programs that parse, that survive the round trip (``canonical(round_trip(p)) ==
canonical(p)``), that execute without error (where the formalism executes and the dataset has its world), that
execute to the answer the data ships (SCAN-SP's action strings), and, where the formalism can interpret the
utterance itself (SCAN's synchronous grammar), that the interpretation equals the gold program. Failures are listed
with their reasons; the exit status is 1 when any check fails. One row per split goes to a results CSV.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from zoo.formalisms import FormalismError, get_formalism
from zoo.results import ResultsFileError, append_row, check_appendable, results_table
from zoo.types import Example

CHECKS = ("parsed", "round-trip", "executed", "matches given answers", "interpreted")
MAX_FAILURES_SHOWN = 5


@dataclass
class SplitReport:
    split: str
    programs: int = 0
    passed: dict[str, int] = field(default_factory=dict)  # check -> programs that passed; absent: not applicable
    failures: list[str] = field(default_factory=list)
    empty_denotations: int = 0
    check_seconds: float = 0.0  # parse + canonical + round trip
    executions: int = 0
    execute_seconds: float = 0.0

    def rate(self, kind: str) -> float:
        """Programs per second of the checks ("check") or of the executor ("execute")."""
        n, seconds = ((self.passed.get("parsed", 0), self.check_seconds) if kind == "check"
                      else (self.executions, self.execute_seconds))
        return n / seconds if seconds else 0.0

    def count(self, check: str, ok: bool, reason: str = "", where: str = "") -> None:
        self.passed[check] = self.passed.get(check, 0) + int(ok)
        if not ok:
            self.failures.append(f"{check} failed at {where}: {reason}")


def _interpretation(formalism, example: Example) -> str:
    return formalism.canonical(formalism.interpret(example.utterance))


def verify_split(formalism, world: Any, split: str, examples: list[Example], executes: bool,
                 progress: bool = False) -> SplitReport:
    report = SplitReport(split, programs=len(examples))
    interprets = formalism.interprets
    for i, example in enumerate(tqdm(examples, desc=split, disable=not progress, leave=False)):
        where = f"{split}[{example.meta.get('index', i)}] {example.program[:100]!r}"
        start = time.perf_counter()
        try:
            formalism.parse(example.program)
        except FormalismError as e:
            report.count("parsed", False, str(e), where)
            continue
        report.count("parsed", True)
        try:
            canonical = formalism.canonical(example.program)
            ok, reason = formalism.canonical(formalism.round_trip(example.program)) == canonical, "differs"
        except FormalismError as e:
            ok, reason = False, str(e)
        report.count("round-trip", ok, reason, where)
        report.check_seconds += time.perf_counter() - start
        if interprets:
            try:
                ok, reason = _interpretation(formalism, example) == canonical, "interpretation differs"
            except FormalismError as e:
                ok, reason = False, str(e)
            report.count("interpreted", ok, reason, where)
        if not executes:
            continue
        start = time.perf_counter()
        report.executions += 1
        try:
            denotation = formalism.execute(example.program, world, example.meta)
        except FormalismError as e:
            report.count("executed", False, str(e), where)
            continue
        finally:
            report.execute_seconds += time.perf_counter() - start
        report.count("executed", True)
        report.empty_denotations += not denotation
        if "answer" in example.meta:
            same = formalism.same_denotation(denotation, formalism.answer_denotation(example.meta["answer"]))
            report.count("matches given answers", same, "denotation differs from the shipped answer", where)
    return report


def verify_dataset(name: str, root: str | None = None, progress: bool = False) -> tuple[str, list[SplitReport]]:
    """Run every check over every split of ``name``; returns (a header line, one report per split)."""
    from datamodules import load_world, programs_unchecked, read_splits, resolve_root
    from zoo.registry import get_dataset

    spec = get_dataset(name)
    formalism = get_formalism(spec.formalism)
    with programs_unchecked():  # each broken program is reported below, not only the first
        splits = read_splits(name, root, cache=False)
    world = load_world(name, root) if formalism.needs_world else None
    executes = formalism.executable and (world is not None or not formalism.needs_world)
    note = "" if executes or not formalism.executable else " (no database for this dataset: not executed)"
    header = f"{name}: formalism {spec.formalism}, data root {resolve_root(root)}{note}"
    return header, [verify_split(formalism, world, split, examples, executes, progress)
                    for split, examples in splits.items()]


def format_reports(header: str, reports: list[SplitReport]) -> str:
    lines = [header]
    total = SplitReport("all", programs=sum(r.programs for r in reports))
    for r in reports:
        for check, n in r.passed.items():
            total.passed[check] = total.passed.get(check, 0) + n
        total.failures += r.failures
        total.empty_denotations += r.empty_denotations
        total.check_seconds += r.check_seconds
        total.executions += r.executions
        total.execute_seconds += r.execute_seconds
    for r in [*reports, total]:
        counts = "  ".join(f"{check} {r.passed[check]}/{r.programs}" for check in CHECKS if check in r.passed)
        empty = f"  (empty denotations: {r.empty_denotations})" if r.empty_denotations else ""
        lines.append(f"  {r.split:<6} {counts}{empty}")
    lines.append(f"  parse + canonical + round trip: {total.rate('check'):,.0f} programs/s")
    if total.executions:
        lines.append(f"  execute: {total.rate('execute'):,.0f} programs/s")
    for failure in total.failures[:MAX_FAILURES_SHOWN]:
        lines.append(f"  FAIL {failure}")
    if len(total.failures) > MAX_FAILURES_SHOWN:
        lines.append(f"  ... and {len(total.failures) - MAX_FAILURES_SHOWN} more failures")
    return "\n".join(lines)


def result_rows(name: str, reports: list[SplitReport]) -> list[dict[str, Any]]:
    rows = []
    for r in reports:
        row = {"dataset": name, "split": r.split, "programs": r.programs}
        row.update({check.replace(" ", "_").replace("-", "_"): n for check, n in r.passed.items()})
        row["empty_denotations"] = r.empty_denotations
        row["check_programs_per_s"] = round(r.rate("check"), 1)
        if r.executions:
            row["execute_programs_per_s"] = round(r.rate("execute"), 1)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zoo.formalisms", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    verify = commands.add_parser("verify", help="parse, round-trip and execute every gold program of datasets")
    verify.add_argument("datasets", nargs="+", help="registry names, e.g. cfq_mcd1 geo_funql_iid")
    verify.add_argument("--root", default=None, help="data root (default: $ZOO_DATA, else <repo>/data)")
    verify.add_argument("--results", default=results_table("formalisms.csv"), help="CSV that gets one row per "
                        "dataset split (default: beside $ZOO_RESULTS, else results/formalisms.csv; '' to write none)")
    args = parser.parse_args(argv)

    from datamodules import DATA_ERRORS
    from zoo.registry import RegistryError, load_all

    try:
        check_appendable(args.results)
    except ResultsFileError as e:
        print(e, file=sys.stderr)
        return 1

    load_all()
    failed = False
    for name in args.datasets:
        try:
            header, reports = verify_dataset(name, args.root, progress=sys.stderr.isatty())
        except (RegistryError, *DATA_ERRORS) as e:  # said; the next goes on
            print(f"{name}: {e}", file=sys.stderr)
            failed = True
            continue
        print(format_reports(header, reports), flush=True)
        failed |= any(r.failures for r in reports)
        if args.results:
            for row in result_rows(name, reports):
                append_row(Path(args.results), row)
    return int(failed)
