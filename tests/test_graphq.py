"""GraphQ IR (zoo/ir/graphq): the grammar on hand-written IRs, the SPARQL round trip on real CFQ queries, and the
compiled Cypher and SPARQL executed in ladybug and pyoxigraph on a small hand-made graph with known answers."""
import re

import pytest

from conftest import DATA_ROOT, needs_mirror
from zoo.formalisms.sparql import CfqSparql
from zoo.ir import IRError, get_ir
from zoo.ir.graphq import Entity, EntitySet, Inequality, Query, Relation, RelationClause, parse, unparse
from zoo.ir.graphq.__main__ import translate
from zoo.ir.graphq.cypher import cypher_of, sparql_to_cypher
from zoo.ir.graphq.execution import Graph, Ladybug, Oxigraph, query_properties, random_graphs
from zoo.ir.graphq.sparql import from_sparql, lower, to_sparql

SPARQL = CfqSparql()
SPOUSE = ("people.person.spouse_s/ns:people.marriage.spouse|ns:fictional_universe.fictional_character.married_to/"
          "ns:fictional_universe.marriage_of_fictional_characters.spouses")

# hand-written IRs and the SPARQL each states
GRAMMAR_CASES = [
    ("what <ES> <C> film.editor </C> that <R> film.editor.film </R> and is not <E> M1 </E> </ES>",
     "SELECT DISTINCT ?x0 WHERE { ?x0 a film.editor . ?x0 film.editor.film M1 . FILTER ( ?x0 != M1 ) }"),
    # nested entity sets, numbered breadth-first; a reverse relation
    ("what <ES> <C> film.film </C> that <R> film.film.directed_by </R> <ES> that <R> people.person.gender </R> "
     "<E> m_05zppz </E> </ES> and is <R> film.producer.film </R> of <ES> <C> film.actor </C> </ES> </ES>",
     "SELECT DISTINCT ?x0 WHERE { ?x0 a film.film . ?x0 film.film.directed_by ?x1 . ?x1 people.person.gender "
     "m_05zppz . ?x2 a film.actor . ?x2 film.producer.film ?x0 }"),
    # a yes/no question about an entity; an inequality after a reverse relation goes the other way
    ("whether <E> M2 </E> is <C> people.person </C> and is <R> film.film.directed_by </R> of and is not <E> M0 </E>",
     "SELECT count ( * ) WHERE { M2 a people.person . M0 film.film.directed_by M2 . FILTER ( M0 != M2 ) }"),
    # two relations to one entity set; a property path; two statements
    (f"whether <ES> <C> film.actor </C> that <R> film.actor.film/film.performance.film </R> and <R> film.writer.film "
     f"</R> <ES> <C> film.film </C> </ES> </ES> and whether <E> M1 </E> <R> {SPOUSE.replace('ns:', '')} </R> <E> M2 "
     "</E>",
     f"SELECT count ( * ) WHERE {{ ?x0 a film.actor . ?x0 film.actor.film/ns:film.performance.film ?x1 . "
     f"?x0 film.writer.film ?x1 . ?x1 a film.film . M1 {SPOUSE} M2 }}"),
]


@pytest.mark.parametrize("ir,program", GRAMMAR_CASES)
def test_grammar_on_hand_written_irs(ir, program):
    tree = parse(ir)
    assert unparse(tree) == ir
    assert to_sparql(tree) == SPARQL.canonical(program)
    assert unparse(from_sparql(program)) == ir  # the translator writes exactly this IR back


def test_the_tree_of_a_filter_clause():
    assert parse(GRAMMAR_CASES[0][0]) == Query("select", (EntitySet(("film.editor",), (
        RelationClause((Relation("film.editor.film"), Inequality()), Entity("M1")),)),))


@pytest.mark.parametrize("ir,message", [
    ("what <ES> that <R> film.editor.film </R> </ES>", "column 42 found '</ES>'; expected one of '<E>', '<ES>'"),
    ("whether <E> M1 </E>", "column 20 found the end; expected one of '<R>', 'is'"),
    ("what <ES> <C> film.film </C> that is <C> </C> </ES>", "column 42 found '</C>'; expected one of a name"),
    ("who <ES> </ES>", "column 1 found 'who'; expected one of 'what', 'whether', in 'who <ES> </ES>'"),
    ("what <ES> </ES> </ES>", "column 17 found '</ES>'; expected one of the end"),
    ("what <ES> <C> a>b </C> </ES>", "column 16 found '>'; expected one of '</C>'"),
])
def test_malformed_ir_names_the_column_and_what_was_expected(ir, message):
    with pytest.raises(IRError, match=re.escape("graphq: at " + message)):
        parse(ir)


def test_the_translator_refuses_what_the_ir_cannot_say():
    with pytest.raises(IRError, match="cycle through the variables"):
        from_sparql("SELECT DISTINCT ?x0 WHERE { ?x0 film.director.film ?x1 . ?x1 film.film.edited_by ?x2 . "
                    "?x2 film.editor.film ?x0 }")
    with pytest.raises(IRError, match=r"the answer must be \?x0"):
        from_sparql("SELECT DISTINCT ?x1 WHERE { ?x1 a film.film }")
    with pytest.raises(IRError, match="SPARQL's OPTIONAL is outside the fragment"):
        from_sparql("SELECT DISTINCT ?x0 WHERE { ?x0 a film.film . OPTIONAL { ?x0 film.film.directed_by M1 } }")
    with pytest.raises(IRError, match="compiled SPARQL is not CFQ SPARQL"):
        to_sparql(parse("what <ES> that <R> not-a-relation </R> <E> M1 </E> </ES>"))


def test_translate_cli_reads_sparql_or_ir():
    ir, program = GRAMMAR_CASES[0]
    assert translate(program, "ir") == ir
    assert translate(ir, "sparql") == SPARQL.canonical(program)
    assert translate(program, "cypher") == translate(ir, "cypher") == (
        "MATCH (x0:Entity), (e0:Entity {id: 'M1'})\nWITH *\nMATCH (x0)-[:film__editor__film]->(e0)\n"
        "WHERE 'film.editor' IN x0.types AND x0.id <> e0.id\nRETURN DISTINCT x0.id")


@needs_mirror
def test_sparql_round_trip_on_200_cfq_queries():
    from datamodules import read_splits

    splits = read_splits("cfq_mcd1", DATA_ROOT)
    ir = get_ir("graphq", "cfq_sparql")
    for example in splits["dev"][:100] + splits["test"][:100]:
        z = ir.forward(example.program)
        assert ir.inverse(z) == SPARQL.canonical(example.program)
        assert "?x" not in z and "SELECT" not in z and "FILTER" not in z


# ----- execution ------------------------------------------------------------------------------------------------------

def _movie_graph() -> Graph:
    graph = Graph("hand-made")
    facts = [
        ("M0", "film.film.directed_by", "M2"), ("M2", "film.director.film", "M0"), ("M2", "film.writer.film", "M0"),
        ("M1", "film.film.directed_by", "M4"), ("M4", "film.director.film", "M1"), ("M2", "film.editor.film", "M1"),
        ("M2", "people.person.spouse_s", "marriage0"), ("marriage0", "people.marriage.spouse", "M3"),
        ("M3", "fictional_universe.fictional_character.married_to", "marriage1"),
        ("marriage1", "fictional_universe.marriage_of_fictional_characters.spouses", "M2"),
        ("M3", "film.actor.film", "performance0"), ("performance0", "film.performance.film", "M0"),
        ("M2", "people.person.gender", "m_05zppz"), ("M4", "people.person.gender", "m_05zppz"),
        ("M3", "people.person.gender", "m_02zsn"), ("M1", "film.film.production_companies", "M5"),
        ("M3", "people.person.sibling_s", "siblings0"), ("siblings0", "people.sibling_relationship.sibling", "M4"),
    ]
    for subject, step, object_ in facts:
        graph.add(subject, step, object_)
    types = {"M0": ["film.film"], "M1": ["film.film"], "M2": ["people.person", "film.director"],
             "M3": ["people.person", "film.actor"], "M4": ["people.person", "film.director"],
             "M5": ["film.production_company"]}
    for node, node_types in types.items():
        graph.types[graph.node(node)].update(node_types)
    return graph


# 20 CFQ queries and their answers on _movie_graph
EXECUTION_CASES = [
    ("SELECT DISTINCT ?x0 WHERE { ?x0 a film.director }", {"M2", "M4"}),
    ("SELECT DISTINCT ?x0 WHERE { ?x0 film.director.film M0 }", {"M2"}),
    ("SELECT DISTINCT ?x0 WHERE { M0 film.film.directed_by ?x0 }", {"M2"}),
    ("SELECT DISTINCT ?x0 WHERE { ?x0 a film.film . ?x0 film.film.directed_by ?x1 . "
     "?x1 people.person.gender m_05zppz }", {"M0", "M1"}),
    ("SELECT DISTINCT ?x0 WHERE { ?x0 people.person.spouse_s/ns:people.marriage.spouse M3 }", {"M2"}),
    (f"SELECT DISTINCT ?x0 WHERE {{ ?x0 {SPOUSE} M2 }}", {"M3"}),
    ("SELECT DISTINCT ?x0 WHERE { ?x0 people.person.gender m_05zppz . FILTER ( ?x0 != M2 ) }", {"M4"}),
    ("SELECT count ( * ) WHERE { M2 film.director.film M0 }", True),
    ("SELECT count ( * ) WHERE { M4 film.director.film M0 }", False),
    ("SELECT count ( * ) WHERE { ?x0 a film.actor . ?x0 film.actor.film/ns:film.performance.film M0 }", True),
    ("SELECT DISTINCT ?x0 WHERE { M1 film.film.produced_by|ns:film.film.production_companies ?x0 }", {"M5"}),
    ("SELECT DISTINCT ?x0 WHERE { ?x0 ^ns:people.person.gender M4 }", {"m_05zppz"}),
    ("SELECT DISTINCT ?x0 WHERE { ?x0 film.actor.film/ns:film.performance.film ?x1 . ?x1 film.film.directed_by ?x2 . "
     "?x2 people.person.gender m_05zppz }", {"M3"}),
    ("SELECT DISTINCT ?x0 WHERE { ?x0 film.editor.film ?x1 . ?x0 film.writer.film ?x1 }", set()),
    ("SELECT DISTINCT ?x0 WHERE { ?x0 film.director.film ?x1 . ?x0 film.writer.film ?x1 }", {"M2"}),
    ("SELECT count ( * ) WHERE { ?x0 a people.person . ?x0 people.person.sibling_s/ns:people.sibling_relationship"
     ".sibling ?x1 . ?x1 a people.person . FILTER ( ?x0 != ?x1 ) }", True),
    ("SELECT count ( * ) WHERE { M2 people.person.spouse_s/ns:people.marriage.spouse M3 . FILTER ( M2 != M3 ) }",
     True),
    ("SELECT count ( * ) WHERE { M3 a film.director }", False),
    ("SELECT count ( * ) WHERE { M0 film.film.directed_by M2 . M1 film.film.directed_by M4 }", True),
    ("SELECT count ( * ) WHERE { ?x0 a film.production_company . ?x0 film.director.film ?x1 }", False),
]


@pytest.fixture(scope="module")
def engines():
    graph = _movie_graph()
    properties = {step for _, step, _ in graph.edges} | {"film.film.produced_by"}
    oxigraph, ladybug = Oxigraph(timeout_s=10), Ladybug(timeout_s=10)
    oxigraph.load(graph)
    ladybug.load(graph, properties)
    return oxigraph, ladybug


@pytest.mark.parametrize("program,answer", EXECUTION_CASES)
def test_compiled_cypher_and_sparql_give_the_known_answers(engines, program, answer):
    oxigraph, ladybug = engines
    gold = SPARQL.parse(program)
    compiled = lower(from_sparql(program))
    expected = answer if isinstance(answer, bool) else frozenset(answer)
    assert oxigraph.run(gold) == expected
    assert oxigraph.run(compiled) == expected
    assert ladybug.run(cypher_of(compiled), gold.query_type) == expected


def test_random_graphs_plant_an_answer():
    import random

    query = SPARQL.parse(EXECUTION_CASES[12][0])
    planted, merged, *noise = random_graphs(query, random.Random(0), noise=2)
    assert (planted.kind, merged.kind, [g.kind for g in noise]) == ("planted", "merged", ["noise", "noise"])
    oxigraph, ladybug = Oxigraph(timeout_s=10), Ladybug(timeout_s=10)
    properties = query_properties(query)
    cypher = cypher_of(lower(from_sparql(EXECUTION_CASES[12][0])))
    for graph in (planted, merged, *noise):
        oxigraph.load(graph)
        ladybug.load(graph, properties)
        assert oxigraph.run(query) == ladybug.run(cypher, "select")
    oxigraph.load(planted)
    assert "v0" in oxigraph.run(query)  # ?x0's own node answers


def test_four_two_hop_matches_keep_their_answer():
    # ladybug 0.22 returned nothing for this query when its four MATCH clauses were planned together
    employs = "business.employer.employees/ns:business.employment_tenure.person"
    program = (f"SELECT DISTINCT ?x0 WHERE {{ ?x0 {employs} ?x1 . ?x0 {employs} M0 . ?x0 {employs} M1 . "
               f"?x0 {employs} M2 }}")
    graph = Graph("bug")
    edges = [("M2", "emp", "v0"), ("M2", "emp", "v1"), ("d2", "per", "M1"), ("p0", "per", "v1"), ("p1", "per", "M0"),
             ("p2", "per", "M1"), ("p3", "emp", "d2"), ("p3", "per", "M2"), ("p3", "per", "p1"), ("p3", "per", "v1"),
             ("v0", "emp", "p0"), ("v0", "emp", "p1"), ("v0", "emp", "p2"), ("v0", "emp", "p3"), ("v1", "emp", "d2"),
             ("v1", "per", "M1")]
    for node in sorted({node for subject, _, object_ in edges for node in (subject, object_)}):
        graph.node(node)  # in this order: the loss depended on the nodes' internal ids
    for subject, step, object_ in edges:
        graph.add(subject, {"emp": "business.employer.employees", "per": "business.employment_tenure.person"}[step],
                  object_)
    oxigraph, ladybug = Oxigraph(timeout_s=10), Ladybug(timeout_s=10)
    oxigraph.load(graph)
    ladybug.load(graph, set())
    assert oxigraph.run(SPARQL.parse(program)) == frozenset({"v0"})
    assert ladybug.run(sparql_to_cypher(program), "select") == frozenset({"v0"})  # the clauses in the query's order
    assert ladybug.run(cypher_of(lower(from_sparql(program))), "select") == frozenset({"v0"})


def test_queries_equal_up_to_variable_names():
    a = "SELECT count ( * ) WHERE { ?x0 a film.film . ?x1 a film.actor . M0 film.film.directed_by ?x1 }"
    b = "SELECT count ( * ) WHERE { ?x1 a film.film . ?x0 a film.actor . M0 film.film.directed_by ?x0 }"
    assert SPARQL.equal_up_to_variable_names(a, b) and SPARQL.canonical(a) != SPARQL.canonical(b)
    assert not SPARQL.equal_up_to_variable_names(a, b.replace("?x0 a film.actor", "?x0 a film.editor"))


@pytest.mark.parametrize("command", ["distance", "execute"])
def test_cli_says_a_damaged_results_table_first(tmp_path, capsys, command):
    from zoo.ir.graphq.__main__ import main

    results = tmp_path / "graphq.csv"
    results.write_bytes(b"dataset,seed\ncfq_mcd1,\xff\n")
    assert main([command, "--data", "no_such_dataset", "--results", str(results)]) == 1
    assert capsys.readouterr().err == f"{results}:2:10: byte 0xff is not UTF-8 (results tables are UTF-8 text)\n"


@pytest.mark.parametrize("command", ["distance", "execute"])
@pytest.mark.parametrize("data, message", [
    ("no_such_dataset", "no_such_dataset: unknown dataset 'no_such_dataset'; registered datasets: "),
    ("scan_simple", "scan_simple: no IR 'graphq' for formalism 'scan'; available: "),  # GraphQ IR is CFQ's alone
])
def test_cli_names_a_dataset_it_cannot_read_in_one_line(tmp_path, capsys, command, data, message):
    from zoo.ir.graphq.__main__ import main

    assert main([command, "--data", data, "--results", str(tmp_path / "out.csv")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1 and not (tmp_path / "out.csv").exists()


def test_cli_says_which_data_files_are_missing(tmp_path, capsys):
    from zoo.ir.graphq.__main__ import main

    assert main(["execute", "--data", "cfq_mcd1", "--root", str(tmp_path), "--results", ""]) == 1
    assert capsys.readouterr().err.startswith("cfq_mcd1: dataset 'cfq_mcd1' is missing")


@pytest.mark.parametrize("sample", ["-1", "0", "abc"])
def test_cli_refuses_a_sample_size_that_is_not_a_positive_integer(capsys, sample):
    from zoo.ir.graphq.__main__ import main

    with pytest.raises(SystemExit):
        main(["execute", "--sample", sample, "--results", ""])
    assert f"argument --sample: expected a positive integer, got '{sample}'" in capsys.readouterr().err
