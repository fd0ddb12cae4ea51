"""The one action parser: a model's raw output -> one tool call, or a clear error.

Lenient about what surrounds the call (prose, ``<think>`` blocks, code fences), strict about what it executes:
a known tool, exactly one argument of the right type. Two forms are accepted::

    <tool_call>{"name": "search", "arguments": {"query": "Edra Vane"}}</tool_call>
    search("Edra Vane")

When the text holds several calls, the first one that parses is taken (a model that rambles on after its call
is not punished for it). Parsing is linear in the length of the text, so a huge string costs little.

Example:
    >>> parse_action('I should look this up. search("Edra Vane")')
    Action(name='search', arg='Edra Vane')
    >>> parse_action('<tool_call>{"name": "open", "arguments": {"target": 3}}</tool_call>')
    Action(name='open', arg=3)
    >>> format_action("answer", "Oskarde")
    'answer("Oskarde")'
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass

#: Every tool and the name of its one argument.
TOOL_ARGS: dict[str, str] = {
    "search": "query",
    "open": "target",
    "scroll": "direction",
    "find": "text",
    "compact": "summary",
    "fork": "task",
    "finish": "result",
    "answer": "text",
}
MAX_ARG_CHARS = 20_000
_MAX_CALL_ATTEMPTS = 16

_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_CALL_START = re.compile(r"(?<![\w.])(" + "|".join(TOOL_ARGS) + r")\(")


class ActionError(ValueError):
    """An action the env cannot execute; its message is shown to the agent."""


@dataclass(frozen=True)
class Action:
    """A parsed tool call: the tool's name and its one argument (``open`` may take an int)."""

    name: str
    arg: str | int


def format_action(name: str, arg: str | int) -> str:
    """The canonical text of a call, ``name("arg")`` (JSON string escaping) or ``open(3)``."""
    if name not in TOOL_ARGS:
        raise ValueError(f"unknown tool {name!r}; tools are {', '.join(TOOL_ARGS)}")
    return f"{name}({arg})" if isinstance(arg, int) else f"{name}({json.dumps(arg, ensure_ascii=False)})"


def parse_action(text: str) -> Action:
    """Parse one tool call out of a model's raw output.

    Raises:
        ActionError: when there is no call, the tool is unknown, or its argument is missing or of the wrong type.
    """
    if not isinstance(text, str):
        raise ActionError(f"an action must be a string, got {type(text).__name__}")
    visible = _THINK.sub(" ", text)
    block = _TOOL_CALL.search(visible)
    if block is not None:
        return _parse_json_call(block.group(1))
    first_error: ActionError | None = None
    for attempt, match in enumerate(_CALL_START.finditer(visible)):
        if attempt >= _MAX_CALL_ATTEMPTS:
            break
        try:
            return _parse_python_call(visible, match)
        except ActionError as err:
            first_error = first_error or err
    if first_error is not None:
        raise first_error
    raise ActionError(
        'no tool call found. Call one tool, e.g. search("Edra Vane") or '
        '<tool_call>{"name": "search", "arguments": {"query": "Edra Vane"}}</tool_call>'
    )


def call_complete(text: str) -> bool:
    """Whether ``text`` holds a finished tool call: a ``</tool_call>`` closing a ``<tool_call>``, or the ``)``
    closing a ``name(`` call outside string literals (``<think>`` blocks are not looked at). A generating
    model can stop there.

    >>> call_complete('search("a (b")'), call_complete('search("a)'), call_complete("<think>open(1)</think>")
    (True, False, False)
    """
    visible = _THINK.sub(" ", text)
    tag = visible.find("<tool_call>")
    call = _CALL_START.search(visible)
    if tag >= 0 and (call is None or tag < call.start()):
        return visible.find("</tool_call>", tag) >= 0
    return call is not None and _closing_paren(visible, call.end()) is not None


def _parse_json_call(body: str) -> Action:
    body = body.strip().removeprefix("```json").removeprefix("```").removesuffix("```").strip()
    try:
        call = json.loads(body)
    except (json.JSONDecodeError, RecursionError) as err:
        raise ActionError(f"the <tool_call> body is not valid JSON ({err})") from None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise ActionError('a <tool_call> must be {"name": ..., "arguments": {...}}')
    name = call["name"]
    _check_tool(name)
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            raise ActionError(f'"arguments" of {name} must be a JSON object') from None
    if not isinstance(arguments, dict):
        raise ActionError(f'"arguments" of {name} must be a JSON object like {{"{TOOL_ARGS[name]}": ...}}')
    expected = TOOL_ARGS[name]
    unknown = set(arguments) - {expected}
    if unknown:
        raise ActionError(f"{name} takes one argument, {expected!r}; got {sorted(unknown)}")
    return Action(name, _check_arg(name, arguments.get(expected, _MISSING)))


def _parse_python_call(text: str, match: re.Match[str]) -> Action:
    name = match.group(1)
    end = _closing_paren(text, match.end())
    if end is None:
        raise ActionError(f"{name}( is never closed: write {format_action(name, 'x' if name != 'open' else 1)}")
    inner = text[match.end() : end]
    if len(inner) > MAX_ARG_CHARS + 64:
        raise ActionError(f"the argument of {name} is longer than {MAX_ARG_CHARS} characters")
    try:
        call = ast.parse(f"f({inner})", mode="eval").body
        assert isinstance(call, ast.Call)
        args = [ast.literal_eval(a) for a in call.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    except (SyntaxError, ValueError, TypeError, AssertionError, RecursionError, MemoryError):
        raise ActionError(
            f"cannot read the argument of {name}(...): quote text arguments, e.g. {format_action(name, 'x')}"
        ) from None
    expected = TOOL_ARGS[name]
    if None in kwargs or set(kwargs) - {expected} or len(args) + len(kwargs) > 1:
        raise ActionError(f"{name} takes exactly one argument, {expected}")
    value = args[0] if args else kwargs.get(expected, _MISSING)
    return Action(name, _check_arg(name, value))


def _closing_paren(text: str, start: int) -> int | None:
    """Index of the ``)`` closing a call whose ``(`` ends at ``start``, skipping string literals."""
    depth, i, n = 1, start, len(text)
    while i < n:
        ch = text[i]
        if ch in "\"'":
            i = _string_end(text, i)
            if i < 0:
                return None
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def _string_end(text: str, i: int) -> int:
    quote = text[i]
    i += 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == quote:
            return i
        if text[i] == "\n" and quote == "'":
            return -1
        i += 1
    return -1


class _Missing:
    pass


_MISSING = _Missing()


def _check_tool(name: str) -> None:
    if name not in TOOL_ARGS:
        raise ActionError(f"unknown tool {name!r}; the tools are {', '.join(TOOL_ARGS)}")


def _check_arg(name: str, value: object) -> str | int:
    expected = TOOL_ARGS[name]
    if value is _MISSING:
        if name == "scroll":
            return "down"
        raise ActionError(f"{name} needs its argument {expected}, e.g. {format_action(name, 'x')}")
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ActionError(f"the argument of {name} must be text, not {type(value).__name__}")
    if name == "open":
        if isinstance(value, float):
            raise ActionError("open takes a result or link number, or a path such as \"/wiki/Edra_Vane\"")
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value.strip())
        if isinstance(value, int):
            if value < 1:
                raise ActionError(f"there is no number {value}: numbers start at 1")
            return value
    text = str(value) if not isinstance(value, str) else value
    if len(text) > MAX_ARG_CHARS:
        raise ActionError(f"the argument of {name} is longer than {MAX_ARG_CHARS} characters")
    if name == "scroll":
        direction = text.strip().lower()
        if direction not in ("down", "up"):
            raise ActionError('scroll takes "down" or "up"')
        return direction
    if name in ("search", "find", "fork", "open") and not text.strip():
        raise ActionError(f"{name} needs a non-empty {expected}")
    return text
