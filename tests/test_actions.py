"""The action parser, and the env's promise that no action string can break a step or the budget."""

from __future__ import annotations

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import envs  # noqa: F401  (registers the ids)
from envs.actions import TOOL_ARGS, Action, ActionError, format_action, parse_action

from helpers import SITE_SIZE


@pytest.mark.parametrize(
    "text, expected",
    [
        ('search("Edra Vane")', Action("search", "Edra Vane")),
        ("search('Edra Vane')", Action("search", "Edra Vane")),
        ('Let me look. search(query="Edra Vane") and then more prose', Action("search", "Edra Vane")),
        ('<think>maybe open(3)?</think>open(2)', Action("open", 2)),
        ('open("4")', Action("open", 4)),
        ('open("/wiki/Edra_Vane")', Action("open", "/wiki/Edra_Vane")),
        ("scroll()", Action("scroll", "down")),
        ('scroll("UP")', Action("scroll", "up")),
        ("answer(1887)", Action("answer", "1887")),
        ('answer("it\'s (tricky)") trailing', Action("answer", "it's (tricky)")),
        ('<tool_call>{"name": "find", "arguments": {"text": "born"}}</tool_call>', Action("find", "born")),
        ('<tool_call>{"name": "open", "arguments": "{\\"target\\": 3}"}</tool_call>', Action("open", 3)),
        ('<tool_call>\n```json\n{"name": "answer", "arguments": {"text": "x"}}\n```\n</tool_call>', Action("answer", "x")),
        ('bad(1) then fork("sub question")', Action("fork", "sub question")),
    ],
)
def test_parses_both_forms_leniently(text, expected):
    assert parse_action(text) == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("I do not know", "no tool call"),
        ("foo(1)", "no tool call"),
        ('search("a", "b")', "exactly one argument"),
        ("search(x)", "quote text"),
        ("open(0)", "start at 1"),
        ("open(1.5)", "result or link number"),
        ('scroll("left")', '"down" or "up"'),
        ('search("   ")', "non-empty"),
        ("answer([1, 2])", "must be text"),
        ('<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>', "'query'"),
        ("<tool_call>{not json</tool_call>", "not valid JSON"),
        ('<tool_call>{"name": "rm", "arguments": {}}</tool_call>', "unknown tool"),
        ('search("never closed', "never closed"),
        ('<think>search("hidden")', "no tool call"),
    ],
)
def test_rejects_what_it_cannot_execute(text, message):
    with pytest.raises(ActionError, match=message):
        parse_action(text)


_plain_text = st.text(min_size=1, max_size=200).filter(
    lambda s: s.strip() and "<think>" not in s and "<tool_call>" not in s)


@given(st.sampled_from(sorted(set(TOOL_ARGS) - {"open", "scroll"})), _plain_text)
def test_format_then_parse_round_trips(name, arg):
    assert parse_action(format_action(name, arg)) == Action(name, arg)


@given(st.integers(min_value=1, max_value=10**6))
def test_open_numbers_round_trip(number):
    assert parse_action(format_action("open", number)) == Action("open", number)


_junk = st.one_of(
    st.text(max_size=300),
    st.text(alphabet=st.characters(), max_size=50).map(lambda s: f'search("{s}")'),
    st.builds(lambda n, s: f"{n}({s}", st.sampled_from(sorted(TOOL_ARGS)), st.text(max_size=30)),
    st.builds(lambda s: "<tool_call>" + s + "</tool_call>", st.text(max_size=80)),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                 lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
                 max_leaves=8),
    st.integers(min_value=10_000, max_value=200_000).map(lambda n: "x(" * (n // 2)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_junk, min_size=1, max_size=12))
def test_no_action_raises_and_the_budget_holds(actions):
    env = gym.make("mosaic/WebQA-v0", site_size=SITE_SIZE, max_steps=5, candidates=True)
    env.reset(seed=0)
    for steps, action in enumerate(actions, start=1):
        obs, reward, terminated, truncated, info = env.step(action)
        assert isinstance(obs, str)
        assert info["steps_used"] == steps <= 5
        if not isinstance(action, str) or not action.strip():
            assert info["action_error"]
        if steps == 5:
            assert terminated or info["truncation_reason"] == "max_steps"
        if terminated or truncated:
            break


# --- echoed examples: a small model that repeats the prompt or an error's hint executes nothing -------------
def _shown_texts() -> list[str]:
    """Everything the env shows that holds example calls: its system prompt, and the error of every bad action
    below as the env reports it (``info["action_error"]``), so a new hint is covered without being listed here."""
    env = gym.make("mosaic/WebQA-Fork-v0", site_size=SITE_SIZE)
    _, info = env.reset(seed=0)
    texts = [info["messages"][0]["content"]]
    bad = ["hello", "search(", "search(x)", "search()", 'open("x" "y")', "open(0)", "scroll()", 'find("born")',
           'finish("r")', "fork(", "answer(", "compact(1, 2)", 'open(' + "9" * 2000 + ")", "open([1])"]
    for action in bad:
        _, _, terminated, truncated, info = env.step(action)
        if info["action_error"]:
            texts.append(info["action_error"])
        assert not (terminated or truncated)
    return texts


SHOWN = _shown_texts()
_PROSE = st.text(st.characters(categories=["L", "Zs"]), max_size=40)
_CALLS = st.sampled_from(['open(3)', 'search("Mira Holt")', 'answer("Tessaly")', 'find("1911")',
                          '<tool_call>{"name": "open", "arguments": {"target": 2}}</tool_call>'])


def test_the_env_shows_example_calls_and_none_of_them_runs_when_echoed():
    # The examples are there (the test would pass vacuously otherwise), and echoing any shown text runs nothing.
    assert sum(any(lead in t for lead in ('e.g. ', 'Example: ', 'write ')) for t in SHOWN) >= 5
    for text in SHOWN:
        with pytest.raises(ActionError):
            parse_action(text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=_PROSE, echo=st.sampled_from(SHOWN), after=_PROSE, call=_CALLS, call_first=st.booleans())
def test_a_real_call_beside_an_echoed_hint_is_the_one_executed(before, echo, after, call, call_first):
    text = f"{call} {before}{echo}{after}" if call_first else f"{before}{echo}{after} {call}"
    assert parse_action(text) == parse_action(call)


def test_an_example_written_on_its_own_is_still_a_call():
    # Only the phrase with its lead words is blanked: the model may well mean open(2) or search("Edra Vane").
    assert parse_action("open(2)") == Action("open", 2)
    assert parse_action('I will search("Edra Vane")') == Action("search", "Edra Vane")
