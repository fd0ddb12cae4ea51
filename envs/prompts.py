"""The one place that builds what the model reads: the system prompt, the opening user message of each kind
of session, the notes the env adds (steps left, context full), the sentences of action errors that give the
agent a hint, and the plain transcript format used for observations (and by agents whose tokenizer has no
chat template).

Transcript format (documented, stable)::

    <|system|>
    ...system prompt...
    <|user|>
    ...task...
    <|assistant|>
    search("Edra Vane")
    <|user|>
    ...tool result...
    <|assistant|>

Each message is its role tag on its own line, then the content, then a newline. The transcript of a session
only grows: a step appends the action and the next observation, so a model can reuse its KV cache.
"""

from __future__ import annotations

from typing import Mapping, Sequence

ROLE_TAG = {"system": "<|system|>", "user": "<|user|>", "assistant": "<|assistant|>"}

#: The example call of each tool's line in the system prompt.
_TOOL_EXAMPLES = {"search": 'search("Edra Vane")', "open": "open(2)", "find": 'find("born")',
                  "answer": 'answer("Oskarde")'}
#: The JSON call form as the system prompt describes it.
JSON_FORM = '<tool_call>{"name": "search", "arguments": {"query": "..."}}</tool_call>'

_TOOLS = {
    "search": "search(query): search the site; shows numbered results. Example: " + _TOOL_EXAMPLES["search"],
    "open": "open(target): open a result number, a link number of the current page, or a path such as "
    '"/wiki/Edra_Vane"; shows the first part of the page. Example: ' + _TOOL_EXAMPLES["open"],
    "scroll": 'scroll(direction): "down" or "up" to the next or previous part of the current page',
    "find": "find(text): the passages of the current page that contain the text. Example: " + _TOOL_EXAMPLES["find"],
    "compact": "compact(summary): end this session; a new one starts with only the task and your summary. "
    "Write down everything you will still need.",
    "fork": "fork(task): start a subagent with a fresh context on a sub-question; you wait for its result",
    "finish": "finish(result): (subagents only) return your result to the agent that forked you",
    "answer": "answer(text): give the final answer and end the episode. Example: " + _TOOL_EXAMPLES["answer"],
}


def system_prompt(tools: Sequence[str]) -> str:
    """The system prompt listing the enabled ``tools`` and the two accepted call forms."""
    lines = [
        "You are a research agent browsing an offline encyclopedia website to answer a question.",
        "Call exactly one tool per turn, either as name(\"argument\") or as",
        f"{JSON_FORM}.",
        "Tools:",
    ]
    lines += [f"- {_TOOLS[t]}" for t in tools]
    return "\n".join(lines)


def task_message(question: str, *, summary: str | None = None, fork_task: str | None = None) -> str:
    """The first user message of a session: the root question or a fork's task, then, in a session that a
    compaction started, the summary it was given."""
    if fork_task is not None:
        text = (
            f"You are a subagent. Your task: {fork_task}\n"
            "When you have the result, call finish(result). (The overall question, for context: "
            f"{question})"
        )
    else:
        text = f"Question: {question}"
    if summary is not None:
        text += f"\nYour earlier context was compacted. Your summary of it:\n{summary}"
    return text


def context_full_note(tokens: int, window: int) -> str:
    """The message that asks the session whose context passed its window for its summary
    (``info["must_compact"]`` is then true)."""
    return (f"[Context full: {tokens} of {window} tokens. "
            "Reply with compact(summary) now, writing down everything you will still need.]")


def budget_note(steps_left: int) -> str:
    return f"[Steps left: {steps_left}]"


# The hints of action errors that are sentences to the agent (the errors are raised where they are found).
#: The example calls shown when an action holds no tool call.
_CALL_EXAMPLE = 'search("Edra Vane")'
_JSON_EXAMPLE = '<tool_call>{"name": "search", "arguments": {"query": "Edra Vane"}}</tool_call>'
CALL_EXAMPLES = f"{_CALL_EXAMPLE} or {_JSON_EXAMPLE}"
NO_CALL_FOUND = f"no tool call found. Call one tool, e.g. {CALL_EXAMPLES}"
NO_PAGE_OPEN = "no page is open; search or open one first"
OPEN_TAKES = 'open takes a result or link number, or a path such as "/wiki/Edra_Vane"'
ANSWER_IN_SUBAGENT = "a subagent returns its result with finish(result); answer() is for the root"
FINISH_IN_ROOT = "finish() returns a subagent's result; the root agent ends with answer(text)"
REPLY_BECAME_SUMMARY = "the context was full and the reply was not compact(summary): the reply became the summary"

#: Every example call the env shows here, with the words that introduce it ("Example: open(2)", "e.g. ...").
#: A small model often echoes the prompt or an error's hint; the parser blanks these phrases out first
#: (:func:`envs.actions.parse_action`), so an echoed example is never executed, while the same call written
#: on its own still is. The hints of :mod:`envs.actions` add theirs.
SHOWN_EXAMPLES: tuple[str, ...] = (
    f"e.g. {CALL_EXAMPLES}", CALL_EXAMPLES, f"e.g. {_CALL_EXAMPLE}", _JSON_EXAMPLE, JSON_FORM,
    *(f"Example: {call}" for call in _TOOL_EXAMPLES.values()))


def render_transcript(messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True) -> str:
    """Messages as the plain transcript above, ending with the assistant tag when ``add_generation_prompt``."""
    text = "".join(f"{ROLE_TAG[m['role']]}\n{m['content']}\n" for m in messages)
    return text + ROLE_TAG["assistant"] + "\n" if add_generation_prompt else text


#: A worked exchange in the env's own formats, for an agent to put before a session's first message
#: (``LLMAgent(examples=...)``): two made-up questions of other kinds than the builtin site's (a bridge's
#: designer, a clock tower's year), marked as a format example, each searched, opened and answered. A small
#: instruct model that reads only the tool list answers in prose; one that has seen an exchange calls tools.
#: The exchange ends on the assistant's last call, so the session's own question follows it as the next user
#: turn: an earlier exchange (one painter, then a separate "that was an example" user turn) had SmolLM2-135M
#: repeat the example's facts in prose (docs/smollm2.md measures both, ``scripts/smollm2_zero_shot.py``). Its
#: names are on no builtin site. The env never sends it; an agent that uses it pays its tokens outside the
#: env's window.
EXAMPLE_EXCHANGE: tuple[dict[str, str], ...] = (
    {"role": "user", "content": "(A format example: the tools and replies are real, the topic is made up.)\n"
                                "Question: Who designed the Zumbo Bridge?\n" + budget_note(9)},
    {"role": "assistant", "content": 'search("Zumbo Bridge")'},
    {"role": "user", "content": "[Search results: Search: Zumbo Bridge | /search?q=Zumbo+Bridge | part 1 of 1.]\n"
                                "[1] Zumbo Bridge\n/wiki/Zumbo_Bridge\nThe Zumbo Bridge is a bridge.\n"
                                "[2] Bridges\n/category/Bridges\nZumbo Bridge"},
    {"role": "assistant", "content": "open(1)"},
    {"role": "user", "content": "[Page: Zumbo Bridge | /wiki/Zumbo_Bridge | part 1 of 1.]\nZumbo Bridge\n"
                                "The Zumbo Bridge is a bridge.\nDesigner | [1] Pel Quarro\nOpened | 1650"},
    {"role": "assistant", "content": 'answer("Pel Quarro")'},
    {"role": "user", "content": "Question: In what year was the Lorro Clock built?\n" + budget_note(9)},
    {"role": "assistant", "content": 'search("Lorro Clock")'},
    {"role": "user", "content": "[Search results: Search: Lorro Clock | /search?q=Lorro+Clock | part 1 of 1.]\n"
                                "[1] Lorro Clock\n/wiki/Lorro_Clock\nThe Lorro Clock is a clock tower."},
    {"role": "assistant", "content": "open(1)"},
    {"role": "user", "content": "[Page: Lorro Clock | /wiki/Lorro_Clock | part 1 of 1.]\nLorro Clock\n"
                                "The Lorro Clock is a clock tower.\nBuilt | 1702\nMaker | [1] Ines Vato"},
    {"role": "assistant", "content": 'answer("1702")'},
)
