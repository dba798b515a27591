"""SCAN actions, SCAN-SP (typed programs, executor) and the SCAN command -> SCAN-SP grammar."""
import json

import pytest
from conftest import DATA_ROOT, needs_mirror

from zoo.formalisms.base import FormalismError
from zoo.formalisms.scan import (SCAN_ACTIONS, SCAN_SP_SIGNATURES, ScanActions, ScanSP, command_to_program,
                                 is_subtype, result_type, type_of)

SCAN_SP = ScanSP()
ACTIONS = ScanActions()
L, R = "I_TURN_LEFT", "I_TURN_RIGHT"
DSL_FILES = [f"{part}_{split}.json" for part in ("train", "dev", "test")
             for split in ("simple", "right", "around_right")]


# ----- hand-written cases, actions worked out from Lake & Baroni 2018 Fig. 6 -------------------------------------
HAND_CASES = [
    ("turn left", "i_turn ( i_left )", [L]),
    ("walk", "i_walk ( )", ["I_WALK"]),
    ("jump thrice", "i_thrice ( i_jump ( ) )", ["I_JUMP"] * 3),
    ("turn opposite left thrice", "i_thrice ( i_turn ( i_left , i_opposite ) )", [L] * 6),
    ("turn around right", "i_turn ( i_right , i_around )", [R] * 4),
    ("jump around right after walk left twice",
     "i_after ( i_jump ( i_right , i_around ) , i_twice ( i_walk ( i_left ) ) )",
     [L, "I_WALK", L, "I_WALK", R, "I_JUMP", R, "I_JUMP", R, "I_JUMP", R, "I_JUMP"]),
    ("look opposite right and turn around left",
     "i_and ( i_look ( i_right , i_opposite ) , i_turn ( i_left , i_around ) )",
     [R, R, "I_LOOK", L, L, L, L]),
    ("run after turn opposite right", "i_after ( i_run ( ) , i_turn ( i_right , i_opposite ) )", [R, R, "I_RUN"]),
]


@pytest.mark.parametrize("command, program, actions", HAND_CASES)
def test_hand_written_commands(command, program, actions):
    assert command_to_program(command) == program
    assert SCAN_SP.execute(program) == tuple(actions)
    assert SCAN_SP.answer_denotation(" ".join(actions)) == tuple(actions)


def test_types_of_programs():
    assert type_of(SCAN_SP.parse("i_walk ( i_left , i_around )")) == "action"
    assert type_of(SCAN_SP.parse("i_twice ( i_walk ( ) )")) == "clause"
    assert type_of(SCAN_SP.parse("i_and ( i_walk ( ) , i_twice ( i_run ( i_right ) ) )")) == "command"
    assert type_of("i_left") == "direction" and type_of("i_around") == "modifier"
    # the bottom-up (CKY) entry point: types of sub-spans, no trees
    assert result_type("i_after", ["action", "clause"]) == "command"
    assert result_type("i_turn", ["direction"]) == "action"
    assert is_subtype("action", "command") and not is_subtype("command", "clause")
    assert set(SCAN_SP_SIGNATURES) == {"i_left", "i_right", "i_opposite", "i_around", "i_walk", "i_look", "i_run",
                                       "i_jump", "i_turn", "i_twice", "i_thrice", "i_and", "i_after"}


@pytest.mark.parametrize("program, message", [
    ("i_twice ( i_left )", r"argument 1 of i_twice must be of type action, found 'i_left' of type direction"),
    ("i_twice ( i_twice ( i_walk ( ) ) )", r"argument 1 of i_twice must be of type action"),  # no "x twice twice"
    ("i_and ( i_and ( i_walk ( ) , i_run ( ) ) , i_jump ( ) )", r"argument 1 of i_and must be of type clause"),
    ("i_after ( i_walk ( ) , i_right )", r"argument 2 of i_after must be of type clause, found 'i_right'"),
    ("i_walk ( i_around )", r"argument 1 of i_walk must be of type direction, found 'i_around' of type modifier"),
    ("i_walk ( i_left , i_right )", r"argument 2 of i_walk must be of type modifier"),
    ("i_turn ( )", r"i_turn takes 1 to 2 argument\(s\)"),
    ("i_twice ( i_walk ( ) , i_run ( ) )", r"i_twice takes 1 argument\(s\)"),
    ("i_walk ( i_left , i_around , i_left )", r"i_walk takes 0 to 2"),
    ("i_walk", r"i_walk must be applied"),
    ("i_left ( )", r"i_left is a constant"),
    ("i_fly ( i_left )", r"unknown predicate 'i_fly'"),
    ("i_walk ( 'left' )", r"unknown predicate \"'left'\""),
    ("i_left", r"must be an action, clause or command, found 'i_left' of type direction"),
])
def test_type_errors(program, message):
    with pytest.raises(FormalismError, match=message):
        SCAN_SP.execute(program)


@pytest.mark.parametrize("program, message", [
    ("", r"empty program"),
    ("   ", r"empty program"),
    ("i_walk ( i_left", r"expected '\)' or ',' at token 3, found the end"),
    ("i_walk ( i_left ) )", r"expected the end at token 4, found '\)'"),
    ("i_walk ( ) i_run ( )", r"expected the end at token 3, found 'i_run'"),
    ("i_and ( i_walk ( ) , )", r"expected a symbol at token 6, found '\)'"),
    ("i_twice ( " * 3000 + "i_walk ( )" + " )" * 3000, r"nested too deeply"),
])
def test_parse_errors(program, message):
    with pytest.raises(FormalismError, match=message):
        SCAN_SP.canonical(program)


def test_canonical_normalises_spacing():
    assert SCAN_SP.canonical("i_twice(i_walk(i_left,i_around))") == "i_twice ( i_walk ( i_left , i_around ) )"
    assert SCAN_SP.canonical("i_jump (\n)") == "i_jump ( )"


@pytest.mark.parametrize("command, message", [
    ("", r"expected one of 'walk', 'look', 'run', 'jump', 'turn' at word 0, found the end"),
    ("turn", r"expected one of 'opposite', 'around', 'left', 'right' at word 1, found the end"),
    ("walk opposite twice", r"expected one of 'left', 'right' at word 2, found 'twice'"),
    ("walk left left", r"expected one of 'twice', 'thrice', 'and', 'after', the end at word 2, found 'left'"),
    ("walk twice thrice", r"expected one of 'and', 'after', the end at word 2, found 'thrice'"),
    ("walk and run and jump", r"at word 3, found 'and'"),
    ("walk and", r"expected one of 'walk', .* at word 2, found the end"),
    ("fly left", r"at word 0, found 'fly'"),
])
def test_bad_commands(command, message):
    with pytest.raises(FormalismError, match=message):
        command_to_program(command)


def test_scan_actions():
    assert ACTIONS.parse("I_TURN_LEFT  I_JUMP\n") == (L, "I_JUMP")
    assert ACTIONS.canonical(" I_WALK   I_RUN ") == "I_WALK I_RUN"
    assert ACTIONS.round_trip("I_LOOK I_TURN_RIGHT") == "I_LOOK I_TURN_RIGHT"
    assert len(SCAN_ACTIONS) == 6
    with pytest.raises(FormalismError, match=r"at token 1, found 'I_FLY'"):
        ACTIONS.parse("I_WALK I_FLY")
    with pytest.raises(FormalismError, match=r"found 'i_walk'"):
        ACTIONS.canonical("i_walk")
    with pytest.raises(FormalismError, match=r"empty action sequence"):
        ACTIONS.parse("  ")
    with pytest.raises(FormalismError, match=r"found 'I_FLY'"):
        SCAN_SP.answer_denotation("I_FLY")


# ----- the whole mirror ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dsl_examples():
    return {name: [json.loads(line) for line in open(DATA_ROOT / "scan_sp" / "dsl" / name)] for name in DSL_FILES}


@needs_mirror
def test_every_dsl_program_executes_to_its_answer_and_is_canonical(dsl_examples):
    for name, examples in dsl_examples.items():
        wrong = [ex["program"] for ex in examples
                 if SCAN_SP.execute(ex["program"]) != SCAN_SP.answer_denotation(ex["answer"])]
        assert not wrong, f"{name}: {len(wrong)}/{len(examples)} programs execute wrongly, e.g. {wrong[0]}"
        # round_trip is unparse(parse(p)) == canonical(p), so a fixed point of canonical is idempotent too
        not_canonical = [ex["program"] for ex in examples if SCAN_SP.canonical(ex["program"]) != ex["program"]]
        assert not not_canonical, f"{name}: {len(not_canonical)} programs change under canonical"


@needs_mirror
def test_grammar_reproduces_every_dsl_program(dsl_examples):
    for name, examples in dsl_examples.items():
        wrong = [(ex["question"], ex["program"]) for ex in examples
                 if command_to_program(ex["question"]) != ex["program"]]
        assert not wrong, f"{name}: {len(wrong)}/{len(examples)} programs differ, e.g. {wrong[0]}"
    assert sum(map(len, dsl_examples.values())) == 60312


@needs_mirror
def test_grammar_interprets_every_scan_command():
    lines = (DATA_ROOT / "scan" / "tasks.txt").read_text().splitlines()
    assert len(lines) == 20910
    wrong = []
    for line in lines:
        command, actions = line.removeprefix("IN: ").split(" OUT: ")
        if SCAN_SP.execute(command_to_program(command)) != ACTIONS.parse(actions):
            wrong.append(command)
    assert not wrong, f"{len(wrong)}/{len(lines)} commands interpreted wrongly, e.g. {wrong[0]}"
