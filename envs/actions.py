"""The one action parser: a model's raw output -> one tool call, or a clear error.

Lenient about what surrounds the call (prose, ``<think>`` blocks, code fences), strict about what it executes:
a known tool, exactly one argument of the right type. Two forms are accepted::

    <tool_call>{"name": "search", "arguments": {"query": "Edra Vane"}}</tool_call>
    search("Edra Vane")

When the text holds several calls, the first one that parses is taken (a model that rambles on after its call
is not punished for it). An example call that the env itself showed, with the words that introduce it
("Example: open(2)", "e.g. search(\"x\")": :data:`ECHOES`), is blanked out first: a small model that echoes
the prompt or an error's hint does not execute the example, and writing the same call on its own still works.
(The other choice, taking the *last* call, would not help an agent that stops generating at its first complete
call, as :class:`agents.llm.LLMAgent` does, and would punish rambling.)

Any action, however hostile, costs a bounded amount of work (``env.step`` promises never to raise, and a step
must stay cheap): the parser reads at most :data:`MAX_ACTION_CHARS` characters (the error of a longer action
says so), tries at most 16 calls, reads one quoted text or one number with a regular expression (linear, no
backtracking), and hands anything else to ``ast`` only up to :data:`MAX_EXPRESSION_CHARS` characters (``ast``
is superlinear on nested or repeated expressions). A number past :data:`MAX_NUMBER_DIGITS` digits is refused
before Python converts it (``int`` refuses past 4,300 digits, and its conversion is quadratic).

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
import itertools
import json
import re
import warnings
from dataclasses import dataclass
from typing import Iterator

from .web.checks import shown
from .prompts import NO_CALL_FOUND, OPEN_TAKES, SHOWN_EXAMPLES

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
#: The parser reads this many characters of an action, about 25k tokens (past any context window): a call
#: further in is not seen. Every regular expression below costs time linear in it.
MAX_ACTION_CHARS = 100_000
#: An argument that is not one quoted text or one number goes to ``ast`` only up to this many characters.
MAX_EXPRESSION_CHARS = 256
#: The most digits of a number argument (an ``open`` number, or ``answer(1887)``).
MAX_NUMBER_DIGITS = 1000
_MAX_CALL_ATTEMPTS = 16
_NUMBER_LIMIT = 10**MAX_NUMBER_DIGITS

# No lookbehind for "not inside a word": a pattern that starts with one is tried at every position, ten times
# slower than one that starts with a name (see _call_starts).
_CALL_START = re.compile("(" + "|".join(TOOL_ARGS) + r")\(")
_WORD_OR_DOT = re.compile(r"[\w.]")
# One Python string literal (prefix r, u, b, br or rb; single, double or triple quotes) or one number literal,
# each matched possessively: a failed match never backtracks, so it costs time linear in what it read. ``ast``
# then checks what they matched (an escape such as "\N{bogus}", a number such as 1abc).
_STRING = (r"(?:[rRuUbB]|[bB][rR]|[rR][bB])?"
           r'(?:"""(?:[^"\\]++|\\.|"(?!""))*+"""' r"|'''(?:[^'\\]++|\\.|'(?!''))*+'''"
           r'|"(?:[^"\\\n]++|\\.)*+"' r"|'(?:[^'\\\n]++|\\.)*+')")
_NUMBER = (r"[+-]?\s*+(?:0[xX][0-9a-fA-F_]++|0[oO][0-7_]++|0[bB][01_]++"
           r"|(?:[0-9][0-9_]*+(?:\.[0-9_]*+)?|\.[0-9][0-9_]*+)(?:[eE][+-]?[0-9_]++)?[jJ]?)")
_SIMPLE_ARG = re.compile(rf"\s*+(?:(?P<key>[A-Za-z_]\w*+)\s*+=\s*+)?(?:(?P<string>{_STRING})|(?P<number>{_NUMBER}))"
                         r"\s*+,?\s*+\)", re.DOTALL)
# What the bracket scanner stops at: a whole string literal (skipped in one step), a lone quote (a string
# never closed), or a bracket.
_SCAN_TOKEN = re.compile(r'''"(?:[^"\\]++|\\.)*+"|'(?:[^'\\\n]++|\\.)*+'|["'()\[\]{}]''', re.DOTALL)
_ASCII_DIGITS = re.compile(r"[0-9]+")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _example(name: str, lead: str = "e.g.") -> str:
    """An example call of tool ``name`` as a hint shows it, with its lead words (``e.g. search("x")``)."""
    return f"{lead} {format_action(name, 1 if name == 'open' and lead == 'write' else 'x')}"


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


def as_text(action: object) -> str | None:
    """``action`` as a plain ``str`` when it is text (a ``str`` or a subclass such as ``numpy.str_``), else ``None``.

    Asks ``type(action)``, not ``isinstance``: ``isinstance`` believes an object's ``__class__``, which any
    object can fake (or make raise). A subclass is copied by ``str.__str__`` into a plain ``str``, so none of
    its own methods run later.
    """
    if not issubclass(type(action), str):
        return None
    return str.__str__(action)


def type_name(value: object) -> str:
    """The name of ``value``'s type, for an error; never ``repr(value)``, which may raise or take as long as the
    value is big (and even a metaclass's ``__name__`` may raise: then ``"object"``)."""
    try:
        name = type(value).__name__
    except Exception:  # noqa: BLE001  (a user's metaclass may raise anything)
        return "object"
    return name if type(name) is str else "object"


#: Every example call the env shows, with its lead words, longest first (see the module's docstring).
ECHOES: tuple[str, ...] = tuple(sorted(
    {*SHOWN_EXAMPLES, *(_example(name, lead) for name in TOOL_ARGS for lead in ("e.g.", "write"))},
    key=len, reverse=True))


def without_echoes(text: str) -> str:
    """``text`` with every :data:`ECHOES` phrase replaced by a space (one ``str.replace`` each: linear).

    >>> without_echoes('The hint said: Call one tool, e.g. search("Edra Vane"). So: open(3)')
    'The hint said: Call one tool,  . So: open(3)'
    """
    for phrase in ECHOES:
        if phrase in text:
            text = text.replace(phrase, " ")
    return text


def parse_action(text: object) -> Action:
    """Parse one tool call out of a model's raw output (its first :data:`MAX_ACTION_CHARS` characters).

    Raises:
        ActionError: when ``text`` is not text, there is no call, the tool is unknown, or its argument is missing
            or of the wrong type.
    """
    plain = as_text(text)
    if plain is None:
        raise ActionError(f"an action must be a string, got {type_name(text)}")
    if len(plain) <= MAX_ACTION_CHARS:
        return _parse(plain)
    try:
        return _parse(plain[:MAX_ACTION_CHARS])
    except ActionError as err:
        raise ActionError(f"{err} (the action is {len(plain)} characters; at most {MAX_ACTION_CHARS} are read)") \
            from None


def strip_think(text: str) -> str:
    """``text`` with each ``<think>...</think>`` block (an unclosed one runs to the end) replaced by a space.

    Found with ``str.find``: a lazy regular expression (``<think>.*?</think>``) tries the closing tag at every
    character, ten times slower on a long block.

    >>> strip_think("<think>open(1)</think>open(2)<think>open(3)")
    ' open(2) '
    """
    pieces, at = [], 0
    while (start := text.find("<think>", at)) >= 0:
        end = text.find("</think>", start + len("<think>"))
        pieces += [text[at:start], " "]
        at = len(text) if end < 0 else end + len("</think>")
    pieces.append(text[at:])
    return "".join(pieces)


def _tool_call_body(text: str) -> str | None:
    """What follows the first ``<tool_call>``, up to its ``</tool_call>`` or the end; ``None`` without one."""
    start = text.find("<tool_call>")
    if start < 0:
        return None
    start += len("<tool_call>")
    end = text.find("</tool_call>", start)
    return text[start:] if end < 0 else text[start:end]


def _call_starts(text: str) -> Iterator[re.Match[str]]:
    """Each ``name(`` of a tool in ``text`` that is not part of a longer name (``research(``, ``os.open(``)."""
    for match in _CALL_START.finditer(text):
        if match.start() == 0 or not _WORD_OR_DOT.match(text, match.start() - 1):
            yield match


def _parse(text: str) -> Action:
    visible = without_echoes(strip_think(text))
    body = _tool_call_body(visible)
    if body is not None:
        return _parse_json_call(body)
    first_error: ActionError | None = None
    for match in itertools.islice(_call_starts(visible), _MAX_CALL_ATTEMPTS):
        try:
            return _parse_python_call(visible, match)
        except ActionError as err:
            first_error = first_error or err
    if first_error is not None:
        raise first_error
    raise ActionError(NO_CALL_FOUND)


def call_complete(text: str) -> bool:
    """Whether ``text`` holds a finished tool call: a ``</tool_call>`` closing a ``<tool_call>``, or the ``)``
    closing a ``name(`` call outside string literals (``<think>`` blocks and echoed examples, :data:`ECHOES`, are
    not looked at). A generating model can stop there.

    >>> call_complete('search("a (b")'), call_complete('search("a)'), call_complete("<think>open(1)</think>")
    (True, False, False)
    """
    visible = without_echoes(strip_think(text))
    tag = visible.find("<tool_call>")
    call = next(_call_starts(visible), None)
    if tag >= 0 and (call is None or tag < call.start()):
        return visible.find("</tool_call>", tag) >= 0
    return call is not None and _closing_paren(visible, call.end()) is not None


def _parse_json_call(body: str) -> Action:
    body = body.strip().removeprefix("```json").removeprefix("```").removesuffix("```").strip()
    call = _load_json(body, "the <tool_call> body is not valid JSON")
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise ActionError('a <tool_call> must be {"name": ..., "arguments": {...}}')
    name = call["name"]
    _check_tool(name)
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        arguments = _load_json(arguments, f'"arguments" of {name} must be a JSON object') if arguments.strip() else {}
    if not isinstance(arguments, dict):
        raise ActionError(f'"arguments" of {name} must be a JSON object like {{"{TOOL_ARGS[name]}": ...}}')
    expected = TOOL_ARGS[name]
    unknown = set(arguments) - {expected}
    if unknown:
        raise ActionError(f"{name} takes one argument, {expected!r}; got {shown(sorted(unknown))}")
    return Action(name, _check_arg(name, arguments.get(expected, _MISSING)))


def _load_json(text: str, what: str) -> object:
    """``json.loads``, every failure an :class:`ActionError` saying ``what``: besides a ``JSONDecodeError``,
    json raises ``ValueError`` for a number past Python's 4,300 digits, ``RecursionError`` for deep nesting and
    ``MemoryError`` for a document too big to hold."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError, MemoryError) as err:
        raise ActionError(f"{what} ({err})") from None


def _parse_python_call(text: str, match: re.Match[str]) -> Action:
    """The call whose ``name(`` is ``match``. One quoted text (up to :data:`MAX_ARG_CHARS`) or one number, maybe
    named, is read by a regular expression; any other argument list only when it closes within
    :data:`MAX_EXPRESSION_CHARS` characters, since ``ast`` is superlinear on nested or repeated expressions."""
    name, start = match.group(1), match.end()
    simple = _SIMPLE_ARG.match(text, start, start + MAX_ARG_CHARS + 64)
    if simple is not None:
        return _simple_call(name, simple)
    stop = min(len(text), start + MAX_EXPRESSION_CHARS + 1)
    end = _closing_paren(text, start, stop)
    if end is not None:
        return _expression_call(name, text[start:end])
    if stop == len(text):
        raise ActionError(f"{name}( is never closed: {_example(name, 'write')}")
    raise ActionError(f"cannot read the argument of {name}(...): write one quoted text of at most {MAX_ARG_CHARS} "
                      f"characters or one number, {_example(name)}")


def _simple_call(name: str, match: re.Match[str]) -> Action:
    """A call whose one argument :data:`_SIMPLE_ARG` matched: a string or number literal, maybe named."""
    expected, key, number = TOOL_ARGS[name], match.group("key"), match.group("number")
    if key is not None and key != expected:
        raise ActionError(f"{name} takes exactly one argument, {expected}")
    if number is not None and len(number) > MAX_NUMBER_DIGITS + 16:
        raise ActionError(f"the number in {name}(...) is {len(number)} characters long; a number has at most "
                          f"{MAX_NUMBER_DIGITS} digits")
    try:
        value = ast.literal_eval(_expression(match.group("string") or number))
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
        raise ActionError(_unreadable(name)) from None
    return Action(name, _check_arg(name, value))


def _expression_call(name: str, inner: str) -> Action:
    """A call whose short argument list is not one plain literal (``scroll()``, two arguments, a list, a name):
    ``ast`` reads it, so that the error can say what is wrong."""
    try:
        call = _expression(f"f({inner})")
        assert isinstance(call, ast.Call)
        args = [ast.literal_eval(a) for a in call.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    except (SyntaxError, ValueError, TypeError, AssertionError, RecursionError, MemoryError):
        raise ActionError(_unreadable(name)) from None
    expected = TOOL_ARGS[name]
    if None in kwargs or set(kwargs) - {expected} or len(args) + len(kwargs) > 1:
        raise ActionError(f"{name} takes exactly one argument, {expected}")
    value = args[0] if args else kwargs.get(expected, _MISSING)
    return Action(name, _check_arg(name, value))


def _expression(source: str) -> ast.expr:
    """``source`` parsed as one Python expression. Its warnings (an invalid escape such as "\\d") are ignored:
    under ``python -W error`` they would refuse an argument that parses everywhere else."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(source, mode="eval").body


def _unreadable(name: str) -> str:
    return f"cannot read the argument of {name}(...): quote text arguments, {_example(name)}"


def _closing_paren(text: str, start: int, stop: int | None = None) -> int | None:
    """Index of the ``)`` closing a call whose ``(`` ends at ``start``, skipping string literals; ``None`` when
    ``text[:stop]`` does not close it (a string never closed, or brackets still open). The loop visits only
    quotes and brackets, and steps over a whole string literal at once."""
    depth = 1
    for token in _SCAN_TOKEN.finditer(text, start, len(text) if stop is None else stop):
        at = token.start()
        if text[at] in "\"'":
            if token.end() - at == 1:
                return None
        elif text[at] in "([{":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return at
    return None


class _Missing:
    pass


_MISSING = _Missing()


def _check_tool(name: str) -> None:
    if name not in TOOL_ARGS:
        raise ActionError(f"unknown tool {shown(name)}; the tools are {', '.join(TOOL_ARGS)}")


def _check_arg(name: str, value: object) -> str | int:
    expected = TOOL_ARGS[name]
    if value is _MISSING:
        if name == "scroll":
            return "down"
        raise ActionError(f"{name} needs its argument {expected}, {_example(name)}")
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ActionError(f"the argument of {name} must be text, not {type_name(value)}")
    if isinstance(value, int) and not -_NUMBER_LIMIT < value < _NUMBER_LIMIT:
        raise ActionError(f"the argument of {name} is {shown(value)}; a number has at most {MAX_NUMBER_DIGITS} digits")
    if name == "open":
        value = _open_target(value)
        if isinstance(value, int):
            return value
    text = str(value) if not isinstance(value, str) else value
    if len(text) > MAX_ARG_CHARS:
        raise ActionError(f"the argument of {name} is longer than {MAX_ARG_CHARS} characters")
    if _SURROGATE.search(text):
        raise ActionError(f"the argument of {name} holds a lone surrogate (an escape such as \\ud800 alone), "
                          "which is no text: it has no UTF-8 encoding")
    if name == "scroll":
        direction = text.strip().lower()
        if direction not in ("down", "up"):
            raise ActionError('scroll takes "down" or "up"')
        return direction
    if name in ("search", "find", "fork", "open") and not text.strip():
        raise ActionError(f"{name} needs a non-empty {expected}")
    return text


def _open_target(value: str | int | float) -> str | int:
    """``open``'s argument: a number (an int, or text of ASCII digits only: ``str.isdigit`` also accepts "²"
    and "①", which ``int`` refuses) of at most :data:`MAX_NUMBER_DIGITS` digits and at least 1, or a path."""
    if isinstance(value, float):
        raise ActionError(OPEN_TAKES)
    digits = value.strip() if isinstance(value, str) else ""
    if _ASCII_DIGITS.fullmatch(digits):
        if len(digits) > MAX_NUMBER_DIGITS:
            raise ActionError(f"there is no number of {len(digits)} digits: open takes a result or link number")
        value = int(digits)
    if isinstance(value, int) and value < 1:
        raise ActionError(f"there is no number {shown(value)}: numbers start at 1")
    return value
