"""Parse utterances with a trained run and print each one's program, its denotation, and for span_cky its span tree,
for GGD its query graph (``zoo.inference`` says what a run directory may be and how utterances are read):

    python -m zoo.parse runs/span_cky-spanbasedsp/geo_funql_iid/seed1 "how many rivers are in texas ?"
    python -m zoo.parse RUN_DIR - < questions.txt          # one utterance a line from stdin
    python -m zoo.parse RUN_DIR --json "..."                # one JSON object a line

A path that is no run or checkpoint, or an utterance the model cannot encode, is one line on stderr and exit
status 1, before anything is parsed.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any


def jsonable(value: Any) -> Any:
    """A denotation as JSON: sets sorted into lists, tuples as lists, an SQL bag of rows as its rows repeated."""
    if isinstance(value, Mapping):  # zoo.formalisms.sql.RowMultiset: row -> how many times it was returned
        return sorted((jsonable(row) for row, count in value.items() for _ in range(count)), key=repr)
    if isinstance(value, (set, frozenset)):
        return sorted((jsonable(item) for item in value), key=repr)
    if isinstance(value, (tuple, list)):
        return [jsonable(item) for item in value]
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)


def span_tree_lines(spans: list[list], words: list[str]) -> list[str]:
    """span_cky's tree ([first word, last word, category] per node) indented by nesting, each node with its words."""
    lines: list[str] = []
    enclosing: list[tuple[int, int]] = []
    for first, last, label in sorted(spans, key=lambda span: (span[0], -span[1])):
        while enclosing and not (enclosing[-1][0] <= first and last <= enclosing[-1][1]):
            enclosing.pop()
        lines.append("  " * len(enclosing) + f"{label}  [{' '.join(words[first:last + 1])}]")
        enclosing.append((first, last))
    return lines


def query_graph_lines(graph: dict[str, Any]) -> list[str]:
    """GGD's decoded graph: the query type, then one line per edge and attribute with its probability."""
    lines = ["SELECT count ( * )" if graph["count"] else "SELECT DISTINCT ?x0"]
    lines += [f"{s} -[{relation}]-> {o}  p={p:.3f}" for s, relation, o, p in graph["edges"]]
    lines += [f"{node} {relation} {constant}  p={p:.3f}" for node, relation, constant, p in graph["attributes"]]
    return lines


def render(parse, denotation: Any, executed: bool) -> str:
    """One utterance's block of text output."""
    lines = [parse.utterance]
    if parse.input != parse.utterance:
        lines.append(f"  read as:    {parse.input}")
    lines.append(f"  program:    {parse.program or '(none)'}")
    if executed:
        lines.append(f"  denotation: (does not run: {denotation})" if isinstance(denotation, Exception)
                     else f"  denotation: {json.dumps(jsonable(denotation))}")
    for key, value in parse.details.items():
        if key == "span_tree":
            lines += ["  span tree:"] + (["    " + line for line in span_tree_lines(value, parse.input.split())]
                                         if value else ["    (none: no tree composes)"])
        elif key == "query_graph":
            lines += ["  query graph:"] + ["    " + line for line in query_graph_lines(value)]
        else:
            lines.append(f"  {key}: {value}")
    return "\n".join(lines)


def record(parse, denotation: Any, executed: bool) -> dict[str, Any]:
    """One utterance's JSON object (``--json``)."""
    row = {"utterance": parse.utterance, "input": parse.input, "program": parse.program}
    if executed:
        row.update({"execution_error": str(denotation)} if isinstance(denotation, Exception)
                   else {"denotation": jsonable(denotation)})
    return {**row, **parse.details}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m zoo.parse", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", help="a run directory (runs/<model>-<variant>/<data>/seed<seed>) or a checkpoint")
    parser.add_argument("utterances", nargs="+", help="utterances to parse; - reads them from stdin, one a line")
    parser.add_argument("--json", action="store_true", help="one JSON object per utterance and line")
    parser.add_argument("--data", help="the dataset, where a checkpoint does not record it (to execute)")
    parser.add_argument("--root", help="the data root (default: the run's, else $ZOO_DATA)")
    parser.add_argument("--device", help="cpu, cuda... (default: CUDA where available)")
    args = parser.parse_args(argv)
    utterances: list[str] = []
    for utterance in args.utterances:
        utterances += ([line.strip() for line in sys.stdin.read().splitlines() if line.strip()] if utterance == "-"
                       else [utterance])
    if not utterances:
        sys.exit("error: no utterances: give them after the run directory, or - to read them from stdin")

    from zoo.threads import use_passive_waiting

    use_passive_waiting()  # before torch starts OpenMP (zoo/threads.py)
    from zoo.inference import LoadError, NotExecutableError, UnencodableUtteranceError, load
    from zoo.launch import USER_ERRORS

    try:
        loaded = load(args.path, data=args.data, root=args.root, device=args.device)
        parses = loaded.parse_with_details(utterances)
        denotations, executed = [None] * len(parses), False
        if loaded.executable:
            try:
                denotations, executed = loaded.execute([p.program for p in parses]), True
            except NotExecutableError as e:
                print(f"note: no denotations: {e}", file=sys.stderr)
    except (LoadError, UnencodableUtteranceError, *USER_ERRORS) as e:
        sys.exit(f"error: {e}")
    for parse, denotation in zip(parses, denotations):
        if args.json:
            print(json.dumps(record(parse, denotation, executed)))
        else:
            print(render(parse, denotation, executed) + "\n")


if __name__ == "__main__":
    main()
