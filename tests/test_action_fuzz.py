"""Hostile actions (issue 13): no action of any kind makes ``env.step`` raise, each bad one is an error that
costs a step, and the parser's work stays bounded however big or deep the action.

The classes: Unicode digits and numbers (categories Nd and No, which ``str.isdigit`` accepts and ``int`` may
not), numerals past Python's 4,300-digit conversion limit in every argument position of both syntaxes, huge and
deeply nested ``<tool_call>`` JSON, deeply nested calls and brackets, lone surrogates, megabyte strings, and
actions that are not text at all. Speed itself is measured in ``mosaic_gym/bench/bench_actions.py`` (the 50 ms bound);
here the bound is checked by what the parser reads and what it hands to ``ast`` and ``json``.
"""

from __future__ import annotations

import ast
import io
import json
import tokenize
from unittest import mock

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import envs
from envs import actions
from envs.actions import (MAX_ACTION_CHARS, MAX_ARG_CHARS, MAX_EXPRESSION_CHARS, MAX_NUMBER_DIGITS, TOOL_ARGS,
                          Action, ActionError, parse_action)

from helpers import SITE_SIZE

ENV_IDS = sorted(envs.VARIANTS)
TOOLS = sorted(TOOL_ARGS)
MEGABYTE = 2**20
HOSTILE = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def environments():
    """One env per id for the whole module (reset per example): building one is the slow part."""
    made = {env_id: gym.make(env_id, site_size=SITE_SIZE, candidates=True) for env_id in ENV_IDS}
    yield made
    for env in made.values():
        env.close()


def tool_call(name: str, arguments: str) -> str:
    """A ``<tool_call>`` whose ``arguments`` is the raw JSON text given."""
    return '<tool_call>{"name": "' + name + '", "arguments": ' + arguments + "}</tool_call>"


# Each strategy draws (action, bad): ``bad`` when the action must come back as an action error.

_numbers = st.characters(categories=("Nd", "No"), exclude_characters="0123456789")


@st.composite
def non_ascii_digits(draw):
    name = draw(st.sampled_from(TOOLS))
    digits = draw(st.text(_numbers, min_size=1, max_size=6))
    digits = draw(st.sampled_from(["", "1", " "])) + digits + draw(st.sampled_from(["", "2", " "]))
    action = draw(st.sampled_from([f'{name}("{digits}")', f"{name}({TOOL_ARGS[name]}='{digits}')",
                                   tool_call(name, json.dumps({TOOL_ARGS[name]: digits}))]))
    return action, name in ("open", "scroll")  # a path no page has, a direction that is neither down nor up


@st.composite
def huge_numerals(draw):
    """An integer of more than MAX_NUMBER_DIGITS digits (decimal, negative, hex, octal, binary), written in
    every position an argument can take, in both syntaxes, or a quoted one given to open."""
    name = draw(st.sampled_from(TOOLS))
    key = TOOL_ARGS[name]
    n = draw(st.sampled_from([MAX_NUMBER_DIGITS + 1, 4300, 4301, 5000, 20_000]) | st.integers(1001, 6000))
    decimal = draw(st.sampled_from("123456789")) + "0" * (n - 1)
    number = draw(st.sampled_from([decimal, "-" + decimal, "0x" + "f" * max(840, n * 5 // 6),
                                   "0o" + "7" * max(1110, n), "0b" + "1" * max(3330, n * 10 // 3)]))
    action = draw(st.sampled_from([
        f"{name}({number})", f"{name}({key}={number})", f"{name}(({number}))", f'{name}("x", {number})',
        f"{name}( {number} ,)", f'open("{decimal}")', f"open(' {decimal} ')",
        tool_call(name, "{" + f'"{key}": {decimal}' + "}"),
        tool_call(name, "{" + f'"{key}": -{decimal}' + "}"),
        tool_call(name, json.dumps(json.dumps({key: 0}).replace("0", decimal))),
        tool_call("open", "{" + f'"target": "{decimal}"' + "}"),
        '<tool_call>{"name": ' + decimal + ', "arguments": {}}</tool_call>',
        tool_call(name, "{" + f'"{decimal}": 1' + "}"),
    ]))
    return action, True


@st.composite
def huge_json(draw):
    name = draw(st.sampled_from(TOOLS))
    n = draw(st.integers(MAX_ARG_CHARS + 1, MEGABYTE))
    action = draw(st.sampled_from([
        tool_call(name, json.dumps({TOOL_ARGS[name]: "a" * n})),
        tool_call(name, json.dumps({TOOL_ARGS[name]: "\u00e9" * n}, ensure_ascii=True)),
        tool_call(name, json.dumps({TOOL_ARGS[name]: list(range(n // 8))})),
        tool_call(name, json.dumps({f"k{i}": i for i in range(n // 10)})),
        "<tool_call>" + json.dumps([0] * (n // 2)) + "</tool_call>",
        '<tool_call>"' + "x" * n,
    ]))
    return action, True


@st.composite
def deep_json(draw):
    name = draw(st.sampled_from(TOOLS))
    depth = draw(st.integers(900, MEGABYTE // 2))
    nested = "[" * depth + "]" * depth
    action = draw(st.sampled_from([
        "<tool_call>" + nested + "</tool_call>",
        "<tool_call>" + "[" * depth,
        "<tool_call>" + '{"a":' * depth + "1" + "}" * depth + "</tool_call>",
        tool_call(name, "{" + f'"{TOOL_ARGS[name]}": ' + nested + "}"),
        tool_call(name, json.dumps(nested)),
        tool_call(name, json.dumps('{"a":' * depth)),
    ]))
    return action, True


@st.composite
def deep_nesting(draw):
    """Nested calls, parentheses, brackets, operators and open strings around no text at all."""
    name = draw(st.sampled_from(TOOLS))
    n = draw(st.integers(2, 2_000) | st.integers(2, MEGABYTE))
    action = draw(st.sampled_from([
        f"{name}(" * 16 + "(" * n, f"{name}(" * n, f"{name}(" + "(" * n + ")" * n + ")",
        f"{name}(" + "[" * n + "]" * n + ")", f"{name}(" + "{" * n + "}" * n + ")", f"{name}(" + "()" * n + ")",
        f"{name}(" * 16 + "()" * n, f"{name}(" + "-" * n + "1)", f"{name}(" + "not " * n + "1)",
        f"{name}(" + "lambda:" * n + "1)", f"{name}(" + "x." * n + "x)", f"{name}(" + "1+" * n + "1)",
        f'{name}("' * n, f"{name}(" + "\\" * n + ")", "x(" * n, f"{name}(" + "[(" * n,
        f"{name}(" + 'f"' + "{1}" * n + '")',
    ]))
    return action, True


@st.composite
def lone_surrogates(draw):
    """An argument holding a surrogate alone (escaped or raw): no UTF-8 encoding, so no URL or page text."""
    name = draw(st.sampled_from(TOOLS))
    surrogate = draw(st.characters(categories=("Cs",)))
    escaped = f"\\u{ord(surrogate):04x}"
    action = draw(st.sampled_from([f'{name}("a{escaped}")', f'{name}("{surrogate}")',
                                   tool_call(name, "{" + f'"{TOOL_ARGS[name]}": "{escaped}"' + "}")]))
    return action, True


_filler_pieces = st.sampled_from(["a", "(", "search(", '"', "'", "\\", "<think>", "</think>", "<tool_call>", "[",
                                  "{", "x(", "\u00e9", "\n", ")", "\u00b2", "1"]) | st.text(
    st.characters(exclude_characters="(<"), min_size=1, max_size=8)


@st.composite
def megabyte_strings(draw):
    """A megabyte or more with no call in its first MAX_ACTION_CHARS characters (a call after them is not
    read), or a call whose argument is a megabyte long."""
    piece = draw(_filler_pieces)
    filler = piece * (draw(st.integers(MEGABYTE, 3 * MEGABYTE)) // len(piece))
    # A quoted argument a megabyte long (a filler of quotes alone would leave it empty: a valid short action).
    inner = filler.replace('"', "") or "x" * MEGABYTE
    action = draw(st.sampled_from([filler, filler + 'search("x")', filler + 'open(1)',
                                   'search("' + inner + '")', f"<think>{filler}",
                                   "<tool_call>" + filler, 'compact("' + inner + '")']))
    return action, True


class Unprintable:
    def __str__(self):
        raise RuntimeError("no __str__")

    def __repr__(self):
        raise RuntimeError("no __repr__")


class PosesAsText:
    """``isinstance(x, str)`` is true: ``isinstance`` believes ``__class__``."""

    @property
    def __class__(self):
        return str


class ClassRaises:
    @property
    def __class__(self):
        raise RuntimeError("no __class__")


class RaisingMeta(type):
    @property
    def __name__(cls):
        raise RuntimeError("no __name__")


class NamelessType(metaclass=RaisingMeta):
    pass


# Made by a drawn factory: hypothesis describes the strategy by repr() of what it samples, and some of these
# raise there.
_objects = st.sampled_from([Unprintable, lambda: [Unprintable()], PosesAsText, ClassRaises, NamelessType, object,
                            lambda: str, lambda: len, lambda: np.int64(3), lambda: np.arange(4),
                            lambda: np.float32("nan"), lambda: 3 + 4j, lambda: Ellipsis, lambda: True,
                            lambda: frozenset({1}), lambda: range(10**6), lambda: b'search("x")',
                            lambda: bytearray(b"open(1)"), lambda: memoryview(b"open(1)")]).map(lambda make: make())


@st.composite
def non_text(draw):
    """Anything that is not a str: None, bytes, every number (a huge int's repr raises), containers, objects."""
    value = draw(st.one_of(
        st.none(), st.binary(max_size=50), st.integers(), st.floats(),
        st.integers(4301, 50_000).map(lambda digits: 10**digits), st.integers(4301, 50_000).map(lambda d: -(10**d)),
        st.lists(st.text(max_size=20), max_size=4), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
        st.tuples(st.text(max_size=20)), st.sets(st.integers(), max_size=3), _objects,
        st.from_type(object).filter(lambda v: not issubclass(type(v), str)),
    ))
    return value, True


HOSTILE_ACTIONS = st.one_of(non_ascii_digits(), huge_numerals(), huge_json(), deep_json(), deep_nesting(),
                            lone_surrogates(), megabyte_strings(), non_text())


def assert_step(result, bad: bool) -> None:
    """A valid 5-tuple; an error in ``info["action_error"]`` when the action was ``bad``."""
    assert isinstance(result, tuple) and len(result) == 5
    obs, reward, terminated, truncated, info = result
    assert isinstance(obs, str) and isinstance(reward, float)
    assert isinstance(terminated, bool) and isinstance(truncated, bool) and isinstance(info, dict)
    if bad:
        assert isinstance(info["action_error"], str) and info["action_error"]


@HOSTILE
@given(env_id=st.sampled_from(ENV_IDS), steps=st.lists(HOSTILE_ACTIONS, min_size=1, max_size=6))
def test_no_hostile_action_raises_and_each_bad_one_is_an_error(environments, env_id, steps):
    env = environments[env_id]
    env.reset(seed=0)
    used = 0
    for action, bad in steps:
        result = env.step(action)
        assert_step(result, bad)
        used += 1
        assert result[4]["steps_used"] == used
        if result[2] or result[3]:
            env.reset(seed=0)
            used = 0


REPRODUCERS = [
    ('open("²")', "no page at /²"),
    ('open("①")', "no page at /①"),
    ('open("' + "1" * 4301 + '")', "no number of 4301 digits"),
    ("open(0x" + "f" * 3600 + ")", "at most 1000 digits"),
    ("open(" + "1" * 4301 + ")", "at most 1000 digits"),
    ("open(-" + "9" * 999 + ")", "digits: numbers start at 1"),
    ('<tool_call>{"name":"search","arguments":{"query":' + "1" * 4400 + "}}</tool_call>", "not valid JSON"),
    ('<tool_call>{"name":"answer","arguments":{"text":' + "1" * 2000 + "}}</tool_call>", "at most 1000 digits"),
    ("<tool_call>" + "[" * 100_000 + "</tool_call>", "not valid JSON"),
    ('<tool_call>{"name": "search", "arguments": "' + "[" * 5000 + '"}</tool_call>', "must be a JSON object"),
    (10**5000, "must be a string, got int"),
    (Unprintable(), "must be a string, got Unprintable"),
    (PosesAsText(), "must be a string, got PosesAsText"),
    (NamelessType(), "must be a string, got object"),
    (b'search("x")', "must be a string, got bytes"),
    ("search(" * 16 + "(" * 2**20, f"at most {MAX_ACTION_CHARS} are read"),
    ('search("\\ud800")', "lone surrogate"),
]


@pytest.mark.parametrize("env_id", ENV_IDS)
# Named by their messages: pytest would name 10**5000 by str(), which raises past 4,300 digits.
@pytest.mark.parametrize("action, message", REPRODUCERS, ids=[message for _, message in REPRODUCERS])
def test_the_issue_reproducers_are_errors(environments, env_id, action, message):
    env = environments[env_id]
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)
    assert message in info["action_error"]
    assert "Error: " + info["action_error"] in obs and info["steps_used"] == 1


def test_a_search_for_four_unicode_digits_is_not_an_exception(environments):
    env = environments["mosaic/WebQA-v0"]
    env.reset(seed=0)
    # BuiltinSite.mentions read four-character digit words as years with int(), which refuses these.
    for query in ("①²³⁴", "12²4", "١٢٣٤"):
        assert env.step(f'search("{query}")')[4]["action_error"] is None


def test_a_long_action_is_read_up_to_the_cap_and_the_error_says_so():
    assert parse_action('search("x")' + "a" * (3 * MAX_ACTION_CHARS)) == Action("search", "x")
    late = "a" * MAX_ACTION_CHARS + 'search("x")'
    with pytest.raises(ActionError, match=f"the action is {len(late)} characters; at most {MAX_ACTION_CHARS} are "
                                          "read"):
        parse_action(late)


def test_only_ascii_digits_make_an_open_number():
    assert parse_action('open(" 007 ")') == Action("open", 7)
    assert parse_action('open("١٢")') == Action("open", "١٢")  # int() would read 12: a path, as "²" is
    assert parse_action("open(" + "9" * MAX_NUMBER_DIGITS + ")").arg == 10**MAX_NUMBER_DIGITS - 1


def test_text_that_is_a_str_subclass_is_read_as_plain_text():
    assert parse_action(np.str_('search("x")')) == Action("search", "x")
    assert type(parse_action(np.str_('search("x")')).arg) is str


def test_a_quoted_argument_is_read_in_full_and_any_other_only_when_short():
    text = "é ( ) [ ' \\\" " * (MAX_ARG_CHARS // 16)
    assert parse_action(f'compact("{text}")') == Action("compact", text.replace('\\"', '"'))
    text = text.replace("'", "\\'")
    assert parse_action(f"answer(text=  '{text}' , )") == Action("answer", text.replace("\\", ""))
    assert parse_action('search("a" "b")') == Action("search", "ab")  # short: ast reads it
    with pytest.raises(ActionError, match="one quoted text"):
        parse_action('search("a" ' + '"b" ' * MAX_EXPRESSION_CHARS + ")")


class Reads:
    """What the parser handed on: every text ``_parse`` read, every source ``ast`` parsed, every ``json`` text."""

    def __init__(self):
        self.parsed, self.ast, self.json = [], [], []
        real_parse, real_ast, real_json = actions._parse, ast.parse, json.loads
        self.patches = [
            mock.patch.object(actions, "_parse", lambda text: self.parsed.append(len(text)) or real_parse(text)),
            mock.patch.object(ast, "parse", lambda source, *args, **kwargs: self.ast.append(source)
                              or real_ast(source, *args, **kwargs)),
            mock.patch.object(json, "loads", lambda text, *args, **kwargs: self.json.append(len(text))
                              or real_json(text, *args, **kwargs)),
        ]

    def __enter__(self):
        for patch in self.patches:
            patch.start()
        return self

    def __exit__(self, *exc):
        for patch in self.patches:
            patch.stop()


def is_one_literal(source: str) -> bool:
    """Whether ``source`` is one string or number token (after an optional sign): ast parses it in linear time."""
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
                  if t.type not in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER)]
    except (tokenize.TokenError, SyntaxError):
        return False
    if tokens and tokens[0].string in "+-" and tokens[0].type == tokenize.OP:
        tokens = tokens[1:]
    return len(tokens) == 1 and tokens[0].type in (tokenize.STRING, tokenize.NUMBER)


@settings(HOSTILE, max_examples=150)
@given(HOSTILE_ACTIONS)
def test_the_parser_reads_at_most_the_cap_and_ast_gets_only_short_expressions_or_one_literal(drawn):
    action, _ = drawn
    with Reads() as reads:
        try:
            parse_action(action)
        except ActionError:
            pass
    assert all(n <= MAX_ACTION_CHARS for n in reads.parsed)
    assert all(n <= MAX_ACTION_CHARS for n in reads.json)
    assert len(reads.ast) <= 16  # one parse per call tried, and at most 16 calls are tried
    for source in reads.ast:
        assert len(source) <= MAX_EXPRESSION_CHARS + len("f()") or (
            len(source) <= MAX_ARG_CHARS + 64 and is_one_literal(source)), source[:80]
