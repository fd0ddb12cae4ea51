"""The one place that builds what the model reads: the system prompt, the opening user message of each kind
of session, and the plain transcript format used for observations (and by agents whose tokenizer has no
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

_TOOLS = {
    "search": 'search(query): search the site; shows numbered results. Example: search("Edra Vane")',
    "open": "open(target): open a result number, a link number of the current page, or a path such as "
    '"/wiki/Edra_Vane"; shows the first part of the page. Example: open(2)',
    "scroll": 'scroll(direction): "down" or "up" to the next or previous part of the current page',
    "find": 'find(text): the passages of the current page that contain the text. Example: find("born")',
    "compact": "compact(summary): end this session; a new one starts with only the task and your summary. "
    "Write down everything you will still need.",
    "fork": "fork(task): start a subagent with a fresh context on a sub-question; you wait for its result",
    "finish": "finish(result): (subagents only) return your result to the agent that forked you",
    "answer": 'answer(text): give the final answer and end the episode. Example: answer("Oskarde")',
}


def system_prompt(tools: Sequence[str]) -> str:
    """The system prompt listing the enabled ``tools`` and the two accepted call forms."""
    lines = [
        "You are a research agent browsing an offline encyclopedia website to answer a question.",
        "Call exactly one tool per turn, either as name(\"argument\") or as",
        '<tool_call>{"name": "search", "arguments": {"query": "..."}}</tool_call>.',
        "Tools:",
    ]
    lines += [f"- {_TOOLS[t]}" for t in tools]
    return "\n".join(lines)


def task_message(question: str, *, summary: str | None = None, fork_task: str | None = None) -> str:
    """The first user message of a session: the root question, a compacted session's summary, or a fork's task."""
    if fork_task is not None:
        return (
            f"You are a subagent. Your task: {fork_task}\n"
            "When you have the result, call finish(result). (The overall question, for context: "
            f"{question})"
        )
    text = f"Question: {question}"
    if summary is not None:
        text += f"\nYour earlier context was compacted. Your summary of it:\n{summary}"
    return text


def budget_note(steps_left: int) -> str:
    return f"[Steps left: {steps_left}]"


def render_transcript(messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True) -> str:
    """Messages as the plain transcript above, ending with the assistant tag when ``add_generation_prompt``."""
    text = "".join(f"{ROLE_TAG[m['role']]}\n{m['content']}\n" for m in messages)
    return text + ROLE_TAG["assistant"] + "\n" if add_generation_prompt else text
