"""Property-based tests of every formalism (``hypothesis``), per the ``Formalism`` contract (zoo/formalisms/base.py):

* real programs (a few of each dataset, below) and generated ones round-trip: ``parse(unparse(parse(p)))`` is
  ``parse(p)``, ``canonical`` does not change, and neither does respacing the program's tokens;
* ``parse`` of an arbitrary string of the formalism's tokens (and a few foreign ones) either succeeds, and then
  round-trips, or raises ``FormalismError``: never another exception. So do the steps a metric takes after it
  (``canonical``, ``execute``, the graph view).

Runs are derandomised (the same examples every time, no example database) and small, so CI stays fast and
reproducible.
"""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import DATA_ROOT, needs_mirror
from zoo.formalisms import FormalismError, get_formalism
from zoo.formalisms.cogs import Conjunct, LogicalForm
from zoo.formalisms.funql import ARITY, CONSTANTS, unparse as unparse_funql
from zoo.formalisms.scan import SCAN_ACTIONS, SCAN_SP_SIGNATURES, command_to_program
from zoo.formalisms.sparql import Filter, SparqlQuery, Triple

PROPERTY = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])

# ----- real programs, a few of each dataset's (shortest, median, longest and random ones) -----------------------------
REAL = {
    "scan": ["I_JUMP", "I_TURN_LEFT I_TURN_LEFT I_WALK I_TURN_RIGHT I_RUN I_TURN_RIGHT I_RUN I_TURN_RIGHT I_RUN",
             "I_LOOK I_LOOK I_LOOK I_TURN_LEFT I_TURN_LEFT I_JUMP"],
    "scan_sp": [
        "i_run ( )",
        "i_after ( i_thrice ( i_walk ( i_right ) ) , i_thrice ( i_jump ( i_right ) ) )",
        "i_after ( i_thrice ( i_look ( i_right , i_opposite ) ) , i_thrice ( i_turn ( i_right , i_opposite ) ) )",
        "i_and ( i_thrice ( i_look ( ) ) , i_thrice ( i_walk ( i_right ) ) )",
        "i_after ( i_jump ( i_left ) , i_thrice ( i_turn ( i_left , i_around ) ) )",
    ],
    "funql": [
        "answer ( state ( all ) )",
        "answer ( major ( city ( loc_2 ( stateid ( 'new york' ) ) ) ) )",
        "answer ( count ( state ( loc_1 ( place ( higher_2 ( highest ( place ( loc_2 ( state ( loc_1 ( largest ( "
        "capital ( city ( loc_2 ( countryid ( 'usa' ) ) ) ) ) ) ) ) ) ) ) ) ) ) ) )",
        "answer ( most ( river ( traverse_2 ( state ( all ) ) ) ) )",
        "answer ( population_1 ( cityid ( 'riverside', _ ) ) )",
        "answer ( population_1 ( cityid ( 'austin', 'tx' ) ) )",
        "answer ( largest_one ( density_1 ( state ( all ) ) ) )",
        "answer ( sum ( len ( river ( all ) ) ) )",
        "answer ( exclude ( state ( all ) , next_to_2 ( stateid ( 'texas' ) ) ) )",
        "answer ( state ( elevation_2 ( 0 ) ) )",
    ],
    "sql": [
        "SELECT STATEalias0.AREA FROM STATE AS STATEalias0 ;",
        'SELECT CITYalias0.POPULATION FROM CITY AS CITYalias0 WHERE CITYalias0.CITY_NAME = ( SELECT '
        'STATEalias0.CAPITAL FROM STATE AS STATEalias0 WHERE STATEalias0.STATE_NAME = "state_name0" ) ;',
        "SELECT HIGHLOWalias0.HIGHEST_ELEVATION FROM HIGHLOW AS HIGHLOWalias0 , STATE AS STATEalias0 WHERE "
        "STATEalias0.AREA = ( SELECT MAX( STATEalias1.AREA ) FROM STATE AS STATEalias1 ) AND STATEalias0.STATE_NAME "
        "= HIGHLOWalias0.STATE_NAME ;",
        'SELECT COUNT( DISTINCT FLIGHTalias0.FLIGHT_ID ) FROM FARE AS FAREalias0 , FLIGHT AS FLIGHTalias0 , '
        'FLIGHT_FARE AS FLIGHT_FAREalias0 WHERE FAREalias0.FARE_BASIS_CODE = "fare_basis_code0" AND '
        'FLIGHT_FAREalias0.FARE_ID = FAREalias0.FARE_ID AND FLIGHTalias0.AIRLINE_CODE = "airline_code0" AND '
        'FLIGHTalias0.FLIGHT_ID = FLIGHT_FAREalias0.FLIGHT_ID ;',
        "SELECT DISTINCT FLIGHTalias0.FLIGHT_ID FROM FLIGHT AS FLIGHTalias0 WHERE ( FLIGHTalias0.ARRIVAL_TIME <= "
        "arrival_time0 AND FLIGHTalias0.ARRIVAL_TIME >= arrival_time1 ) AND FLIGHTalias0.DEPARTURE_TIME BETWEEN "
        "departure_time0 AND departure_time1 ;",
        'SELECT DISTINCT PAPERalias0.JOURNALID , PAPERalias0.YEAR FROM AUTHOR AS AUTHORalias0 , PAPER AS PAPERalias0 '
        ', WRITES AS WRITESalias0 WHERE AUTHORalias0.AUTHORNAME = "authorname0" AND WRITESalias0.AUTHORID = '
        'AUTHORalias0.AUTHORID AND WRITESalias0.PAPERID = PAPERalias0.PAPERID GROUP BY PAPERalias0.JOURNALID , '
        'PAPERalias0.YEAR ORDER BY PAPERalias0.YEAR DESC ;',
        "SELECT DISTINCT COUNT( DISTINCT PAPERalias0.PAPERID ) FROM PAPER AS PAPERalias0 ;",
    ],
    "cfq_sparql": [
        "SELECT count ( * ) WHERE { M0 a film.actor }",
        "SELECT count ( * ) WHERE { ?x0 a film.actor . ?x0 people.person.employment_history/ns:business."
        "employment_tenure.company M1 . M3 film.film.directed_by M5 . M3 film.film.executive_produced_by ?x0 }",
        "SELECT count ( * ) WHERE { ?x0 people.person.gender m_05zppz . ?x0 people.person.parents|ns:fictional_"
        "universe.fictional_character.parents|ns:organization.organization.parent/ns:organization.organization_"
        "relationship.parent M1 . ?x1 a film.actor . FILTER ( ?x1 != ?x0 ) . FILTER ( M3 != ?x0 ) }",
        "SELECT DISTINCT ?x0 WHERE { ?x0 a people.person . ?x0 film.actor.film/ns:film.performance.film M1 }",
        "SELECT DISTINCT ?x0 WHERE { ?x0 ^ns:people.person.gender M0 . ?x0 people.person.nationality m_03rjj }",
    ],
    "cogs": [
        "Zoe",
        "boy ( x _ 1 ) AND expect . agent ( x _ 2 , x _ 1 ) AND expect . xcomp ( x _ 2 , x _ 4 ) AND "
        "sneeze . agent ( x _ 4 , x _ 1 )",
        "* cake ( x _ 6 ) ; girl ( x _ 1 ) AND sell . agent ( x _ 2 , x _ 1 ) AND sell . recipient ( x _ 2 , x _ 4 ) "
        "AND sell . theme ( x _ 2 , x _ 6 ) AND president ( x _ 4 )",
        "* machine ( x _ 9 ) ; like . agent ( x _ 1 , Emma ) AND mouse . nmod . on ( x _ 3 , x _ 6 )",
        "LAMBDA a . LAMBDA b . LAMBDA e . touch . agent ( e , b ) AND touch . theme ( e , a )",
        "LAMBDA a . ball ( a )",
    ],
}
FORMALISMS = sorted(REAL)

# ----- the vocabulary of each formalism's token strings, with a few foreign tokens and characters --------------------
FOREIGN = ["(", ")", ",", ";", "'", '"', "`", "é", "\\", "{", "}", ".", "*", "_", "0", "-1", "x", "AND", "SELECT"]
VOCABULARY = {
    "scan": list(SCAN_ACTIONS) + ["I_FLY", "i_walk", "jump"],
    "scan_sp": list(SCAN_SP_SIGNATURES) + ["(", ")", ",", "i_fly", "walk"],
    "funql": sorted(ARITY) + ["(", ")", ",", "all", "_", "'texas'", "'new york'", "'tx'", "'x", "3", "2.5",
                              "springfield'"],
    "sql": ["SELECT", "DISTINCT", "FROM", "WHERE", "AS", "AND", "OR", "NOT", "IN", "GROUP", "BY", "ORDER", "DESC",
            "COUNT(", "MAX", "ALL", "(", ")", ",", "=", "<", ">=", "<>", "*", ";", "STATE", "STATEalias0",
            "STATEalias0.AREA", "CITY.*", '"state_name0"', "'it''s'", "year0", "1", "2.5e3", '"open', "`x`", "#"],
    "cfq_sparql": ["SELECT", "DISTINCT", "count", "(", "*", ")", "WHERE", "{", "}", ".", "FILTER", "!=", "a",
                   "?x0", "?x1", "M0", "M1", "m_05zppz", "people.person", "film.actor.film/ns:film.performance.film",
                   "^ns:people.person.gender", "film.film.produced_by|ns:film.film.production_companies",
                   "people.person.gender", "ns:bad", "/x", "?"],
    "cogs": ["LAMBDA", "a", "e", ".", "AND", "*", ";", "(", ")", ",", "x", "_", "1", "12", "Emma", "cake", "agent",
             "nmod", "beside", "theme", "!", "X", "lambda"],
}
WHITESPACE = st.sampled_from([" ", "  ", "\t", "\n", " \t "])


def token_strings(name: str):
    """Programs made of the formalism's tokens and foreign ones, separated by whitespace or nothing."""
    tokens = st.lists(st.sampled_from(VOCABULARY[name] + FOREIGN), max_size=24)
    return st.tuples(tokens, st.sampled_from([" ", "", "  "])).map(lambda pair: pair[1].join(pair[0]))


def respaced(name: str, program: str, draw) -> str:
    """The program's tokens with other whitespace between them (1 to 3 characters of it)."""
    formalism = get_formalism(name)
    tokens = formalism.tokenize(program) if name in ("funql", "sql", "cogs") else program.split()
    return "".join(token + draw(WHITESPACE) for token in tokens)


def check_round_trip(name: str, program: str) -> None:
    """Text -> structure -> text keeps the structure and the canonical form, which is itself canonical; where the
    canonical form is the program's own text respaced (all but CFQ's, which sorts conjuncts), it loses no character
    of the program (SQL: up to case, and the closing ';')."""
    formalism = get_formalism(name)
    structure = formalism.parse(program)
    text = formalism.unparse(structure)
    assert formalism.parse(text) == structure
    canonical = formalism.canonical(program)
    assert formalism.canonical(text) == canonical and formalism.canonical(canonical) == canonical
    if name == "sql":
        assert _characters(canonical).lower() == _characters(program).removesuffix(";").lower()
    elif name != "cfq_sparql":
        assert _characters(canonical) == _characters(program)


def _characters(text: str) -> str:
    return "".join(text.split())


# ----- real programs ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", FORMALISMS)
@PROPERTY
@given(data=st.data())
def test_real_programs_round_trip_in_any_spacing(name, data):
    program = data.draw(st.sampled_from(REAL[name]))
    check_round_trip(name, program)
    formalism = get_formalism(name)
    # the data's own spacing comes back (SQL's unparse spaces every token: ``MAX(`` becomes ``MAX (``)
    spacing = " ".join(formalism.tokenize(program)) if name == "sql" else program
    assert formalism.unparse(formalism.parse(program)) == spacing
    spaced = respaced(name, program, data.draw)
    assert formalism.canonical(spaced) == formalism.canonical(program)
    assert formalism.parse(spaced) == formalism.parse(program)


# ----- generated programs ----------------------------------------------------------------------------------------
def scan_commands():
    """SCAN commands from its phrase-structure grammar (Lake & Baroni 2018, Fig. 6)."""
    direction = st.sampled_from(["left", "right"])
    plain = st.tuples(st.sampled_from(["walk", "look", "run", "jump"]),
                      st.one_of(st.just(""), direction, st.tuples(st.sampled_from(["opposite", "around"]), direction)
                                .map(" ".join))).map(" ".join)
    turn = st.tuples(st.sampled_from(["turn", "turn opposite", "turn around"]), direction).map(" ".join)
    clause = st.tuples(st.one_of(plain, turn), st.sampled_from(["", "twice", "thrice"])).map(" ".join)
    joined = st.tuples(clause, st.sampled_from(["and", "after"]), clause).map(" ".join)
    return st.one_of(clause, joined).map(lambda command: " ".join(command.split()))


@PROPERTY
@given(st.lists(st.sampled_from(SCAN_ACTIONS), min_size=1, max_size=30))
def test_generated_action_sequences_round_trip(actions):
    scan = get_formalism("scan")
    assert scan.parse(scan.unparse(actions)) == tuple(actions)


@PROPERTY
@given(scan_commands())
def test_programs_of_generated_scan_commands_round_trip_and_run(command):
    program = command_to_program(command)
    check_round_trip("scan_sp", program)
    scan_sp, scan = get_formalism("scan_sp"), get_formalism("scan")
    assert scan_sp.unparse(scan_sp.parse(program)) == program  # the data's spacing exactly
    assert scan_sp.execute(program) == scan.parse(scan.interpret(command))


FUNQL_NAMES = st.sampled_from(["'texas'", "'new york'", "'mount whitney'", "'usa'", "'x'"])


def funql_trees():
    """Trees that pass FunQL's structural check (known predicates with their arities, quoted names in constants),
    well typed or not."""
    constants = st.one_of(
        st.tuples(st.sampled_from([c for c in CONSTANTS if c != "cityid"]), FUNQL_NAMES),
        st.tuples(st.just("cityid"), FUNQL_NAMES, st.sampled_from(["'tx'", "_"])))
    leaves = st.one_of(st.just("all"), st.sampled_from(["0", "3", "150000", "2.5"]), constants)
    applied = sorted(p for p in ARITY if p not in CONSTANTS)

    def extend(children):
        return st.sampled_from(applied).flatmap(
            lambda head: st.tuples(st.just(head), *[children] * ARITY[head]))

    return st.recursive(leaves, extend, max_leaves=8)


@PROPERTY
@given(funql_trees())
def test_generated_funql_trees_round_trip(tree):
    funql = get_formalism("funql")
    program = unparse_funql(tree)
    assert funql.parse(program) == tree
    check_round_trip("funql", program)
    try:
        funql.type_of(tree)
    except FormalismError:
        pass


SQL_TOKENS = ["DISTINCT", "FROM", "WHERE", "AS", "AND", "OR", "IN", "=", "<=", "<>", ",", "*", "COUNT",
              "STATEalias0.AREA", "STATE", "STATEalias0", '"state_name0"', "'it''s'", "year0", "1", "2.5e3", "-"]


def sql_queries():
    """Token sequences that parse: SELECT, then tokens and bracketed groups of them (brackets balanced)."""
    flat = st.lists(st.sampled_from(SQL_TOKENS), max_size=6)
    groups = st.recursive(flat, lambda inner: st.lists(st.one_of(
        st.sampled_from(SQL_TOKENS).map(lambda t: [t]), inner.map(lambda ts: ["(", *ts, ")"])), max_size=4)
        .map(lambda parts: [t for part in parts for t in part]), max_leaves=6)
    return groups.map(lambda tokens: ("SELECT", *tokens))


@PROPERTY
@given(sql_queries())
def test_generated_sql_token_sequences_round_trip(tokens):
    sql = get_formalism("sql")
    program = " ".join(tokens)
    assert sql.parse(program).tokens == tokens
    check_round_trip("sql", program)


VARIABLES, ENTITIES = ["?x0", "?x1", "?x2"], ["M0", "M1", "m_05zppz"]
RELATIONS = ["film.director.film", "film.actor.film/ns:film.performance.film", "^ns:people.person.gender",
             "film.film.produced_by|ns:film.film.production_companies"]


def sparql_queries():
    nodes = st.sampled_from(VARIABLES + ENTITIES)
    triple = st.builds(Triple, nodes, st.sampled_from(RELATIONS), nodes)
    typed = st.builds(Triple, nodes, st.just("a"), st.sampled_from(["people.person", "film.film"]))
    conjuncts = st.lists(st.one_of(triple, typed, st.builds(Filter, nodes, nodes)), min_size=1, max_size=8)
    head = st.one_of(st.tuples(st.just("count"), st.none()), st.tuples(st.just("select"), st.sampled_from(VARIABLES)))
    return st.builds(lambda h, c: SparqlQuery(h[0], h[1], tuple(c)), head, conjuncts)


@PROPERTY
@given(sparql_queries())
def test_generated_sparql_queries_round_trip_through_text_and_graph(query):
    sparql = get_formalism("cfq_sparql")
    program = sparql.unparse(query)
    assert sparql.parse(program) == query
    check_round_trip("cfq_sparql", program)
    assert sparql.canonical(sparql.round_trip(program)) == sparql.canonical(program)


def cogs_forms():
    words = st.sampled_from(["cake", "agent", "theme", "nmod", "beside", "x", "e"])
    lambdas = st.lists(st.sampled_from(["a", "b", "e"]), unique=True, max_size=3)

    def conjuncts(bound):
        argument = st.one_of(st.integers(0, 60), st.sampled_from(["Emma", "Noah"] + list(bound)))
        return st.builds(Conjunct, st.lists(words, min_size=1, max_size=3).map(tuple),
                         st.lists(argument, min_size=1, max_size=3).map(tuple))

    forms = lambdas.flatmap(lambda bound: st.builds(
        LogicalForm, st.just(tuple(bound)), st.lists(conjuncts(bound), max_size=2).map(tuple),
        st.lists(conjuncts(bound), min_size=1, max_size=4).map(tuple)))
    return st.one_of(forms, st.sampled_from(["Emma", "Zoe"]).map(lambda name: LogicalForm(name=name)))


@PROPERTY
@given(cogs_forms())
def test_generated_cogs_forms_round_trip(form):
    cogs = get_formalism("cogs")
    program = cogs.unparse(form)
    assert cogs.parse(program) == form
    check_round_trip("cogs", program)


# ----- arbitrary token strings ------------------------------------------------------------------------------------
GENERATED = {  # valid programs per formalism, besides the real ones
    "scan": st.lists(st.sampled_from(SCAN_ACTIONS), min_size=1, max_size=12).map(" ".join),
    "scan_sp": scan_commands().map(command_to_program),
    "funql": funql_trees().map(unparse_funql),
    "sql": sql_queries().map(" ".join),
    "cfq_sparql": sparql_queries().map(get_formalism("cfq_sparql").unparse),
    "cogs": cogs_forms().map(get_formalism("cogs").unparse),
}


@st.composite
def near_misses(draw, name: str) -> str:
    """A valid program (real or generated) with one to three token edits: a token deleted, or one of the
    vocabulary inserted or put in its place. These reach deeper into a parser than arbitrary strings do."""
    program = draw(st.one_of(st.sampled_from(REAL[name]), GENERATED[name])).split()
    vocabulary = st.sampled_from(VOCABULARY[name] + FOREIGN)
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(program)))
        edit = draw(st.sampled_from(["delete", "insert", "replace"]))
        if edit == "insert" or at == len(program):
            program.insert(at, draw(vocabulary))
        elif edit == "replace":
            program[at] = draw(vocabulary)
        else:
            del program[at]
    return " ".join(program)


def programs_to_try(name: str):
    return st.one_of(token_strings(name), near_misses(name))


def parses_or_refuses(name: str, program: str):
    """The structure of ``program``, or None when the formalism refuses it with a ``FormalismError``; any other
    exception fails the test. A program that parses must round-trip."""
    try:
        get_formalism(name).parse(program)
    except FormalismError:
        return None
    check_round_trip(name, program)
    return get_formalism(name).parse(program)


@pytest.mark.parametrize("name", FORMALISMS)
@pytest.mark.parametrize("blank", ["", " ", "\t\n"])
def test_a_blank_program_is_refused(name, blank):
    with pytest.raises(FormalismError):
        get_formalism(name).parse(blank)


@pytest.mark.parametrize("name", FORMALISMS)
@PROPERTY
@given(data=st.data())
def test_token_strings_parse_or_raise_a_formalism_error(name, data):
    parses_or_refuses(name, data.draw(programs_to_try(name)))


@PROPERTY
@given(programs_to_try("scan_sp"))
def test_scan_sp_executes_every_program_that_parses(program):
    """A SCAN-SP program that parses is well typed, so it executes to a non-empty action sequence."""
    if parses_or_refuses("scan_sp", program) is not None:
        assert get_formalism("scan").parse(" ".join(get_formalism("scan_sp").execute(program)))


@PROPERTY
@given(programs_to_try("cfq_sparql"))
def test_sparql_graph_view_of_every_parsed_query_round_trips(program):
    sparql = get_formalism("cfq_sparql")
    if parses_or_refuses("cfq_sparql", program) is not None:
        assert sparql.canonical(sparql.round_trip(program)) == sparql.canonical(program)


@pytest.fixture(scope="module")
def tiny_sql_world(tmp_path_factory):
    dump = tmp_path_factory.mktemp("sql") / "tiny.sql"
    dump.write_text("CREATE TABLE `state` (\n  `state_name` text,\n  `area` double\n);\n"
                    "INSERT INTO `state` VALUES ('texas',691030),('ohio',116103);\n")
    return get_formalism("sql").load_world(dump)


@PROPERTY
@given(st.one_of(programs_to_try("sql"), GENERATED["sql"]))
def test_sql_execution_returns_rows_or_raises_a_formalism_error(tiny_sql_world, program):
    sql = get_formalism("sql")
    try:
        sql.execute(program, tiny_sql_world, {"variables": {"state_name0": "texas", "year0": "1"}})
    except FormalismError:
        pass


@pytest.fixture(scope="module")
def geobase():
    return get_formalism("funql").load_world(DATA_ROOT / "geoquery_funql" / "geobase.pl")


@needs_mirror
@PROPERTY
@given(st.one_of(programs_to_try("funql"), GENERATED["funql"], st.sampled_from(REAL["funql"])))
def test_funql_execution_returns_a_denotation_or_raises_a_formalism_error(geobase, program):
    funql = get_formalism("funql")
    try:
        denotation = funql.execute(program, geobase)
    except FormalismError:
        return
    assert isinstance(denotation, frozenset) and funql.same_denotation(denotation, denotation)
