"""``python -m zoo.ir.graphq``: translate between CFQ SPARQL, GraphQ IR and Cypher, and check the compiler by
execution.

    python -m zoo.ir.graphq translate --to ir "SELECT DISTINCT ?x0 WHERE { ?x0 a film.editor }"
    python -m zoo.ir.graphq translate --to cypher "what <ES> <C> film.editor </C> </ES>"
    python -m zoo.ir.graphq execute --data cfq_mcd1 --sample 2000
    python -m zoo.ir.graphq distance --data cfq_mcd1 --sample 1000

``translate`` reads SPARQL (text starting with SELECT) or GraphQ IR. ``execute`` samples test queries, makes random
graphs for each (``zoo.ir.graphq.execution``), and runs on each graph the original SPARQL (pyoxigraph), the Cypher
compiled from its IR (ladybug) and, as a control, the SPARQL compiled from its IR (pyoxigraph). It prints the
agreement per kind of graph, appends one row per kind to ``results/graphq_execution.csv`` and writes every
disagreement, with both answers and the graph, to ``results/graphq_disagreements.jsonl``. The round trip
SPARQL -> IR -> SPARQL is ``python -m zoo.ir verify --ir graphq --data cfq_mcd1``.

``distance`` is the paper's §5 measure of the semantic gap: each text's sentence embedding is the mean of a
pretrained encoder's outputs over its word pieces (the paper's BART-base is not available offline; this uses
MiniLM, ``zoo.pretrained``), and the gap is the Euclidean distance between the utterance's embedding and its
program's, per representation (SPARQL, the RIR of Herzig et al. 2021, GraphQ IR), over sampled dev examples. One
row per representation goes to ``results/graphq_distance.csv``.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from pathlib import Path

from tqdm import tqdm

from zoo.formalisms import FormalismError
from zoo.formalisms.sparql import CfqSparql
from zoo.ir.graphq import parse, unparse
from zoo.results import ResultsFileError, append_row, check_appendable, results_table, write_jsonl


def translate(text: str, target: str) -> str:
    """``text`` (CFQ SPARQL or GraphQ IR) in the ``target`` language: ir, sparql or cypher."""
    from zoo.ir.graphq.cypher import to_cypher
    from zoo.ir.graphq.sparql import from_sparql, to_sparql

    tree = from_sparql(text) if text.lstrip().startswith("SELECT") else parse(text)
    if target == "ir":
        return unparse(tree)
    return to_sparql(tree) if target == "sparql" else to_cypher(tree)


def execute(dataset: str, sample: int, seed: int, noise_graphs: int, timeout_s: float,
            root: str | None = None) -> tuple[list[dict], list[dict]]:
    """(one summary row per kind of graph, the disagreements) over ``sample`` test queries of ``dataset``."""
    from datamodules import read_splits
    from zoo.ir.graphq.cypher import cypher_of
    from zoo.ir.graphq.execution import Ladybug, Oxigraph, QueryTimeout, query_properties, random_graphs
    from zoo.ir.graphq.sparql import from_sparql, lower

    sparql, rng = CfqSparql(), random.Random(seed)
    test = read_splits(dataset, root)["test"]
    examples = rng.sample(test, min(sample, len(test)))
    oxigraph, ladybug = Oxigraph(timeout_s), Ladybug(timeout_s)
    counts: dict[str, Counter] = {}
    disagreements: list[dict] = []
    started = time.perf_counter()
    for example in tqdm(examples, desc=f"execute {dataset}", unit="query"):
        gold = sparql.parse(example.program)
        compiled = lower(parse(unparse(from_sparql(example.program))))
        cypher = cypher_of(compiled)
        properties = query_properties(gold)
        for graph in random_graphs(gold, rng, noise=noise_graphs):
            count = counts.setdefault(graph.kind, Counter())
            count["graphs"] += 1
            oxigraph.load(graph)
            ladybug.load(graph, properties)
            answers = {}
            for engine, run in (("sparql", lambda: oxigraph.run(gold)),
                                ("cypher", lambda: ladybug.run(cypher, gold.query_type)),
                                ("compiled_sparql", lambda: oxigraph.run(compiled))):
                try:
                    answers[engine] = run()
                except (QueryTimeout, RuntimeError) as e:  # RuntimeError: ladybug's query errors
                    answers[engine] = f"error: {e}"
            count["non-empty answers"] += bool(answers["sparql"]) and not isinstance(answers["sparql"], str)
            for engine in ("cypher", "compiled_sparql"):
                agree = answers[engine] == answers["sparql"]
                count[f"{engine} agrees"] += agree
                if not agree:
                    disagreements.append({
                        "utterance": example.utterance, "sparql": example.program, "cypher": cypher,
                        "engine": engine, "graph_kind": graph.kind,
                        "answers": {k: sorted(v) if isinstance(v, frozenset) else v for k, v in answers.items()},
                        "graph": {"types": {k: sorted(v) for k, v in graph.types.items()},
                                  "edges": sorted(graph.edges)}})
    seconds = time.perf_counter() - started
    rows = [{"dataset": dataset, "split": "test", "queries": len(examples), "seed": seed, "graph_kind": kind,
             "graphs": c["graphs"], "non_empty_answers": c["non-empty answers"],
             "cypher_agree": c["cypher agrees"], "compiled_sparql_agree": c["compiled_sparql agrees"],
             "seconds": round(seconds, 1)} for kind, c in sorted(counts.items())]
    return rows, disagreements


def distance(dataset: str, sample: int, seed: int, root: str | None = None,
             batch_size: int = 64) -> list[dict]:
    """Mean utterance-to-representation distance (§5) per representation over ``sample`` dev examples."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from datamodules import read_splits
    from zoo.ir import get_ir
    from zoo.pretrained import minilm_path

    splits = read_splits(dataset, root)
    examples = random.Random(seed).sample(splits["dev"], min(sample, len(splits["dev"])))
    rir = get_ir("rir", "cfq_sparql").fit([e.program for e in splits["train"]])
    graphq = get_ir("graphq", "cfq_sparql")
    texts = {"utterance": [e.utterance for e in examples],
             "sparql": [e.program for e in examples],
             "rir": [rir.forward(e.program) for e in examples],
             "graphq": [graphq.forward(e.program) for e in examples]}
    tokenizer, encoder = AutoTokenizer.from_pretrained(minilm_path()), AutoModel.from_pretrained(minilm_path())
    encoder.eval()

    @torch.no_grad()
    def embed(batch: list[str]) -> torch.Tensor:
        inputs = tokenizer(batch, padding=True, truncation=True, max_length=512, return_tensors="pt",
                           return_special_tokens_mask=True)
        special = inputs.pop("special_tokens_mask").bool()
        words = (inputs["attention_mask"].bool() & ~special).unsqueeze(-1)
        states = encoder(**inputs).last_hidden_state
        return (states * words).sum(1) / words.sum(1)  # the mean over word pieces, without [CLS] and [SEP]

    embeddings = {kind: torch.cat([embed(texts[kind][i:i + batch_size]) for i in range(0, len(examples), batch_size)])
                  for kind in tqdm(texts, desc="embed", unit="representation")}
    rows = []
    for kind in ("sparql", "rir", "graphq"):
        gaps = (embeddings["utterance"] - embeddings[kind]).norm(dim=-1)
        rows.append({"dataset": dataset, "split": "dev", "examples": len(examples), "seed": seed,
                     "encoder": "all-MiniLM-L6-v2", "representation": kind,
                     "mean_distance": round(gaps.mean().item(), 4), "std_distance": round(gaps.std().item(), 4)})
    for row in rows:
        row["vs_sparql_pct"] = round(100 * (row["mean_distance"] / rows[0]["mean_distance"] - 1), 1)
    return rows


def _positive(text: str) -> int:
    """argparse type of a count of examples: a positive integer."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zoo.ir.graphq", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    command = commands.add_parser("translate", help="SPARQL or GraphQ IR -> ir | sparql | cypher")
    command.add_argument("--to", required=True, choices=("ir", "sparql", "cypher"))
    command.add_argument("query", help="a CFQ SPARQL query (starting with SELECT) or a GraphQ IR string")
    command = commands.add_parser("execute", help="original SPARQL vs compiled Cypher and SPARQL on random graphs")
    command.add_argument("--data", default="cfq_mcd1")
    command.add_argument("--sample", type=_positive, default=2000, help="test queries to sample")
    command.add_argument("--seed", type=int, default=0)
    command.add_argument("--noise-graphs", type=int, default=2, help="pure-noise graphs per query")
    command.add_argument("--timeout-s", type=float, default=10.0, help="time limit of one query")
    command.add_argument("--root", default=None, help="data root (default: $ZOO_DATA)")
    command.add_argument("--results", default=results_table("graphq_execution.csv"),
                         help="default: beside $ZOO_RESULTS, else in results/; '' to write none")
    command.add_argument("--disagreements", default=results_table("graphq_disagreements.jsonl"))
    command = commands.add_parser("distance", help="utterance-to-representation embedding distance (paper §5)")
    command.add_argument("--data", default="cfq_mcd1")
    command.add_argument("--sample", type=_positive, default=1000, help="dev examples to sample")
    command.add_argument("--seed", type=int, default=0)
    command.add_argument("--root", default=None, help="data root (default: $ZOO_DATA)")
    command.add_argument("--results", default=results_table("graphq_distance.csv"),
                         help="default: beside $ZOO_RESULTS, else in results/; '' to write none")
    args = parser.parse_args(argv)

    if args.command == "translate":
        try:
            print(translate(args.query, args.to))
        except FormalismError as e:  # IRError included
            print(e, file=sys.stderr)
            return 2
        return 0

    from datamodules import DATA_ERRORS
    from zoo.ir import UnsupportedIRError, get_ir
    from zoo.registry import RegistryError, get_dataset

    try:
        check_appendable(args.results)
    except ResultsFileError as e:
        print(e, file=sys.stderr)
        return 1
    try:
        get_ir("graphq", get_dataset(args.data).formalism)  # CFQ's alone, said before the data is read
        if args.command == "distance":
            rows = distance(args.data, args.sample, args.seed, args.root)
        else:
            rows, disagreements = execute(args.data, args.sample, args.seed, args.noise_graphs, args.timeout_s,
                                          args.root)
    except (RegistryError, UnsupportedIRError, *DATA_ERRORS) as e:
        print(f"{args.data}: {e}", file=sys.stderr)
        return 1
    if args.command == "distance":
        print(f"{'representation':<15} {'mean distance':>13} {'std':>7} {'vs SPARQL':>9}")
        for row in rows:
            print(f"{row['representation']:<15} {row['mean_distance']:>13.3f} {row['std_distance']:>7.3f} "
                  f"{row['vs_sparql_pct']:>8.1f}%")
            if args.results:
                append_row(Path(args.results), row, replacing=("dataset", "examples", "seed", "representation"))
        return 0

    print(f"{'graphs':>12} {'kind':<8} {'non-empty':>9} {'cypher = sparql':>16} {'compiled sparql = sparql':>25}")
    for row in rows:
        print(f"{row['graphs']:>12} {row['graph_kind']:<8} {row['non_empty_answers']:>9} "
              f"{row['cypher_agree']:>9}/{row['graphs']:<6} {row['compiled_sparql_agree']:>18}/{row['graphs']:<6}")
    print(f"{len(disagreements)} disagreements; {rows[0]['seconds'] if rows else 0} s")
    if args.results:
        for row in rows:
            append_row(Path(args.results), row, replacing=("dataset", "seed", "queries", "graph_kind"))
    if args.disagreements:
        write_jsonl(Path(args.disagreements), disagreements)
    return int(bool(disagreements))


if __name__ == "__main__":
    sys.exit(main())
