"""program(T) for span trees (Herzig & Berant 2021, §2): the sub-program of every node, composed bottom-up by types.

A node labelled with a constant of Σ means that constant; a ``join`` node composes its children by function
application, "where a domain-specific type system is used to determine which child is the function and which is
the argument (along with the exact argument position for predicates with multiple arguments)"; φ children are
skipped. The type systems are the formalisms' (``zoo.formalisms.funql``, ``zoo.formalisms.scan``); this module adds
what composing *parts* of programs needs:

* a predicate with open argument slots is a ``Partial``; filling its last slot makes it a program tree (``compose``);
* the left child is tried as the function first, then the right one (as the authors' implementation does);
* an argument to the *right* of its function fills the last open slot that accepts its type, one to the left the
  first such slot: ``exclude`` takes "rivers not in texas" as ``exclude ( river ( all ) , river ( loc_2 ( ... ) ) )``
  and SCAN's ``and`` puts its left clause first;
* a partial used as an argument, or left at the root, is *closed*: FunQL's kind predicates take ``all``
  (``city`` alone is ``city ( all )``), SCAN verbs drop trailing optional slots (``walk`` is ``i_walk ( )``);
* the root is wrapped as the language writes programs (FunQL: ``answer ( ... )``).

A composition that no typing allows gives None, and so does a root that does not close: the tree is semantically
invalid and the parser moves on to the next best one (§3.2).

For hard-EM (§3.3), ``composition_table`` lists the sub-programs of a gold program (its subtrees and their partial
applications) and which pairs compose into another one, for ``models.cky.Composition``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import combinations
from typing import Any, Iterable

import torch

from zoo.formalisms import FormalismError, get_formalism
from zoo.formalisms import funql, scan
from zoo.formalisms.base import parse_brackets, unparse_brackets

Tree = Any  # a program tree of the formalism: a leaf str or a tuple (head, *arguments)


@dataclass(frozen=True)
class Partial:
    """A predicate with some argument slots open (None)."""

    head: str
    args: tuple


Item = Any  # a Tree or a Partial


class SpanLanguage:
    """The composition rules of one formalism for span trees; subclasses give its type system."""

    formalism = ""

    # ----- per formalism --------------------------------------------------------------------------------------
    def slots(self, head: str) -> int:
        """The number of argument slots of a predicate that takes arguments, 0 for a constant leaf."""
        raise NotImplementedError

    def fits(self, head: str, slot: int, argument: Tree) -> bool:
        """Whether a closed program may fill ``slot`` of ``head``."""
        raise NotImplementedError

    def complete(self, head: str, args: tuple) -> Tree | None:
        """``head ( args )`` when it type-checks, else None."""
        raise NotImplementedError

    def close(self, item: Item) -> Tree | None:
        """A closed program for an item (its open slots filled by defaults or dropped); None if it cannot close."""
        raise NotImplementedError

    def finish(self, tree: Tree) -> str | None:
        """The program text of a closed root, or None if the language rejects it as a whole program."""
        raise NotImplementedError

    def categories(self, program: str) -> set[str]:
        """The constants of Σ that ``program`` uses."""
        raise NotImplementedError

    def leaf(self, category: str) -> Item:
        """The sub-program of a node labelled with a constant."""
        raise NotImplementedError

    def entity_phrases(self, category: str) -> list[str]:
        """The phrases that name an entity constant (the automatic lexicon of §3.3); none for a predicate."""
        return []

    def domain_categories(self, world: Any) -> set[str]:
        """Constants of Σ the language and its database define, used by a training program or not."""
        return set()

    def entity_kind(self, category: str) -> str | None:
        """The kind of entity constant a category is (its entities may share one span score), None if none."""
        return None

    # ----- shared ---------------------------------------------------------------------------------------------
    def compose(self, left: Item, right: Item) -> Item | None:
        """The sub-program of a join node over ``left`` and ``right`` (in sentence order), or None."""
        for function, argument, from_right in ((left, right, True), (right, left, False)):
            if not isinstance(function, Partial):
                continue
            closed = self.close(argument)
            if closed is None:
                continue
            open_slots = [i for i, arg in enumerate(function.args)
                          if arg is None and self.fits(function.head, i, closed)]
            if not open_slots:
                continue
            slot = self.choose_slot(function, closed, open_slots, from_right)
            args = function.args[:slot] + (closed,) + function.args[slot + 1:]
            if all(arg is not None for arg in args):
                tree = self.complete(function.head, args)
                if tree is not None:
                    return tree
                continue
            return replace(function, args=args)
        return None

    def choose_slot(self, function: Partial, argument: Tree, open_slots: list[int], from_right: bool) -> int:
        """Which of the open slots that accept ``argument`` it fills: the last from the right, the first from
        the left."""
        return open_slots[-1] if from_right else open_slots[0]

    def program(self, root: Item | None) -> str | None:
        """The program of a root sub-program, or None if it is not a whole program."""
        if root is None:
            return None
        closed = self.close(root)
        return None if closed is None else self.finish(closed)

    def tree_item(self, node, labels: list[str]) -> Item | None:
        """The sub-program of a ``models.cky.SpanNode`` whose constant labels index ``labels``. Binary nodes
        compose their non-φ children; a ternary node composes its outer children first, then the middle (§3.4)."""
        from models.cky import JOIN, PHI, join_meaning

        if node.label not in (JOIN, PHI):
            return self.leaf(labels[node.label])
        children = [self.tree_item(child, labels) for child in node.children if child.label != PHI]
        if len(children) == 1:
            return children[0]
        if len(children) == 2:
            return join_meaning(self.compose, *children)
        if len(children) == 3:
            return join_meaning(self.compose, children[0], children[2], children[1])
        return None  # a join node with no meaningful child

    def sub_programs(self, tree: Tree) -> list[Item]:
        """Every sub-program a span tree of ``tree`` may build: its closed subtrees, and each predicate node with
        any subset of its arguments in place (the node with none is its leaf)."""
        items: list[Item] = []
        for node in _nodes(tree):
            if isinstance(node, str) or not self.slots(node[0]):
                items.append(node)
                continue
            head, args = node[0], self.slot_args(node)
            filled = [i for i, arg in enumerate(args) if arg is not None]
            for size in range(len(filled) + 1):
                for chosen in combinations(filled, size):
                    partial = tuple(args[i] if i in chosen else None for i in range(len(args)))
                    items.append(self.complete(head, partial) if all(a is not None for a in partial)
                                 else Partial(head, partial))
        return list(dict.fromkeys(items))

    def slot_args(self, node: tuple) -> tuple:
        """A predicate node's arguments as slots (None where the node leaves a slot to its default)."""
        return tuple(node[1:]) + (None,) * (self.slots(node[0]) - len(node) + 1)

    def composition_table(self, program: str, labels: list[str]):
        """``models.cky.Composition`` for a gold program; None if the gold is no root of any span tree here."""
        from models.cky import NONE, Composition

        root = self.gold_root(program)
        items = self.sub_programs(root)
        ids = {item: i for i, item in enumerate(items)}
        gold = ids.get(self.root_item(root))
        if gold is None:
            return None
        table = torch.full((len(items), len(items)), NONE, dtype=torch.long)
        for a, left in enumerate(items):
            for b, right in enumerate(items):
                if isinstance(left, Partial) or isinstance(right, Partial):  # two closed programs never compose
                    table[a, b] = ids.get(self.compose(left, right), NONE)
        constant = torch.tensor([ids.get(self.leaf(label), NONE) for label in labels], dtype=torch.long)
        return Composition(constant=constant, table=table, gold=gold)

    def gold_root(self, program: str) -> Tree:
        """The tree whose sub-programs span trees build (FunQL: inside ``answer``)."""
        return get_formalism(self.formalism).parse(program)

    def root_item(self, root: Tree) -> Item:
        """The item a span tree's root holds for a gold ``root`` (a kind predicate over ``all`` is its leaf)."""
        if isinstance(root, tuple) and self.slots(root[0]):
            args = self.slot_args(root)
            if any(arg is None for arg in args):
                return Partial(root[0], args)
        return root


def gold_span_tree(n_words: int, program: str, gold_spans: list[dict], language: SpanLanguage,
                   categories: list[str]):
    """The authors' annotated tree (``*_spans.json``: inclusive word spans typed ``span`` for join, the constant
    for a leaf, gaps left out as φ) as a ``models.cky.SpanNode`` whose constant labels index ``categories``; None
    when it cannot be one: not rooted at the whole utterance (a few index BERT word pieces), a join without
    children (incomplete in the data), or a constant missing from ``categories``."""
    from models.cky import JOIN, PHI, SpanNode

    # the files name entities "stateid#'texas'"; the gold program says which cityid ( 'austin', _ ) that is
    constants = {f"{head}#{args[0]}": label for label in language.categories(program)
                 if "(" in label for head, *args in [language.leaf(label)]}
    index = {category: i for i, category in enumerate(categories)}
    try:
        items = sorted(((s["span"][0], s["span"][1] + 1, s["type"]) for s in gold_spans), key=lambda t: (t[0], -t[1]))
    except (KeyError, IndexError, TypeError):
        return None
    if not items or items[0][:2] != (0, n_words):
        return None

    def build(start: int, end: int, label: str, inner: list) -> SpanNode | None:
        if label != "span":
            category = index.get(constants.get(label, label))
            return None if category is None or inner else SpanNode(start, end, category)
        children, position, i = [], start, 0
        while i < len(inner):
            a, b, child_label = inner[i]
            nested = [t for t in inner[i + 1:] if a <= t[0] and t[1] <= b]
            if position < a:
                children.append(SpanNode(position, a, PHI))
            children.append(build(a, b, child_label, nested))
            position, i = b, i + 1 + len(nested)
        if children and position < end:
            children.append(SpanNode(position, end, PHI))
        if not children or any(child is None for child in children):
            return None
        return SpanNode(start, end, JOIN, tuple(children))

    return build(*items[0], items[1:])


def labeled_spans(tree, categories: list[str]) -> set[tuple[int, int, str]]:
    """A span tree as the set the paper's tree F1 compares (§4.4): (first word, last word, category or "join")
    of every node but φ."""
    from models.cky import JOIN, PHI

    return {(node.start, node.end - 1, "join" if node.label == JOIN else categories[node.label])
            for node in tree.nodes() if node.label != PHI}


def _nodes(tree: Tree) -> Iterable[Tree]:
    yield tree
    if isinstance(tree, tuple):
        for arg in tree[1:]:
            yield from _nodes(arg)


class FunQLSpans(SpanLanguage):
    """GeoQuery FunQL: Σ holds the predicates, entity constants (``stateid ( 'texas' )``) and numbers."""

    formalism = "funql"

    def slots(self, head: str) -> int:
        if head in funql.CONSTANTS or head not in funql.FUNQL_SIGNATURES:
            return 0
        return funql.ARITY[head]

    def fits(self, head: str, slot: int, argument: Tree) -> bool:
        if self.slots(head) == 1:  # shape rules (largest_one, most) are checked on the whole application
            return self.complete(head, (argument,)) is not None
        try:
            argument_type = funql.type_of(argument)
        except FormalismError:
            return False
        return bool(argument_type & {params[slot] for params, _ in funql.FUNQL_SIGNATURES[head]})

    def choose_slot(self, function: Partial, argument: Tree, open_slots: list[int], from_right: bool) -> int:
        """``exclude ( A , B )`` is A without B, and A is the kind the question ranges over: a bare kind
        (``state ( all )``) fills the first slot from either side, anything else the last (as the authors' type
        system decides; "which states border no other states" puts the bare kind last in the sentence)."""
        if function.head == "exclude":
            bare_kind = isinstance(argument, tuple) and argument[0] in funql.KINDS and argument[1:] == (funql.ALL,)
            return open_slots[0] if bare_kind else open_slots[-1]
        return super().choose_slot(function, argument, open_slots, from_right)

    def complete(self, head: str, args: tuple) -> Tree | None:
        try:
            return funql.compose(head, *args)
        except FormalismError:
            return None

    def close(self, item: Item) -> Tree | None:
        if not isinstance(item, Partial):
            return item
        if item.head in funql.KINDS and item.args == (None,):
            return (item.head, funql.ALL)
        return None

    def finish(self, tree: Tree) -> str | None:
        tree = self.complete("answer", (tree,))
        return None if tree is None else funql.unparse(tree)

    def categories(self, program: str) -> set[str]:
        return {self.category(node) for node in _nodes(self.gold_root(program))
                if node != funql.ALL and not (isinstance(node, str) and funql._is_quoted(node)) and node != "_"}

    @staticmethod
    def category(node: Tree) -> str:
        if isinstance(node, str):
            return node
        return funql.unparse(node) if node[0] in funql.CONSTANTS else node[0]

    def leaf(self, category: str) -> Item:
        if category in funql.FUNQL_SIGNATURES and category not in funql.CONSTANTS:
            return Partial(category, (None,) * funql.ARITY[category])
        return parse_brackets(category, self.formalism) if "(" in category else category

    def entity_phrases(self, category: str) -> list[str]:
        """``stateid ( 'new york' )`` is named "new york"; a city by its name without the state."""
        leaf = self.leaf(category)
        if isinstance(leaf, tuple) and leaf[0] in funql.CONSTANTS:
            return [leaf[1].strip("'")]
        return []

    def domain_categories(self, world: Any) -> set[str]:
        """Every predicate of FunQL, and with geobase (a ``GeoBase``) every entity it names: states, rivers,
        places, the country, and cities both without a state (``cityid ( 'austin', _ )``) and with one."""
        predicates = set(funql.FUNQL_SIGNATURES) - set(funql.CONSTANTS) - {"answer"}
        if world is None:
            return predicates
        ids = {kind: head for head, kind in funql.CONSTANTS.items()}
        entities = set()
        for kind, head in ids.items():
            for entity in world.by_kind.get(kind, ()):
                name = f"'{entity[1]}'"
                if kind == "city":
                    entities |= {(head, name, funql.ANY_STATE), (head, name, f"'{entity[2]}'")}
                else:
                    entities.add((head, name))
        return predicates | {funql.unparse(entity) for entity in entities}

    def entity_kind(self, category: str) -> str | None:
        """``stateid``, ``riverid``, ...; a city named with its state is a kind of its own (``cityid+state``)."""
        leaf = self.leaf(category)
        if not (isinstance(leaf, tuple) and leaf[0] in funql.CONSTANTS):
            return None
        return "cityid+state" if leaf[0] == "cityid" and leaf[2] != funql.ANY_STATE else leaf[0]

    def slot_args(self, node: tuple) -> tuple:
        if node[0] in funql.KINDS and node[1:] == (funql.ALL,):
            return (None,)
        return super().slot_args(node)

    def gold_root(self, program: str) -> Tree:
        tree = get_formalism(self.formalism).parse(program)
        return tree[1] if isinstance(tree, tuple) and tree[0] == "answer" else tree


class ScanSPSpans(SpanLanguage):
    """SCAN-SP: Σ holds every predicate and constant (``i_walk``, ``i_left``, ``i_twice``, ``i_and``)."""

    formalism = "scan_sp"

    def slots(self, head: str) -> int:
        signature = scan.SCAN_SP_SIGNATURES.get(head)
        return 0 if signature is None or signature.is_constant else len(signature.params)

    def fits(self, head: str, slot: int, argument: Tree) -> bool:
        try:
            return scan.is_subtype(scan.type_of(argument), scan.SCAN_SP_SIGNATURES[head].params[slot])
        except FormalismError:
            return False

    def complete(self, head: str, args: tuple) -> Tree | None:
        try:
            scan.result_type(head, [scan.type_of(arg) for arg in args])
        except FormalismError:
            return None
        return (head, *args)

    def close(self, item: Item) -> Tree | None:
        if not isinstance(item, Partial):
            return item
        filled = [arg for arg in item.args if arg is not None]
        if item.args[:len(filled)] != tuple(filled):  # optional slots are trailing: no gap before a filled one
            return None
        return self.complete(item.head, tuple(filled))

    def finish(self, tree: Tree) -> str | None:
        try:
            return unparse_brackets(tree) if scan.is_subtype(scan.type_of(tree), scan.COMMAND) else None
        except FormalismError:
            return None

    def categories(self, program: str) -> set[str]:
        return {node if isinstance(node, str) else node[0] for node in _nodes(self.gold_root(program))}

    def leaf(self, category: str) -> Item:
        slots = self.slots(category)
        return Partial(category, (None,) * slots) if slots else category


SPAN_LANGUAGES = {"funql": FunQLSpans, "scan_sp": ScanSPSpans}


def span_language(formalism: str) -> SpanLanguage:
    """The composition rules for a formalism; a clear error for one the span parser cannot compose."""
    if formalism not in SPAN_LANGUAGES:
        raise ValueError(f"the span parser composes programs of {', '.join(sorted(SPAN_LANGUAGES))}; "
                         f"{formalism!r} has no type system for span trees")
    return SPAN_LANGUAGES[formalism]()
