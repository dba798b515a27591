"""The COGS formalism: logical forms parse to definite prefix + conjuncts and print back to the same text."""
import pytest

from conftest import DATA_ROOT, needs_mirror
from zoo.formalisms.base import FormalismError
from zoo.formalisms.cogs import COGS, Conjunct, LogicalForm

cogs = COGS()
DEFINITE = "* sailor ( x _ 1 ) ; dust . agent ( x _ 2 , x _ 1 ) AND dust . theme ( x _ 2 , x _ 4 ) AND boy ( x _ 4 )"


def test_sentence_form_structure():
    assert cogs.parse(DEFINITE) == LogicalForm(
        definites=(Conjunct(("sailor",), (1,)),),
        conjuncts=(Conjunct(("dust", "agent"), (2, 1)), Conjunct(("dust", "theme"), (2, 4)), Conjunct(("boy",), (4,))))
    names = cogs.parse("roll . agent ( x _ 1 , Emma ) AND cake . nmod . beside ( x _ 3 , x _ 6 )")
    assert names.conjuncts == (Conjunct(("roll", "agent"), (1, "Emma")), Conjunct(("cake", "nmod", "beside"), (3, 6)))
    assert names.definites == () and names.lambdas == () and names.name is None


def test_primitive_forms():
    verb = "LAMBDA a . LAMBDA b . LAMBDA e . touch . agent ( e , b ) AND touch . theme ( e , a )"
    assert cogs.parse(verb) == LogicalForm(lambdas=("a", "b", "e"), conjuncts=(
        Conjunct(("touch", "agent"), ("e", "b")), Conjunct(("touch", "theme"), ("e", "a"))))
    assert cogs.parse("LAMBDA a . ball ( a )").conjuncts == (Conjunct(("ball",), ("a",)),)
    assert cogs.parse("Emma") == LogicalForm(name="Emma")
    for program in (verb, "LAMBDA a . ball ( a )", "Emma", DEFINITE):
        assert cogs.round_trip(program) == program


def test_canonical_normalises_spacing_and_keeps_conjunct_order():
    assert cogs.canonical("*  sailor(x_1);dust.agent(x _ 2,x_1)\tAND boy ( x _ 4 )") == \
        "* sailor ( x _ 1 ) ; dust . agent ( x _ 2 , x _ 1 ) AND boy ( x _ 4 )"
    swapped = "dust . theme ( x _ 2 , x _ 4 ) AND dust . agent ( x _ 2 , x _ 1 )"
    assert cogs.canonical(swapped) != cogs.canonical(
        "dust . agent ( x _ 2 , x _ 1 ) AND dust . theme ( x _ 2 , x _ 4 )")
    assert cogs.canonical(cogs.canonical(DEFINITE)) == cogs.canonical(DEFINITE) == DEFINITE


@pytest.mark.parametrize("program, message", [
    ("", r"empty logical form"),
    ("boy ( x _ 4 ) AND", r"expected a predicate at token 7, found the end"),
    ("boy ( x _ 4 ) boy ( x _ 5 )", r"expected 'AND' or the end at token 6, found 'boy'"),
    ("boy ( x _ 4", r"expected '\)' at token 5, found the end"),
    ("boy ( x 4 )", r"expected '_' at token 3, found '4'"),
    ("boy ( x _ y )", r"expected a word index after 'x _' at token 4, found 'y'"),
    ("boy ( )", r"expected an argument \('x _ i', a proper name\) at token 2, found '\)'"),
    ("boy ( e )", r"expected an argument .* at token 2, found 'e'"),  # unbound lambda variable
    ("LAMBDA a . boy ( b )", r"expected an argument \('x _ i', a proper name, or one of \['a'\]\) at token 5"),
    ("LAMBDA a . LAMBDA a . boy ( a )", r"expected a fresh variable name .* at token 4, found 'a'"),
    ("* sailor ( x _ 1 ) boy ( x _ 4 )", r"expected ';' at token 7, found 'boy'"),
    ("dust . ( x _ 2 )", r"expected a predicate word after '.' at token 2, found '\('"),
    ("boy ( x _ 4 ) AND Emma", r"expected a predicate at token 7, found 'Emma'"),
    ("emma", r"expected '\(' at token 1, found the end"),
    ("boy ( x _ 4 ) ; girl ( x _ 1 )", r"expected 'AND' or the end at token 6, found ';'"),
    ("boy ( x _ 4 ) & girl ( x _ 1 )", r"unexpected character '&' at character 14 \(token 6\)"),
])
def test_malformed_forms_name_position_and_expectation(program, message):
    with pytest.raises(FormalismError, match=message):
        cogs.canonical(program)


@needs_mirror
@pytest.mark.parametrize("part, count", [("train", 24155), ("dev", 3000), ("test", 3000), ("gen", 21000)])
def test_every_logical_form_prints_back_to_its_exact_text(part, count):
    lines = (DATA_ROOT / "cogs" / f"{part}.tsv").read_text(encoding="utf-8").splitlines()
    assert len(lines) == count
    for line in lines:
        logical_form = line.split("\t")[1]
        assert cogs.canonical(logical_form) == logical_form, line
