"""zoo/ir: the IRs of Herzig et al. 2021 on the paper's Figure 2 examples, SQL's round trip on the mirror data, and
the refusal of an IR a formalism does not have."""
import pytest

from conftest import needs_mirror
from zoo.formalisms import get_formalism
from zoo.ir import IRError, UnsupportedIRError, available_irs, get_ir
from zoo.ir.__main__ import main, verify
from zoo.results import read_rows

# Figure 2b, with the paper's abbreviated table names
SQL_Y = ('SELECT DISTINCT ALalias0.airline_code from AL as ALalias0 , AP as APalias0 , FL as FLalias0 where '
         'APalias0.airport_code = "SFO" and FLalias0.airline_code = ALalias0.airline_code and '
         'FLalias0.from_airport = APalias0.airport_code ;')
SQL_RIR = ('SELECT DISTINCT AL0.airline_code from AL as AL0 , AP as AP0 , FL as FL0 where AP0.airport_code = "SFO" '
           'and FL0.airline_code = AL0.airline_code and FL0.from_airport = AP0.airport_code')
SQL_LIR = 'SELECT DISTINCT table.airline_code from alias where table.airport_code = "SFO"'


# Figure 2a (the paper abbreviates CFQ's relation names; these still parse)
SPARQL_Y = ("SELECT DISTINCT ?x0 WHERE { ?x0 performance.character M1 . ?x0 person.nationality m_0f819c . "
            "?x0 marriage.spouses M2 . ?x0 marriage.spouses M3 }")


def test_sparql_rir_and_lir_on_figure_2a():  # the zoo's shortening gives the figure's short names
    rir, sparql = get_ir("rir", "cfq_sparql", "zoo").fit([SPARQL_Y]), get_formalism("cfq_sparql")
    ir = rir.forward(SPARQL_Y)
    assert ir == ("SELECT DISTINCT ?x0 WHERE { ( ?x0 character ( M1 ) ) . ( ?x0 nationality ( m_0f819c ) ) . "
                  "( ?x0 spouses ( M2 , M3 ) ) }")
    assert sparql.canonical(rir.inverse(ir)) == sparql.canonical(SPARQL_Y)
    assert get_ir("lir", "cfq_sparql").forward(SPARQL_Y) == (
        "SELECT DISTINCT var WHERE { var performance.character var . var person.nationality var . "
        "var marriage.spouses var . var marriage.spouses var }")
    with pytest.raises(IRError, match="expected ','"):
        rir.inverse("SELECT DISTINCT ?x0 WHERE { ( ?x0 spouses ( M2 M3 ) ) }")



def test_sparql_rir_structure_counts_an_object_list_as_one_slot():
    rir = get_ir("rir", "cfq_sparql", "zoo").fit([SPARQL_Y])
    one_spouse = SPARQL_Y.replace(" . ?x0 marriage.spouses M3", "")
    assert rir.structure(rir.forward(SPARQL_Y)) == rir.structure(rir.forward(one_spouse)) == (
        "SELECT DISTINCT var WHERE { ( var character ( var ) ) . ( var nationality ( var ) ) . "
        "( var spouses ( var ) ) }")
    assert rir.structure(SPARQL_Y) != rir.structure(one_spouse)  # the program keeps one slot per triple

def test_sparql_rir_as_the_paper_defines_it_trims_only_the_namespace_prefix_of_a_path():
    from zoo.ir.sparql import after_last_namespace

    path, inverse = "film.actor.film/ns:film.performance.character", "^ns:people.person.gender"
    assert after_last_namespace({path, inverse, "people.person.gender", "a", "x/ns:k.v", "y/ns:k.v"}) == {
        path: "film.performance.character", "a": "a", "people.person.gender": "people.person.gender",
        inverse: inverse, "x/ns:k.v": "x/ns:k.v", "y/ns:k.v": "y/ns:k.v"}  # names that would not be unique stay
    program = (f"SELECT DISTINCT ?x0 WHERE {{ ?x0 {path} M1 . ?x0 {inverse} m_05zppz . "
               "?x0 people.person.gender M2 . ?x0 people.person.gender M3 }")
    rir, sparql = get_ir("rir", "cfq_sparql").fit([program]), get_formalism("cfq_sparql")
    ir = rir.forward(program)
    assert ir == ("SELECT DISTINCT ?x0 WHERE { ( ?x0 film.performance.character ( M1 ) ) . "
                  f"( ?x0 {inverse} ( m_05zppz ) ) . ( ?x0 people.person.gender ( M2 , M3 ) ) }}")
    assert sparql.canonical(rir.inverse(ir)) == sparql.canonical(program)
    assert get_ir("rir", "cfq_sparql", "zoo").fit([program]).forward(program).startswith(
        "SELECT DISTINCT ?x0 WHERE { ( ?x0 character ( M1 ) )")


def test_an_unknown_ir_definition_is_refused():
    with pytest.raises(UnsupportedIRError, match="ir_definition='herzig': expected one of paper, zoo"):
        get_ir("rir", "scan", "herzig")


def test_short_relation_names_grow_until_unique():
    from zoo.ir.sparql import shortest_unique_suffixes

    assert shortest_unique_suffixes({"a.b.name", "c.d.name", "e.f.film"}) == {
        "a.b.name": "b.name", "c.d.name": "d.name", "e.f.film": "film"}


def test_sql_rir_and_lir_on_figure_2b():
    rir, sql = get_ir("rir", "sql"), get_formalism("sql")
    assert rir.forward(SQL_Y) == SQL_RIR
    assert sql.canonical(rir.inverse(SQL_RIR)) == sql.canonical(SQL_Y)
    assert get_ir("lir", "sql").forward(SQL_Y) == SQL_LIR


def test_sql_lir_keeps_subqueries_and_drops_an_emptied_where():
    lir = get_ir("lir", "sql")
    nested = ('SELECT A0.X FROM A AS A0 WHERE A0.Y = ( SELECT MAX ( A1.Y ) FROM A AS A1 , B AS B0 '
              'WHERE A1.K = B0.K ) ;')
    assert lir.forward(nested) == ('SELECT table.X FROM alias WHERE table.Y = '
                                   '( SELECT MAX ( table.Y ) FROM alias )')


def test_sql_rir_refuses_an_alias_that_would_clash_and_a_malformed_ir():
    with pytest.raises(IRError, match="CITY0"):
        get_ir("rir", "sql").forward("SELECT CITYalias0.NAME FROM CITY AS CITYalias0 , CITY0 AS X ;")
    with pytest.raises(IRError, match="unterminated"):
        get_ir("rir", "sql").inverse('SELECT A0.X FROM A AS A0 WHERE A0.Y = "open')


# a derived table (a subquery in FROM) with a derived field (a computed column), as GeoQuery's programs have them
SQL_DERIVED = ('SELECT DERIVED_TABLEalias0.STATE_NAME FROM ( SELECT CITYalias0.STATE_NAME , COUNT( 1 ) AS '
               'DERIVED_FIELDalias0 FROM CITY AS CITYalias0 GROUP BY CITYalias0.STATE_NAME ORDER BY '
               'DERIVED_FIELDalias0 DESC ) AS DERIVED_TABLEalias0 WHERE DERIVED_TABLEalias0.DERIVED_FIELDalias0 > 1 ;')


def test_sql_rir_as_the_paper_defines_it_drops_every_alias_token():
    """§3.2 removes the ``alias`` token of every alias, derived tables' and fields' too; the zoo's reading kept
    those."""
    sql = get_formalism("sql")
    paper, zoo = get_ir("rir", "sql"), get_ir("rir", "sql", "zoo")
    assert paper.forward(SQL_DERIVED) == (
        "SELECT DERIVED_TABLE0.STATE_NAME FROM ( SELECT CITY0.STATE_NAME , COUNT ( 1 ) AS DERIVED_FIELD0 FROM CITY "
        "AS CITY0 GROUP BY CITY0.STATE_NAME ORDER BY DERIVED_FIELD0 DESC ) AS DERIVED_TABLE0 WHERE "
        "DERIVED_TABLE0.DERIVED_FIELD0 > 1")
    assert zoo.forward(SQL_DERIVED) == (
        "SELECT DERIVED_TABLEalias0.STATE_NAME FROM ( SELECT CITY0.STATE_NAME , COUNT ( 1 ) AS DERIVED_FIELDalias0 "
        "FROM CITY AS CITY0 GROUP BY CITY0.STATE_NAME ORDER BY DERIVED_FIELDalias0 DESC ) AS DERIVED_TABLEalias0 "
        "WHERE DERIVED_TABLEalias0.DERIVED_FIELDalias0 > 1")
    for rir in (paper, zoo):
        assert sql.canonical(rir.inverse(rir.forward(SQL_DERIVED))) == sql.canonical(SQL_DERIVED)


@pytest.mark.parametrize("program, clash", [
    ("SELECT DERIVED_TABLEalias0.X FROM ( SELECT A.X FROM A ) AS DERIVED_TABLEalias0 , DERIVED_TABLE0 ;",
     "DERIVED_TABLE0"),  # a table of that name
    ("SELECT DERIVED_TABLEalias0.DERIVED_FIELD1 FROM ( SELECT A.DERIVED_FIELD1 , COUNT( 1 ) AS "
     "DERIVED_FIELDalias1 FROM A ) AS DERIVED_TABLEalias0 ;", "DERIVED_FIELD1"),  # a column of that name
])
def test_sql_rir_as_the_paper_defines_it_refuses_a_derived_alias_that_would_clash(program, clash):
    with pytest.raises(IRError, match=clash):
        get_ir("rir", "sql").forward(program)
    get_ir("rir", "sql", "zoo").forward(program)  # which keeps those aliases


@pytest.mark.parametrize("where, kept", [
    ('( A0.K = B0.K ) AND ( A0.J = B0.J ) AND B0.Y = "v"', ' WHERE table.Y = "v"'),  # GeoQuery's
    ('( B0.Y = "v" ) AND ( A0.K = B0.K )', ' WHERE ( table.Y = "v" )'),
    ('( A0.K = B0.K AND A0.J = B0.J ) AND B0.Y = "v"', ' WHERE table.Y = "v"'),
    ('B0.Y = "v" AND ( ( A0.K = B0.K ) )', ' WHERE table.Y = "v"'),
    ('( A0.K = B0.K )', ''),
    ('B0.Y = "v" AND NOT ( A0.K = B0.K )', ' WHERE table.Y = "v"'),
    ('A0.K = B0.K OR B0.Y = "v"', ' WHERE table.Y = "v"'),
    ('( B0.Y = "v" ) OR A0.K = B0.K AND B0.Z = "w"', ' WHERE ( table.Y = "v" ) OR table.Z = "w"'),  # ATIS's
    ('B0.Y >= YEAR( CURDATE( ) ) AND ( A0.K = B0.K )', ' WHERE table.Y >= YEAR ( CURDATE ( ) )'),  # a call's stay
])
def test_sql_lir_drops_a_bracketed_join_condition_with_its_brackets(where, kept):
    for definition in ("paper", "zoo"):
        lir = get_ir("lir", "sql", definition)
        assert lir.forward(f"SELECT A0.X FROM A AS A0 , B AS B0 WHERE {where} ;") == f"SELECT table.X FROM alias{kept}"


def test_sql_lir_masks_the_name_of_a_derived_table_as_those_of_the_from_clause():
    """A derived table's ``AS DERIVED_TABLEalias0`` (``AS DERIVED_TABLE0`` in the RIR) names a table: it goes as
    the FROM clause's tables do. A derived field is a column and stays."""
    lir = ("SELECT table.STATE_NAME FROM ( SELECT table.STATE_NAME , COUNT ( 1 ) AS DERIVED_FIELDalias0 FROM alias "
           "GROUP BY table.STATE_NAME ORDER BY DERIVED_FIELDalias0 DESC ) WHERE table.DERIVED_FIELDalias0 > 1")
    for definition in ("paper", "zoo"):
        rir, lossy = get_ir("rir", "sql", definition), get_ir("lir", "sql", definition)
        assert lossy.forward(SQL_DERIVED) == lir
        expected = lir.replace("DERIVED_FIELDalias0", "DERIVED_FIELD0") if definition == "paper" else lir
        assert lossy.forward(rir.forward(SQL_DERIVED)) == expected


def test_scan_rir_on_figure_2c_brackets_complex_actions_and_repetitions():
    rir = get_ir("rir", "scan")
    command = "jump opposite right and turn opposite left twice"
    program = get_formalism("scan").interpret(command)
    ir = rir.forward(program, command)
    assert ir == ("( I_TURN_RIGHT I_TURN_RIGHT I_JUMP ) ( ( I_TURN_LEFT I_TURN_LEFT ) ( I_TURN_LEFT I_TURN_LEFT ) )")
    assert rir.inverse(ir, command) == program
    with pytest.raises(IRError, match="does not denote"):
        rir.forward("I_JUMP", command)
    with pytest.raises(IRError, match="left open"):
        rir.inverse("( I_JUMP ( I_WALK )", command)
    with pytest.raises(IRError, match="I_FLY"):
        rir.inverse("( I_FLY )", command)


@pytest.mark.parametrize("command, paper, zoo", [
    ("jump twice", "( ( I_JUMP ) ( I_JUMP ) )", "( I_JUMP I_JUMP )"),
    ("walk around left", "( I_TURN_LEFT I_WALK ) ( I_TURN_LEFT I_WALK ) ( I_TURN_LEFT I_WALK ) ( I_TURN_LEFT I_WALK )",
     "( ( I_TURN_LEFT I_WALK ) ( I_TURN_LEFT I_WALK ) ( I_TURN_LEFT I_WALK ) ( I_TURN_LEFT I_WALK ) )"),
    ("turn around right twice", "( ( ( I_TURN_RIGHT ) ( I_TURN_RIGHT ) ( I_TURN_RIGHT ) ( I_TURN_RIGHT ) ) "
     "( ( I_TURN_RIGHT ) ( I_TURN_RIGHT ) ( I_TURN_RIGHT ) ( I_TURN_RIGHT ) ) )",
     "( ( I_TURN_RIGHT I_TURN_RIGHT I_TURN_RIGHT I_TURN_RIGHT ) ( I_TURN_RIGHT I_TURN_RIGHT I_TURN_RIGHT "
     "I_TURN_RIGHT ) )"),
    ("look opposite left thrice", "( ( I_TURN_LEFT I_TURN_LEFT I_LOOK ) ( I_TURN_LEFT I_TURN_LEFT I_LOOK ) "
     "( I_TURN_LEFT I_TURN_LEFT I_LOOK ) )", "( ( I_TURN_LEFT I_TURN_LEFT I_LOOK ) ( I_TURN_LEFT I_TURN_LEFT I_LOOK ) "
     "( I_TURN_LEFT I_TURN_LEFT I_LOOK ) )"),
])
def test_scan_rir_as_the_paper_defines_it_brackets_each_occurrence(command, paper, zoo):
    program = get_formalism("scan").interpret(command)
    for definition, expected in (("paper", paper), ("zoo", zoo)):
        rir = get_ir("rir", "scan", definition)
        assert rir.forward(program, command) == expected
        assert rir.inverse(expected, command) == program


def test_scan_lir_of_the_rir_finds_runs_across_brackets_as_figure_2c():
    rir = "( I_TURN_RIGHT I_TURN_RIGHT I_JUMP ) ( ( I_TURN_LEFT I_TURN_LEFT ) ( I_TURN_LEFT I_TURN_LEFT ) )"
    assert get_ir("lir", "scan").forward(rir) == \
        "( I_TURN_RIGHT ACTION I_JUMP ) ( ( I_TURN_LEFT ACTION ) ( ACTION ACTION ) )"
    assert get_ir("lir", "scan", "zoo").forward(rir) == \
        "( I_TURN_RIGHT ACTION I_JUMP ) ( ( I_TURN_LEFT ACTION ) ( I_TURN_LEFT ACTION ) )"


def test_scan_lir_anonymises_repeats_but_the_first():
    lir = get_ir("lir", "scan")
    assert lir.forward("I_TURN_RIGHT I_TURN_RIGHT I_JUMP I_TURN_LEFT I_TURN_LEFT I_TURN_LEFT I_TURN_LEFT") == \
        "I_TURN_RIGHT ACTION I_JUMP I_TURN_LEFT ACTION ACTION ACTION"
    assert not lir.reversible
    with pytest.raises(IRError, match="lossy"):
        lir.inverse("I_JUMP ACTION")


def test_an_ir_the_formalism_lacks_is_refused_with_the_ones_it_has():
    assert available_irs("sql") == available_irs("scan") == ["lir", "rir"]
    with pytest.raises(UnsupportedIRError, match="available: lir, rir"):
        get_ir("graphq", "sql")
    with pytest.raises(UnsupportedIRError, match="available: none"):
        get_ir("rir", "funql")


@needs_mirror
@pytest.mark.parametrize("dataset", ["geo_sql_template", "atis_sql_template", "scholar_sql_template"])
def test_sql_rir_round_trips_every_program_of_the_mirror(dataset):
    lines, row, failures = verify("rir", dataset)
    assert failures == []
    assert row["train_passed"] == row["train_programs"] > 0
    assert 0 <= row["dev_ir_unseen_structures_pct"] <= 100 and row["dev_ir_word_pieces"] > 0


@needs_mirror
def test_scan_rir_round_trips_every_program_of_mcd1():
    lines, row, failures = verify("rir", "scan_mcd1")
    assert failures == [] and row["test_passed"] == row["test_programs"] > 0


@needs_mirror
def test_sparql_rir_round_trips_cfq_programs():
    from datamodules import read_splits

    splits = read_splits("cfq_mcd1")
    rir, sparql = get_ir("rir", "cfq_sparql").fit([e.program for e in splits["train"]]), get_formalism("cfq_sparql")
    for example in splits["train"][:1000] + splits["test"][:1000]:
        assert sparql.canonical(rir.inverse(rir.forward(example.program))) == sparql.canonical(example.program)


@needs_mirror
def test_verify_cli_writes_a_row_and_fails_on_an_unknown_ir(tmp_path, capsys):
    results = tmp_path / "ir.csv"
    for _ in range(2):  # a rerun replaces its row
        assert main(["verify", "--ir", "rir", "--data", "geo_sql_iid", "--results", str(results)]) == 0
    assert "round-trip" in capsys.readouterr().out
    assert [row["dataset"] for row in read_rows(results)] == ["geo_sql_iid"]
    zoo = ["--definition", "zoo"]
    assert main(["verify", "--ir", "rir", *zoo, "--data", "geo_sql_iid", "--results", str(results)]) == 0
    assert [(row["ir_definition"], row["dataset"]) for row in read_rows(results)] == [
        ("paper", "geo_sql_iid"), ("zoo", "geo_sql_iid")]  # a row per definition
    assert main(["verify", "--ir", "rir", "--data", "geo_funql_iid", "--results", ""]) == 1


def test_verify_cli_says_a_damaged_results_table_first(tmp_path, capsys):
    results = tmp_path / "ir.csv"
    results.write_text("ir,dataset\nrir\n")
    assert main(["verify", "--ir", "rir", "--data", "geo_sql_iid", "--results", str(results)]) == 1
    captured = capsys.readouterr()
    assert captured.err == f"{results}:2: 1 cells for the 2 columns of the header\n" and captured.out == ""


def test_verify_cli_reports_an_unreadable_data_file(capsys, monkeypatch):
    """A data file without read permission is a DataConfigError (datamodules.base.open_text); tests run as root,
    whom permissions do not stop, so the reader raises it here."""
    import zoo.ir.__main__
    from datamodules import DataConfigError

    def unreadable(ir, name, *args, **kwargs):
        raise DataConfigError(f"/data/{name}.json: cannot read it (Permission denied)")

    monkeypatch.setattr(zoo.ir.__main__, "verify", unreadable)
    assert main(["verify", "--ir", "rir", "--data", "geo_sql_iid", "--results", ""]) == 1
    assert capsys.readouterr().err == "geo_sql_iid: /data/geo_sql_iid.json: cannot read it (Permission denied)\n"
