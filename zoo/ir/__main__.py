"""``python -m zoo.ir verify --ir <name> --data <dataset> ...``: an IR over every program of a dataset.

For a reversible IR, per split ``round-trip N/N``: the inverse of the IR equals the program up to the formalism's
canonical form; failures are listed with their reasons. For every IR, the statistics of Herzig et al. 2021,
Table 5: the share of dev structures (values, entities and variables anonymised) unseen in train, and the average
dev target length in word pieces, program against IR. An IR that learns from data (SPARQL's short relation names)
is fitted on the train split first. ``--definition`` picks the IR's definition (``paper``, the default, or the
zoo's earlier ``zoo``; see ``zoo.ir``). One row per IR, definition and dataset goes to a results CSV (its
``ir_definition`` column says which); the exit status is 1 when any round trip fails.
"""
from __future__ import annotations

import argparse
import sys
from functools import lru_cache
from pathlib import Path
from statistics import mean

from zoo.formalisms import FormalismError, get_formalism
from zoo.ir import DEFINITIONS, IRError, UnsupportedIRError, get_ir
from zoo.results import ResultsFileError, append_row, check_appendable, results_table

MAX_FAILURES_SHOWN = 5


@lru_cache(maxsize=1)
def _minilm_tokenizer():
    from transformers import AutoTokenizer

    from zoo.pretrained import minilm_path

    return AutoTokenizer.from_pretrained(minilm_path())


def word_pieces(texts: list[str]) -> list[int]:
    """Length of each text in MiniLM's WordPiece tokens (the paper counts T5's word pieces; MiniLM's is offline)."""
    return [len(ids) for ids in _minilm_tokenizer()(texts, add_special_tokens=False, verbose=False)["input_ids"]]


def verify(ir_name: str, dataset: str, root: str | None = None,
           definition: str = "paper") -> tuple[list[str], dict, list[str]]:
    """(report lines, one results row, failures) for one IR, under ``definition``, over every split of one
    dataset."""
    from datamodules import read_splits
    from zoo.registry import get_dataset

    formalism = get_formalism(get_dataset(dataset).formalism)
    splits = read_splits(dataset, root, cache=False)
    ir = get_ir(ir_name, formalism.name, definition).fit([e.program for e in splits.get("train", [])])
    lines, failures, targets = [f"{dataset}: {formalism.name} {ir_name} ({definition}'s definition)"], [], {}
    row = {"ir": ir_name, "ir_definition": definition, "dataset": dataset}
    # CFQ: an inverse that differs only in the names of its variables is counted apart (GraphQ IR names none)
    renamed_alike = getattr(formalism, "equal_up_to_variable_names", None)
    for split, examples in splits.items():
        targets[split], ok, names_only = [], 0, 0
        for i, example in enumerate(examples):
            try:
                z = ir.forward(example.program, example.utterance)
                targets[split].append((example.program, z))
                if ir.reversible:
                    back = ir.inverse(z, example.utterance)
                    if formalism.canonical(back) != formalism.canonical(example.program):
                        same = renamed_alike is not None and renamed_alike(back, example.program)
                        names_only += same
                        raise IRError(f"the inverse gives {back[:120]!r}"
                                      + (" (the same query with other variable names)" if same else ""))
                ok += 1
            except FormalismError as e:  # IRError included
                failures.append(f"{split}[{i}] {example.program[:80]!r}: {e}")
        passed = f"round-trip {ok}/{len(examples)}" if ir.reversible else f"transformed {ok}/{len(examples)}"
        if names_only:
            passed += f"; {names_only} of the rest differ only in variable names"
            row[f"{split}_variable_names_only"] = names_only
        lines.append(f"  {split:<6} {passed}")
        row[f"{split}_programs"], row[f"{split}_passed"] = len(examples), ok
    if targets.get("train") and targets.get("dev"):
        stats = {}
        for kind, pick in (("program", lambda pair: pair[0]), ("ir", lambda pair: pair[1])):
            seen = {ir.structure(pick(pair)) for pair in targets["train"]}
            dev = [pick(pair) for pair in targets["dev"]]
            stats[kind] = (100 * mean(ir.structure(text) not in seen for text in dev), mean(word_pieces(dev)))
            row.update({f"dev_{kind}_unseen_structures_pct": round(stats[kind][0], 1),
                        f"dev_{kind}_word_pieces": round(stats[kind][1], 1)})
        lines.append("  dev structures unseen in train: program {:.1f}%, IR {:.1f}%; average dev target length: "
                     "program {:.1f} word pieces, IR {:.1f}".format(stats["program"][0], stats["ir"][0],
                                                                     stats["program"][1], stats["ir"][1]))
    lines += [f"  FAIL {f}" for f in failures[:MAX_FAILURES_SHOWN]]
    if len(failures) > MAX_FAILURES_SHOWN:
        lines.append(f"  ... and {len(failures) - MAX_FAILURES_SHOWN} more failures")
    return lines, row, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zoo.ir", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    command = commands.add_parser("verify", help="round trip and Table 5 statistics of an IR over datasets")
    command.add_argument("--ir", required=True, help="rir | lir (python -m zoo.ir lists what a formalism has)")
    command.add_argument("--data", required=True, nargs="+", help="registry names, e.g. geo_sql_template")
    command.add_argument("--definition", choices=DEFINITIONS, default="paper",
                         help="the IR as Herzig et al. 2021 define it (paper) or the zoo's earlier reading (zoo)")
    command.add_argument("--root", default=None, help="data root (default: $ZOO_DATA)")
    command.add_argument("--results", default=results_table("ir_verify.csv"),
                         help="CSV that gets one row per IR, definition and dataset, replacing an earlier one "
                              "(default: beside $ZOO_RESULTS, else results/ir_verify.csv; '' to write none)")
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
    for dataset in args.data:
        try:
            lines, row, failures = verify(args.ir, dataset, args.root, args.definition)
        except (UnsupportedIRError, RegistryError, *DATA_ERRORS) as e:
            print(f"{dataset}: {e}", file=sys.stderr)
            failed = True
            continue
        print("\n".join(lines), flush=True)
        failed |= bool(failures)
        if args.results:
            append_row(Path(args.results), row, replacing=("ir", "ir_definition", "dataset"))
    return int(failed)


if __name__ == "__main__":
    sys.exit(main())
