"""GeoQuery FunQL (zoo/formalisms/funql.py) and the geobase.pl reader (zoo/formalisms/geobase.py).

Expected denotations are worked out by hand from the geobase.pl facts quoted next to each case, not from the
executor. Tests reading the data mirror are skipped without it.
"""
import json
import random
import re

import pytest
from conftest import DATA_ROOT, needs_mirror

from zoo.formalisms.base import FormalismError
from zoo.formalisms.funql import FUNQL_SIGNATURES, FunQL, compose, type_of
from zoo.formalisms.geobase import GeoBase, read_prolog_facts

GEO = DATA_ROOT / "geoquery_funql"
SPLIT_FILES = [f"{part}{suffix}.json" for suffix in ("", "_template", "_len") for part in ("train", "dev", "test")]
funql = FunQL()


def state(name):
    return ("state", name)


def city(name, abbreviation):
    return ("city", name, abbreviation)


def river(name):
    return ("river", name)


def place(name):
    return ("place", name)


@pytest.fixture(scope="module")
def world():
    return funql.load_world(GEO / "geobase.pl")


def gold_programs():
    """Every distinct gold program of every funql/*.json file, with the first file it occurs in."""
    programs = {}
    for path in sorted((GEO / "funql").glob("*.json")):
        for line in path.read_text().splitlines():
            programs.setdefault(json.loads(line)["program"], path.name)
    return programs


# ----- hand-checked denotations -----------------------------------------------------------------------------------
HAND_CHECKED = [
    # count: border('iowa','ia',['minnesota','wisconsin','illinois','missouri','nebraska','south dakota'])
    ("answer ( count ( state ( next_to_2 ( stateid ( 'iowa' ) ) ) ) )", {6.0}),
    # largest state by area: alaska 591.0e+3 (next texas 266.807e+3)
    ("answer ( largest ( state ( all ) ) )", {state("alaska")}),
    # largest city by population: city('new york','ny','new york',7071639)
    ("answer ( largest ( city ( all ) ) )", {city("new york", "ny")}),
    # smallest city of texas: port arthur 61195 < longview 62762 < mcallen 67042 < ...
    ("answer ( smallest ( city ( loc_2 ( stateid ( 'texas' ) ) ) ) )", {city("port arthur", "tx")}),
    # highlow('colorado','co','mount elbert',4399,'arkansas river',1021)
    ("answer ( highest ( place ( loc_2 ( stateid ( 'colorado' ) ) ) ) )", {place("mount elbert")}),
    # highlow('nevada','nv','boundary peak',4005,'colorado river',143)
    ("answer ( lowest ( place ( loc_2 ( stateid ( 'nevada' ) ) ) ) )", {place("colorado river")}),
    # death valley -85 is the only place below new orleans -1
    ("answer ( lowest ( place ( all ) ) )", {place("death valley")}),
    # rivers in texas: red 1638, canadian 1458, rio grande 3033, pecos 805, washita 805
    ("answer ( longest ( river ( traverse_2 ( stateid ( 'texas' ) ) ) ) )", {river("rio grande")}),
    # river('delaware',451,...) < rock 459 < potomac 462 < ...
    ("answer ( shortest ( river ( all ) ) )", {river("delaware")}),
    # border lists: missouri and tennessee 8 states each, kentucky 7 next: a tie keeps both
    ("answer ( most ( state ( next_to_2 ( state ( all ) ) ) ) )", {state("missouri"), state("tennessee")}),
    # border('alaska','ak',[]), border('hawaii','hi',[]): no neighbours, fewer than maine's one (new hampshire)
    ("answer ( fewest ( state ( next_to_2 ( state ( all ) ) ) ) )", {state("alaska"), state("hawaii")}),
    # no river/3 fact lists alaska, hawaii, maine or rhode island: no rivers is the fewest
    ("answer ( fewest ( state ( loc_1 ( river ( all ) ) ) ) )",
     {state("alaska"), state("hawaii"), state("maine"), state("rhode island")}),
    # the mississippi's list names 10 distinct states; missouri and ohio 6
    ("answer ( most ( river ( traverse_2 ( state ( all ) ) ) ) )", {river("mississippi")}),
    # state('california',...,23.67e+6,...) has the largest population (new york 17.558e+6)
    ("answer ( largest_one ( population_1 ( state ( all ) ) ) )", {state("california")}),
    # area: district of columbia 1100 < rhode island 1212
    ("answer ( smallest_one ( area_1 ( state ( all ) ) ) )", {state("district of columbia")}),
    # density: new jersey 7365.0e+3 / 7787 = 945.8 > rhode island 947.2e+3 / 1212 = 781.5
    ("answer ( largest_one ( density_1 ( state ( all ) ) ) )", {state("new jersey")}),
    # capitals in city/4: phoenix 789704 > honolulu 762874 > indianapolis 700807
    ("answer ( largest_one ( population_1 ( capital_1 ( state ( all ) ) ) ) )", {city("phoenix", "az")}),
    # texas borders oklahoma 3025.0e+3, arkansas 2286.0e+3, louisiana 4206.0e+3, new mexico 1303.0e+3
    ("answer ( sum ( population_1 ( state ( next_to_2 ( stateid ( 'texas' ) ) ) ) ) )", {10_820_000.0}),
    # 1638 + 1458 + 3033 + 805 + 805: pecos and washita are both 805 long and both count
    ("answer ( sum ( len ( river ( traverse_2 ( stateid ( 'texas' ) ) ) ) ) )", {7739.0}),
    # border('alaska','ak',[]), border('hawaii','hi',[]); every other state is in some border list
    ("answer ( exclude ( state ( all ) , next_to_2 ( state ( all ) ) ) )", {state("alaska"), state("hawaii")}),
    # colorado borders ..oklahoma, new mexico, arizona, utah..; new mexico borders colorado, oklahoma, texas,
    # arizona, utah: oklahoma, arizona, utah
    ("answer ( count ( state ( intersection ( next_to_2 ( stateid ( 'colorado' ) ) , "
     "next_to_2 ( stateid ( 'new mexico' ) ) ) ) ) )", {3.0}),
    # rivers in texas longer than the red (1638): rio grande 3033 only
    ("answer ( count ( intersection ( river ( loc_2 ( stateid ( 'texas' ) ) ) , longer ( riverid ( 'red' ) ) ) ) )",
     {1.0}),
    # above mount elbert 4399: mount mckinley 6194 (alaska), mount whitney 4418 (california); rainier is 4392
    ("answer ( state ( loc_1 ( place ( higher_2 ( highest ( place ( loc_2 ( stateid ( 'colorado' ) ) ) ) ) ) ) ) )",
     {state("alaska"), state("california")}),
    # alabama's low point gulf of mexico 0; lower: death valley -85 (california), new orleans -1 (louisiana)
    ("answer ( count ( state ( low_point_2 ( lower_2 ( low_point_1 ( stateid ( 'alabama' ) ) ) ) ) ) )", {2.0}),
    # state('delaware','de','dover',...): dover is in no city/4 fact but is delaware's capital
    ("answer ( state ( capital_2 ( cityid ( 'dover', _ ) ) ) )", {state("delaware")}),
    # city/4 has springfield in il 100054, ma 152319, mo 133116, oh 72563
    ("answer ( population_1 ( cityid ( 'springfield', _ ) ) )", {100054.0, 152319.0, 133116.0, 72563.0}),
    # state('texas','tx','austin',14.229e+6,266.807e+3,...)
    ("answer ( density_1 ( stateid ( 'texas' ) ) )", {14.229e6 / 266.807e3}),
    # mountains are the high points of highlow/6: highlow('texas','tx','guadalupe peak',2667,'gulf of mexico',0)
    ("answer ( highest ( mountain ( loc_2 ( stateid ( 'texas' ) ) ) ) )", {place("guadalupe peak")}),
    ("answer ( elevation_1 ( highest ( mountain ( loc_2 ( stateid ( 'texas' ) ) ) ) ) )", {2667.0}),
    # highlow('alaska','ak','mount mckinley',6194,'pacific ocean',0): a low point is no mountain
    ("answer ( mountain ( loc_2 ( stateid ( 'alaska' ) ) ) )", {place("mount mckinley")}),
    # outside alaska: mount whitney 4418 (california) > mount elbert 4399 (colorado) > mount rainier 4392
    ("answer ( highest ( exclude ( mountain ( all ) , loc_2 ( stateid ( 'alaska' ) ) ) ) )", {place("mount whitney")}),
    # the USA's high point is its highest place: mount mckinley 6194
    ("answer ( elevation_1 ( high_point_1 ( countryid ( 'usa' ) ) ) )", {6194.0}),
    ("answer ( loc_1 ( placeid ( 'mount whitney' ) ) )", {state("california"), ("country", "usa")}),
    # geobase has no springfield in south dakota: a known city name in another state denotes nothing
    ("answer ( population_1 ( cityid ( 'springfield', 'sd' ) ) )", set()),
]


@needs_mirror
@pytest.mark.parametrize("program, expected", HAND_CHECKED)
def test_hand_checked_denotations(world, program, expected):
    assert funql.same_denotation(funql.execute(program, world), frozenset(expected))


def test_hand_checked_cases_cover_every_superlative_and_aggregate():
    used = {token for program, _ in HAND_CHECKED for token in program.split()}
    needed = {"largest", "smallest", "highest", "lowest", "longest", "shortest", "most", "fewest", "largest_one",
              "smallest_one", "count", "sum", "exclude", "intersection"}
    assert needed <= used


# ----- the Prolog reader ------------------------------------------------------------------------------------------
TRICKY_FACTS = """
% a comment line
state('district of columbia', 'dc','washington',638.0e+3,1100,0,'tenleytown','washington','georgetown','x').
state('texas','tx','austin',14.229e+6,266.807e+3,28,'houston','dallas','san antonio','el paso'). /* trailing */
city('texas','tx','austin',345496).
city('district of columbia','dc','washington',638333).
highlow('california','ca','mount whitney',4418,'death valley',-85).
border('alaska','ak',[]).
border('texas','tx',['new mexico']).
river('rio grande',3033,['colorado','new mexico','texas']).
lake('st. mary''s',12,['texas']).
mountain('texas','tx','guadalupe',2667).
road('10',['texas']).
"""


def test_prolog_reader_handles_quotes_numbers_lists_and_comments():
    facts = read_prolog_facts(TRICKY_FACTS)
    assert facts[0] == ("state", "district of columbia", "dc", "washington", 638000.0, 1100, 0,
                        "tenleytown", "washington", "georgetown", "x")
    assert facts[1][4:6] == (14.229e6, 266.807e3)
    assert facts[4][-1] == -85
    assert facts[5] == ("border", "alaska", "ak", [])
    assert facts[8] == ("lake", "st. mary's", 12, ["texas"])
    assert read_prolog_facts("f(g(a), [1, 2.5e-1], bare_atom).") == [("f", ("g", "a"), [1, 0.25], "bare_atom")]


@pytest.mark.parametrize("text, reason", [
    ("a :- b.", "':'"),
    ("f(X).", "variable 'X'"),
    ("f('a', 1)", "expected '.'"),
    ("f('unterminated).", "unexpected character"),
])
def test_prolog_reader_rejects_what_is_not_a_ground_fact(text, reason):
    with pytest.raises(FormalismError, match=reason):
        read_prolog_facts(text)


def test_geobase_from_tricky_facts():
    geo = GeoBase(read_prolog_facts(TRICKY_FACTS))
    assert geo.located_in[city("austin", "tx")] == {state("texas"), ("country", "usa")}
    assert geo.borders[state("texas")] == {state("new mexico")} and not geo.borders[state("alaska")]
    assert geo.elevation[place("death valley")] == -85.0
    assert geo.capital_of[state("texas")] == city("austin", "tx")
    assert ("lake", "st. mary's") in geo.by_kind["lake"] and geo.area[("lake", "st. mary's")] == 12.0
    assert geo.high_point[("country", "usa")] == {place("mount whitney")}
    # mountains are high points: not the low point death valley, nor mountain/4's guadalupe
    assert funql.execute("answer ( mountain ( all ) )", geo) == {place("mount whitney")}
    denotation = funql.execute("answer ( count ( city ( loc_2 ( stateid ( 'texas' ) ) ) ) )", geo)
    assert denotation == {1.0}
    with pytest.raises(FormalismError, match="unknown fact"):
        GeoBase(read_prolog_facts("country('usa',1,2)."))


def test_load_world_takes_the_file_or_its_folder(tmp_path):
    (tmp_path / "geobase.pl").write_text(TRICKY_FACTS)
    assert funql.load_world(tmp_path).by_kind["state"] == funql.load_world(tmp_path / "geobase.pl").by_kind["state"]
    with pytest.raises(FormalismError, match="no geobase.pl"):
        funql.load_world(tmp_path / "missing")


# ----- text: parse, unparse, canonical ----------------------------------------------------------------------------
def test_parse_unparse_and_canonical_spacing():
    program = "answer ( population_1 ( cityid ( 'des moines', _ ) ) )"
    assert funql.parse(program) == ("answer", ("population_1", ("cityid", "'des moines'", "_")))
    assert funql.unparse(funql.parse(program)) == program
    squashed = "answer(population_1(cityid('des moines',_)))"
    assert funql.canonical(squashed) == program
    assert funql.canonical(funql.canonical(squashed)) == funql.canonical(squashed)
    two = "answer ( exclude ( state ( all ) , stateid ( 'rhode island' ) ) )"
    assert funql.canonical(two.replace(" , ", ",")) == two


@pytest.mark.parametrize("program, message", [
    ("answer ( state ( all )", "expected ')' or ',' at token 6"),
    ("answer ( state ( all ) ) )", "expected the end at token 7"),
    ("answer ( )", "answer takes 1 argument(s), found 0"),
    ("answer ( foo ( all ) )", "unknown predicate 'foo'"),
    ("answer ( state )", "predicate 'state' needs 1 argument"),
    ("answer ( exclude ( state ( all ) ) )", "exclude takes 2 argument"),
    ("answer ( 'texas' )", "outside an entity constant"),
    ("answer ( stateid ( texas ) )", "must be a quoted name"),
    ("answer ( cityid ( 'austin' ) )", "cityid takes 2 argument"),
    ("answer ( stateid ( 'texas )", "unbalanced quote"),
])
def test_parse_errors(program, message):
    with pytest.raises(FormalismError, match=re.escape(message)):
        funql.parse(program)


def test_deep_nesting_is_an_error_not_a_crash():
    tiny_world = GeoBase(read_prolog_facts(TRICKY_FACTS))
    deep = "answer ( " + "state ( " * 5000 + "all" + " )" * 5001
    with pytest.raises(FormalismError, match="nested too deeply"):
        funql.canonical(deep)
    with pytest.raises(FormalismError, match="nested too deeply"):
        funql.execute(deep, tiny_world)
    for depth in (300, 900, 2000):  # whichever step runs out of stack, the answer is a set or a FormalismError
        program = "answer ( count ( " + "state ( " * depth + "all" + " )" * (depth + 2)
        try:
            assert funql.execute(program, tiny_world) == {2.0}
        except FormalismError as e:
            assert "nested too deeply" in str(e)


# ----- types ------------------------------------------------------------------------------------------------------
def test_types_of_programs():
    assert funql.type_of("answer ( stateid ( 'texas' ) )") == {"state"}
    assert funql.type_of("loc_2 ( stateid ( 'texas' ) )") == {"city", "river", "place", "lake"}
    assert funql.type_of("mountain ( all )") == {"place"}  # mountains are places (module docstring)
    assert funql.type_of("city ( loc_2 ( stateid ( 'texas' ) ) )") == {"city"}
    assert funql.type_of("largest_one ( population_1 ( capital_1 ( state ( all ) ) ) )") == {"city"}
    assert funql.type_of("count ( river ( all ) )") == {"number"}
    assert funql.type_of("elevation_2 ( 0 )") == {"place"}


@pytest.mark.parametrize("program, message", [
    ("answer ( population_1 ( river ( all ) ) )", "population_1 cannot take argument 1 'river ( all )' of type river"),
    ("answer ( count ( 3 ) )", "count cannot take argument 1 '3' of type number"),
    ("answer ( next_to_1 ( riverid ( 'red' ) ) )", "next_to_1 cannot take argument 1"),
    ("answer ( count ( all ) )", "count cannot take argument 1 'all'"),
    ("answer ( exclude ( state ( all ) , river ( all ) ) )", "exclude cannot take arguments of types"),
    ("answer ( highest ( state ( all ) ) )", "highest cannot take argument 1"),
    ("answer ( most ( state ( all ) ) )", "most takes a relation"),
    ("answer ( largest_one ( state ( all ) ) )", "largest_one takes an attribute"),
    ("answer ( largest_one ( len ( state ( all ) ) ) )", "len cannot take argument 1"),
    ("answer ( sum ( state ( all ) ) )", "sum cannot take argument 1"),
])
def test_ill_typed_programs_are_rejected(program, message):
    with pytest.raises(FormalismError, match=re.escape(message)):
        funql.type_of(program)


def test_compose_builds_only_well_typed_applications():
    utah = ("stateid", "'utah'")
    assert compose("next_to_1", utah) == ("next_to_1", utah)
    assert type_of(compose("count", compose("state", compose("next_to_1", utah)))) == {"number"}
    with pytest.raises(FormalismError, match="population_1"):
        compose("population_1", ("river", "all"))
    with pytest.raises(FormalismError, match="unknown predicate 'borders'"):
        compose("borders", utah)
    for predicate, overloads in FUNQL_SIGNATURES.items():  # every overload has its predicate's arity
        assert len({len(params) for params, _ in overloads}) == 1, predicate


# ----- execution errors and denotation comparison -----------------------------------------------------------------
@needs_mirror
@pytest.mark.parametrize("program, message", [
    ("answer ( population_1 ( stateid ( 'atlantis' ) ) )", "unknown state 'atlantis'"),
    ("answer ( population_1 ( cityid ( 'atlantis', _ ) ) )", "unknown city 'atlantis'"),
    ("answer ( population_1 ( cityid ( 'austin', 'zz' ) ) )", "unknown state abbreviation 'zz'"),
    ("answer ( len ( riverid ( 'amazon' ) ) )", "unknown river 'amazon'"),
    ("answer ( state ( loc_2 ( countryid ( 'canada' ) ) ) )", "unknown country 'canada'"),
    ("all", "not a program"),
    ("answer ( population_1 ( river ( all ) ) )", "population_1 cannot take"),
])
def test_execution_errors(world, program, message):
    with pytest.raises(FormalismError, match=message):
        funql.execute(program, world)


def test_execute_needs_the_world():
    with pytest.raises(FormalismError, match="needs the world"):
        funql.execute("answer ( state ( all ) )", None)


def test_same_denotation_tolerates_small_numeric_differences():
    assert funql.same_denotation(frozenset({53.330684727}), frozenset({53.3306847}))
    assert not funql.same_denotation(frozenset({53.33}), frozenset({53.4}))
    assert funql.same_denotation(frozenset({state("texas"), 1.0}), frozenset({1.0000000001, state("texas")}))
    assert not funql.same_denotation(frozenset({state("texas")}), frozenset({state("utah")}))
    assert not funql.same_denotation(frozenset({1.0, 2.0}), frozenset({1.0}))


@needs_mirror
def test_random_token_soup_only_raises_formalism_errors(world):
    vocabulary = ["answer", "state", "city", "river", "loc_1", "loc_2", "most", "largest_one", "population_1",
                  "count", "exclude", "all", "(", ")", ",", "stateid", "'texas'", "cityid", "_", "0", "sum"]
    rng = random.Random(0)
    for _ in range(500):
        program = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 14)))
        try:
            assert isinstance(funql.execute(program, world), frozenset)
        except FormalismError:
            pass


# ----- every gold program -----------------------------------------------------------------------------------------
# The gold programs whose denotation is empty, by reason (geobase.pl has no fact that answers them).
EMPTY_GOLD = {
    # no population or area facts for the country; cities have no area
    "answer ( population_1 ( countryid ( 'usa' ) ) )",
    "answer ( area_1 ( countryid ( 'usa' ) ) )",
    "answer ( density_1 ( countryid ( 'usa' ) ) )",
    "answer ( area_1 ( cityid ( 'seattle', _ ) ) )",
    "answer ( largest_one ( density_1 ( city ( all ) ) ) )",
    "answer ( largest_one ( density_1 ( city ( loc_2 ( countryid ( 'usa' ) ) ) ) ) )",
    # nothing is located in or traverses a city, no state borders a river, a capital is never a place
    "answer ( highest ( place ( loc_2 ( cityid ( 'san francisco', _ ) ) ) ) )",
    "answer ( river ( traverse_2 ( cityid ( 'austin', 'tx' ) ) ) )",
    "answer ( state ( next_to_2 ( river ( riverid ( 'mississippi' ) ) ) ) )",
    "answer ( state ( next_to_2 ( river ( riverid ( 'missouri' ) ) ) ) )",
    "answer ( state ( next_to_2 ( longest ( river ( loc_2 ( countryid ( 'usa' ) ) ) ) ) ) )",
    "answer ( state ( loc_1 ( capital ( highest ( place ( all ) ) ) ) ) )",
    # lakes are never major; no major city or river there (cities over 150,000, rivers over 750)
    "answer ( major ( lake ( loc_2 ( countryid ( 'usa' ) ) ) ) )",
    "answer ( major ( lake ( loc_2 ( stateid ( 'michigan' ) ) ) ) )",
    "answer ( major ( city ( loc_2 ( stateid ( 'delaware' ) ) ) ) )",
    "answer ( major ( city ( loc_2 ( stateid ( 'montana' ) ) ) ) )",
    "answer ( major ( city ( loc_2 ( stateid ( 'vermont' ) ) ) ) )",
    "answer ( major ( city ( loc_2 ( stateid ( 'wyoming' ) ) ) ) )",
    "answer ( population_1 ( major ( city ( loc_2 ( stateid ( 'montana' ) ) ) ) ) )",
    "answer ( major ( river ( loc_2 ( stateid ( 'florida' ) ) ) ) )",
    "answer ( major ( city ( loc_2 ( state ( traverse_1 ( major ( river ( loc_2 ( stateid ( 'virginia' ) ) ) ) ) "
    ") ) ) ) )",
    # alaska (the largest state, home of mount mckinley) has no rivers and no neighbours, nor has hawaii;
    # juneau is in no city/4 fact, so has no population
    "answer ( river ( loc_2 ( stateid ( 'alaska' ) ) ) )",
    "answer ( river ( traverse_2 ( stateid ( 'alaska' ) ) ) )",
    "answer ( shortest ( river ( loc_2 ( stateid ( 'alaska' ) ) ) ) )",
    "answer ( river ( traverse_2 ( largest ( state ( all ) ) ) ) )",
    "answer ( longest ( river ( loc_2 ( largest ( state ( all ) ) ) ) ) )",
    "answer ( longest ( river ( loc_2 ( state ( loc_1 ( highest ( place ( all ) ) ) ) ) ) ) )",
    "answer ( largest ( city ( loc_2 ( state ( next_to_2 ( largest ( state ( all ) ) ) ) ) ) ) )",
    "answer ( state ( next_to_2 ( stateid ( 'alaska' ) ) ) )",
    "answer ( state ( next_to_2 ( stateid ( 'hawaii' ) ) ) )",
    "answer ( population_1 ( capital ( loc_2 ( largest ( state ( all ) ) ) ) ) )",
    # no river/3 fact for maine; the colorado of river/3 does not cross texas; every river crosses the usa
    "answer ( river ( traverse_2 ( stateid ( 'maine' ) ) ) )",
    "answer ( len ( intersection ( riverid ( 'colorado' ) , river ( loc_2 ( stateid ( 'texas' ) ) ) ) ) )",
    "answer ( exclude ( river ( all ) , traverse_2 ( countryid ( 'usa' ) ) ) )",
    # geobase has no springfield in south dakota
    "answer ( population_1 ( cityid ( 'springfield', 'sd' ) ) )",
}
# The one gold program written without a space after a comma; unparse gives the data's usual spacing.
MISSPACED_GOLD = ("answer ( count ( intersection ( state ( loc_2 ( countryid ( 'usa' ) ) ) ,traverse_1 ( shortest "
                  "( river ( all ) ) ) ) ) )")


@needs_mirror
def test_split_files_have_the_paper_counts():
    counts = {name: len((GEO / "funql" / name).read_text().splitlines()) for name in SPLIT_FILES}
    assert [counts[name] for name in SPLIT_FILES] == [540, 60, 280, 544, 60, 276, 540, 60, 280]


@needs_mirror
def test_every_gold_program_parses_round_trips_type_checks_and_executes(world):
    programs = gold_programs()
    assert len(programs) == 645
    empty, misspaced = set(), set()
    for program in programs:
        tree = funql.parse(program)
        text = funql.unparse(tree)
        if text != program:
            misspaced.add(program)
            assert text.split() == program.replace(",", " , ").split()
        canonical = funql.canonical(program)
        assert funql.canonical(canonical) == canonical == text
        assert funql.canonical(funql.round_trip(program)) == canonical
        assert type_of(tree) <= {"state", "city", "river", "place", "lake", "country", "number"}
        if not funql.execute(program, world):
            empty.add(program)
    assert misspaced == {MISSPACED_GOLD}
    assert empty == EMPTY_GOLD
