"""An agent behind an OpenAI-compatible inference server: vLLM, SGLang, ``transformers serve``.

:class:`ServerAgent` sends each env's ``info["messages"]`` to ``POST {base_url}/chat/completions`` and returns
the reply as the action. A batch of envs is sent at once, up to ``max_in_flight`` requests in flight (threads,
standard library HTTP only), so a server that batches (vLLM, SGLang, ``transformers serve
--continuous-batching``) works on many envs together while the driver waits once per step.

It is a :class:`agents.base.RecordingAgent`: each action comes with an :class:`agents.records.AgentStep`
holding what the server told about its tokens. It asks for token log-probs (``logprobs: true``); vLLM and
SGLang return them, and token ids too where asked (vLLM: ``--return-tokens-as-token-ids``, or
``extra_body={"return_token_ids": True}``), which is what a learner needs. ``transformers serve`` (5.x)
ignores the request: its steps carry no log-probs (an empty tensor) and the agent warns once.

What a server can do to a run is bounded:

- **Time.** ``timeout_s`` is one deadline for a whole request: connecting, sending, the headers and the whole
  body. A reply that trickles in a byte at a time, or a chunked body that never ends, is cut off there.
- **Size.** A reply longer than ``max_reply_bytes`` is refused.
- **Redirects** are not followed (the API key would go along to whatever address one names): a 3xx is a
  :class:`ServerError` naming the address, to be passed as the base URL if it is the right one.
- **Replies** are checked field by field: bytes that are not UTF-8 or JSON, JSON nested deeper than
  :data:`MAX_REPLY_DEPTH`, a missing key or a value of the wrong type are each a :class:`ServerError` naming
  what was wrong, never a raw ``KeyError`` or ``TypeError``.

Errors: a server that does not answer, or answers busy or failing (408, 429, 5xx), gets ``retries`` more tries
with exponential backoff (or the wait a 429/503's ``Retry-After`` asks, up to ``max_retry_after_s``), then a
:class:`ServerUnavailable` naming the address; a model the server does not serve is a :class:`ServerError`
naming the models it does serve, raised when the agent is made.

Example:
    >>> agent = ServerAgent("http://127.0.0.1:8000/v1", "Qwen/Qwen3-4B")  # doctest: +SKIP
    >>> actions, steps = agent.act_batch_recorded(observations, infos)  # doctest: +SKIP
"""

from __future__ import annotations

import email.utils
import http.client
import json
import logging
import math
import re
import socket
import threading
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Sequence

import torch

from .base import RecordingAgent
from .records import AgentStep

if TYPE_CHECKING:
    import subprocess

logger = logging.getLogger(__name__)

RETRIED_STATUS = (408, 429, 500, 502, 503, 504)
"""HTTP statuses worth another try: the server is busy, restarting or timed out, not refusing the request."""
RETRY_AFTER_STATUS = (429, 503)
"""HTTP statuses whose ``Retry-After`` header says how long to wait before the next try."""
MAX_REPLY_DEPTH = 32
"""The deepest nesting of JSON a reply may have; a chat completion with log-probs is about 8 deep."""


class ServerError(RuntimeError):
    """The server refused a request (a wrong model name, a bad field) or answered with something that is not a
    usable reply: retrying would not help."""


class ServerUnavailable(ServerError):
    """No answer from the server (down, killed, unreachable, too slow, busy) after every retry."""


class _NoAnswer(Exception):
    """One try got no complete answer (refused, reset, cut off at the deadline): worth another try."""


def is_server_url(text: str) -> bool:
    """Whether an ``--agent`` value names a server (``http://HOST:PORT/v1``) rather than a model.

    Example:
        >>> is_server_url("http://127.0.0.1:8000/v1"), is_server_url("tiny-1m")
        (True, False)
    """
    return text.startswith(("http://", "https://"))


# --- reading a reply ------------------------------------------------------------------------------------
_MISSING = object()


def _described(value: Any) -> str:
    """A JSON value in a few words, for an error: its type, and the value itself when it is short."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"bool {str(value).lower()}"
    if isinstance(value, dict):
        return f"an object with keys {json.dumps(list(value)[:5])[:80]}"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, int) and abs(value).bit_length() > 64:
        return "an int of more than 64 bits"
    return f"{type(value).__name__} {json.dumps(value)[:60]}"


def _bad(where: str, wanted: str, value: Any) -> ServerError:
    got = "is missing" if value is _MISSING else f"must be {wanted}, got {_described(value)}"
    return ServerError(f"the server's reply is not a chat completion: {where} {got}")


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad(where, "an object", value)
    return value


def _list(value: Any, where: str, optional: bool = True) -> list[Any]:
    """``value`` as a list; ``[]`` for null or missing where ``optional``."""
    if optional and (value is None or value is _MISSING):
        return []
    if not isinstance(value, list):
        raise _bad(where, "a list" + (" or null" if optional else ""), value)
    return value


def _string(value: Any, where: str, optional: bool = True) -> str:
    """``value`` as a string that UTF-8 can carry; ``""`` for null or missing where ``optional``."""
    if optional and (value is None or value is _MISSING):
        return ""
    if not isinstance(value, str):
        raise _bad(where, "a string" + (" or null" if optional else ""), value)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # "\ud800": half of a UTF-16 pair, a string no log or tokenizer can encode
        raise ServerError(f"the server's reply is not a chat completion: {where} holds a lone UTF-16 surrogate "
                          f"(a \\u escape that is half of a pair), not text") from None
    return value


def _ids(value: Any, where: str) -> list[int]:
    ids = _list(value, where)
    for i, token in enumerate(ids):
        if not isinstance(token, int) or isinstance(token, bool) or token < 0:
            raise _bad(f"{where}[{i}]", "a token id (a whole number >= 0)", token)
    return list(ids)


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists and objects deeper than ``limit`` (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def parse_json(payload: bytes, what: str) -> Any:
    """The JSON value of a reply's bytes; a :class:`ServerError` naming ``what`` and the fault otherwise
    (not UTF-8, not JSON, a number past Python's digit limit, nested deeper than :data:`MAX_REPLY_DEPTH`).

    Example:
        >>> parse_json(b'{"data": []}', "the reply")
        {'data': []}
        >>> parse_json(b"[" * 40 + b"]" * 40, "the reply")
        Traceback (most recent call last):
        ...
        agents.server.ServerError: the reply is JSON nested deeper than 32 levels
    """
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ServerError(f"{what} is not UTF-8 (byte {payload[err.start]:#04x} at offset {err.start})") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        shown = text[:80].replace("\n", " ")
        raise ServerError(f"{what} is not JSON ({err.msg} at offset {err.pos}): {shown!r}") from None
    except RecursionError:
        raise ServerError(f"{what} is JSON nested too deeply to read") from None
    except ValueError:  # json's only other ValueError: an integer past Python's digit limit
        raise ServerError(f"{what} holds a number of more than 4,300 digits") from None
    if _depth_exceeds(value, MAX_REPLY_DEPTH):
        raise ServerError(f"{what} is JSON nested deeper than {MAX_REPLY_DEPTH} levels")
    return value


def tool_call_text(call: Any, where: str = "tool_calls[0]") -> str:
    """A reply's structured tool call as the env's action string, ``<tool_call>{...}</tool_call>``.

    Arguments that are not JSON are kept as the string they are: the env reports them as an action error.

    Example:
        >>> tool_call_text({"function": {"name": "search", "arguments": '{"query": "Edra"}'}})
        '<tool_call>{"name": "search", "arguments": {"query": "Edra"}}</tool_call>'
    """
    function = _object(_object(call, where).get("function", _MISSING), f"{where}.function")
    name = _string(function.get("name", _MISSING), f"{where}.function.name", optional=False)
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        _string(arguments, f"{where}.function.arguments")
        try:
            parsed = json.loads(arguments) if arguments else {}
            arguments = arguments if _depth_exceeds(parsed, MAX_REPLY_DEPTH) else parsed
        except (ValueError, RecursionError):
            pass
    elif arguments is None:
        arguments = {}
    elif not isinstance(arguments, dict):
        raise _bad(f"{where}.function.arguments", "a JSON string or an object", arguments)
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def parse_reply(reply: Any, session_id: Any = None) -> AgentStep:
    """An OpenAI chat-completion reply as a step record: the action text, and the tokens' ids and log-probs
    where the reply has them (``choices[0].logprobs.content``; ids from vLLM's ``token_id:N`` tokens or
    ``choices[0].token_ids``, the prompt's from ``prompt_token_ids``).

    Raises:
        ServerError: the reply is not a chat completion; the message names the first field that is wrong.

    Example:
        >>> reply = {"choices": [{"message": {"content": "open(1)"}, "logprobs": {"content": [
        ...     {"token": "token_id:5", "logprob": -0.5}, {"token": "token_id:7", "logprob": -1.0}]}}],
        ...     "prompt_token_ids": [1, 2]}
        >>> step = parse_reply(reply, session_id=0)
        >>> step.text, step.prompt_ids, step.gen_ids, step.logprobs.tolist()
        ('open(1)', [1, 2], [5, 7], [-0.5, -1.0])
        >>> try:
        ...     parse_reply({"choices": [{"message": {"content": 5}}]})
        ... except ServerError as err:
        ...     print(str(err).split(": ", 1)[1])
        choices[0].message.content must be a string or null, got int 5
    """
    if not isinstance(reply, dict):
        raise ServerError(f"the server's reply is not a chat completion: it is {_described(reply)}, not an object")
    choices = reply.get("choices", _MISSING)
    if not isinstance(choices, list) or not choices:
        raise _bad("choices", "a non-empty list", choices)
    choice = _object(choices[0], "choices[0]")
    message = _object(choice.get("message", _MISSING), "choices[0].message")
    calls = _list(message.get("tool_calls"), "choices[0].message.tool_calls")
    content = _string(message.get("content"), "choices[0].message.content")
    text = tool_call_text(calls[0], "choices[0].message.tool_calls[0]") if calls else content
    logprobs = choice.get("logprobs")
    entries = [] if logprobs is None else _list(_object(logprobs, "choices[0].logprobs").get("content"),
                                                "choices[0].logprobs.content")
    values, tokens = [], []
    for i, entry in enumerate(entries):
        where = f"choices[0].logprobs.content[{i}]"
        entry = _object(entry, where)
        value = entry.get("logprob", _MISSING)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value) or value == math.inf:
            raise _bad(f"{where}.logprob", "a number (a log-probability)", value)
        values.append(float(value))
        tokens.append(_string(entry.get("token"), f"{where}.token"))
    gen_ids = _ids(choice.get("token_ids"), "choices[0].token_ids")
    if not gen_ids and tokens and all(t.startswith("token_id:") for t in tokens):
        for i, token in enumerate(tokens):
            if not re.fullmatch(r"token_id:[0-9]{1,18}", token):
                raise ServerError(f"the server's reply is not a chat completion: choices[0].logprobs.content[{i}]"
                                  f".token {token[:40]!r} is not token_id:N with N a token id")
        gen_ids = [int(t.removeprefix("token_id:")) for t in tokens]
    if gen_ids and values and len(gen_ids) != len(values):
        raise ServerError(f"the server's reply is not a chat completion: it has {len(gen_ids)} token ids but "
                          f"{len(values)} log-probs for the generated tokens")
    prompt = reply.get("prompt_token_ids")
    prompt_ids = (_ids(prompt, "prompt_token_ids") if prompt is not None
                  else _ids(choice.get("prompt_token_ids"), "choices[0].prompt_token_ids"))
    return AgentStep(session_id, prompt_ids, gen_ids, torch.tensor(values, dtype=torch.float32), text)


def retry_after_s(value: str | None, now: datetime | None = None) -> float | None:
    """The wait a ``Retry-After`` header asks for, in seconds (a number of seconds, or an HTTP date);
    ``None`` when there is none or it is neither.

    Example:
        >>> retry_after_s("3"), retry_after_s("soon"), retry_after_s(None)
        (3.0, None, None)
        >>> retry_after_s("Wed, 21 Oct 2015 07:28:10 GMT", now=datetime(2015, 10, 21, 7, 28, tzinfo=timezone.utc))
        10.0
    """
    if value is None:
        return None
    value = value.strip()
    if re.fullmatch(r"[0-9]{1,9}", value):
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - (now or datetime.now(timezone.utc))).total_seconds())


def _detail(payload: bytes) -> str:
    """What an HTTP error's body says (FastAPI's ``detail``, OpenAI's ``error.message``), in one line."""
    text = payload.decode("utf-8", errors="replace")
    try:
        data = parse_json(payload, "the body")
    except ServerError:
        return " ".join(text.split())[:300]
    if isinstance(data, dict):
        found = data.get("detail") or data.get("error") or data
        if isinstance(found, dict):
            found = found.get("message", found)
        data = found
    return " ".join(str(data).split())[:300]


class _Deadline:
    """Cuts a connection's socket once ``seconds`` have passed, whatever the request is waiting for then
    (a socket timeout bounds each read, not a reply that trickles in a byte at a time)."""

    def __init__(self, connection: http.client.HTTPConnection, seconds: float):
        self.connection, self.expired = connection, threading.Event()
        self._timer = threading.Timer(seconds, self._cut)
        self._timer.daemon = True

    def __enter__(self) -> "_Deadline":
        self._timer.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._timer.cancel()

    def _cut(self) -> None:
        # Set before reading the socket: a request that connects after this sees it, one connected before is cut.
        self.expired.set()
        sock = self.connection.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed


class ServerAgent(RecordingAgent):
    """An agent whose actions come from an OpenAI-compatible chat-completions server.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``.
        model: the model name the server serves (``GET {base_url}/models`` lists them).
        temperature: sampling temperature (0: greedy).
        max_tokens: the most tokens a reply may have.
        max_in_flight: requests sent at once (the envs of a batch beyond it wait for a free one).
        timeout_s: the most one request may take, all of it (connecting, sending, the reply's headers and
            whole body), before it is tried again.
        retries: more tries after a failed one (no answer, or a busy/erroring server: 408, 429, 5xx).
        backoff_s: the wait before the first retry; it doubles each time.
        seed: sent with each request, mixed with ``info["episode_seed"]`` and ``steps_used`` where a
            ``Collector`` gives them, so a server that honours seeds repeats an episode.
        logprobs: ask for the generated tokens' log-probs.
        extra_body: more request fields, for a server's own options (vLLM: ``{"return_token_ids": True}``).
        api_key: sent as a bearer token, for servers started with one (never to another address: redirects
            are not followed).
        check: ask the server for its models now, so a wrong address or model name fails here, not mid-run.
        max_reply_bytes: the longest reply body accepted; a longer one is a :class:`ServerError`.
        max_retry_after_s: the longest wait a 429/503's ``Retry-After`` gets before the next try.
    """

    def __init__(self, base_url: str, model: str, temperature: float = 1.0, max_tokens: int = 256,
                 max_in_flight: int = 8, timeout_s: float = 120.0, retries: int = 3, backoff_s: float = 0.5,
                 seed: int = 0, logprobs: bool = True, extra_body: dict[str, Any] | None = None,
                 api_key: str | None = None, check: bool = True, max_reply_bytes: int = 16 * 2**20,
                 max_retry_after_s: float = 60.0) -> None:
        if not is_server_url(base_url):
            raise ValueError(f"base_url must start with http:// or https://, e.g. http://127.0.0.1:8000/v1; "
                             f"got {base_url!r}")
        parts = urllib.parse.urlsplit(base_url)
        try:
            port = parts.port
        except ValueError:
            port = -1
        if not parts.hostname or port == -1 or parts.query or parts.fragment:
            raise ValueError(f"base_url must be http(s)://HOST[:PORT]/PATH, e.g. http://127.0.0.1:8000/v1; "
                             f"got {base_url!r}")
        if max_in_flight < 1 or retries < 0 or timeout_s <= 0 or max_tokens < 1 or max_reply_bytes < 1:
            raise ValueError("max_in_flight, max_tokens and max_reply_bytes must be at least 1, retries at least 0, "
                             "timeout_s > 0")
        if temperature < 0 or backoff_s < 0 or max_retry_after_s < 0:
            raise ValueError(f"temperature, backoff_s and max_retry_after_s must be >= 0, got {temperature}, "
                             f"{backoff_s}, {max_retry_after_s}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.temperature, self.max_tokens, self.seed = temperature, max_tokens, seed
        self.max_in_flight, self.timeout_s, self.retries, self.backoff_s = max_in_flight, timeout_s, retries, backoff_s
        self.max_reply_bytes, self.max_retry_after_s = max_reply_bytes, max_retry_after_s
        self.logprobs = logprobs
        self.extra_body = dict(extra_body or {})
        self.api_key = api_key
        self._pool = ThreadPoolExecutor(max_in_flight, thread_name_prefix="server-agent")
        self._warned = False
        if check:
            self.check_model()

    # --- the Agent protocol ---------------------------------------------------------------------------
    def act_batch_recorded(self, observations: Sequence[str], infos: Sequence[dict[str, Any]]
                           ) -> tuple[list[str], list[AgentStep]]:
        """One request per env, all in flight together (``max_in_flight`` at most); replies in env order."""
        steps = list(self._pool.map(self._ask, infos))
        if self.logprobs and not self._warned and any(len(s.logprobs) == 0 and s.text for s in steps):
            self._warned = True
            logger.warning("the server at %s returned no token log-probs (transformers serve does not implement "
                           "them; vLLM and SGLang do): these steps cannot be trained on", self.base_url)
        return [s.text for s in steps], steps

    def close(self) -> None:
        """Stop the request threads."""
        self._pool.shutdown(wait=True)

    # --- requests -------------------------------------------------------------------------------------
    def request_body(self, info: dict[str, Any]) -> dict[str, Any]:
        """The chat-completion request for one env: its messages as they are, and the sampling settings."""
        if "messages" not in info:
            raise ValueError("ServerAgent needs info['messages'] (the env's chat messages)")
        body: dict[str, Any] = {"model": self.model, "messages": info["messages"], "max_tokens": self.max_tokens,
                                "temperature": self.temperature, "seed": self._seed(info)}
        if self.logprobs:
            body["logprobs"] = True
        return {**body, **self.extra_body}

    def _seed(self, info: dict[str, Any]) -> int:
        if info.get("episode_seed") is None:
            return self.seed
        return (self.seed * 1_000_003 + int(info["episode_seed"]) * 10_007 + int(info.get("steps_used", 0))) % 2**31

    def _ask(self, info: dict[str, Any]) -> AgentStep:
        reply = self._call("POST", "/chat/completions", self.request_body(info))
        return parse_reply(reply, info.get("session_id"))

    def check_model(self) -> list[str]:
        """The models the server lists; a :class:`ServerError` if ``model`` is not one of them."""
        listing = self._call("GET", "/models")
        if not isinstance(listing, dict):
            raise ServerError(f"the server at {self.base_url} answered GET /models with {_described(listing)}, "
                              f"not an object with a list of models under \"data\"")
        models = _list(listing.get("data", _MISSING), "the model list's data", optional=False)
        served = [_string(_object(m, f"data[{i}]").get("id", _MISSING), f"data[{i}].id", optional=False)
                  for i, m in enumerate(models)]
        if self.model not in served:
            raise ServerError(f"the server at {self.base_url} does not serve model {self.model!r}; it serves "
                              f"{served[:20]}: pass one of those as --model")
        return served

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """One request's JSON reply, tried again with backoff while the server does not answer or is busy."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        started, wait = time.monotonic(), self.backoff_s
        for attempt in range(self.retries + 1):
            asked = None
            try:
                status, reply_headers, payload = self._exchange(method, path, data, headers)
            except _NoAnswer as err:
                why = str(err)
            else:
                if 200 <= status < 300:
                    return parse_json(payload, f"the reply of the server at {self.base_url} to {method} {path}")
                if 300 <= status < 400:
                    location = reply_headers.get("Location") or "nowhere"
                    raise ServerError(
                        f"the server at {self.base_url} answered {method} {path} with a redirect ({status}) to "
                        f"{location[:200]!r}; ServerAgent follows no redirects, so that its API key goes nowhere "
                        f"else: if that is the server, pass its address as the base URL")
                if status not in RETRIED_STATUS:
                    raise ServerError(f"the server at {self.base_url} refused {method} {path} "
                                      f"({status}): {_detail(payload)}")
                why = f"HTTP {status}: {_detail(payload)}"
                if status in RETRY_AFTER_STATUS:
                    asked = retry_after_s(reply_headers.get("Retry-After"))
            if attempt < self.retries:
                pause = wait if asked is None else max(wait, min(asked, self.max_retry_after_s))
                logger.info("server %s: %s; retrying in %.2f s", self.base_url, why, pause)
                time.sleep(pause)
                wait *= 2
        raise ServerUnavailable(f"the inference server at {self.base_url} gave no usable answer to {method} {path} "
                                f"({why}) after {self.retries + 1} tries over {time.monotonic() - started:.1f} s: "
                                f"is it running, and is the address right?")

    def _exchange(self, method: str, path: str, data: bytes | None, headers: dict[str, str]
                  ) -> tuple[int, http.client.HTTPMessage, bytes]:
        """One try: the reply's status, headers and body (at most ``max_reply_bytes``), all within ``timeout_s``.

        Raises:
            _NoAnswer: no complete reply (refused, reset, malformed HTTP, cut off at the deadline).
            ServerError: the reply is longer than ``max_reply_bytes``.
        """
        parts = urllib.parse.urlsplit(self.base_url)
        if parts.hostname is None:  # (checked at construction; base_url changed since)
            raise ValueError(f"base_url {self.base_url!r} names no host")
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        connection = kind(parts.hostname, parts.port, timeout=self.timeout_s)
        too_slow = f"no complete answer within {self.timeout_s:g} s"
        try:
            with _Deadline(connection, self.timeout_s) as deadline:
                try:
                    connection.connect()
                    if deadline.expired.is_set():
                        raise _NoAnswer(too_slow)
                    connection.request(method, parts.path.rstrip("/") + path, body=data, headers=headers)
                    response = connection.getresponse()
                    payload = self._read_body(response, method, path)
                except (OSError, http.client.HTTPException) as err:
                    if deadline.expired.is_set() or isinstance(err, (socket.timeout, TimeoutError)):
                        raise _NoAnswer(too_slow) from None
                    raise _NoAnswer(" ".join(f"{type(err).__name__}: {err}".split())[:300]) from None
                if deadline.expired.is_set() or response.length:  # cut off, or closed before its Content-Length
                    raise _NoAnswer(too_slow if deadline.expired.is_set() else
                                    f"the reply ended after {len(payload)} bytes, before its Content-Length")
        finally:
            connection.close()
        return response.status, response.headers, payload

    def _read_body(self, response: http.client.HTTPResponse, method: str, path: str) -> bytes:
        too_long = (f"the server at {self.base_url} answered {method} {path} with more than "
                    f"{self.max_reply_bytes:,} bytes (max_reply_bytes)")
        if response.length is not None and response.length > self.max_reply_bytes:  # its Content-Length
            raise ServerError(too_long)
        payload = bytearray()
        while chunk := response.read(min(65536, self.max_reply_bytes + 1 - len(payload))):
            payload += chunk
            if len(payload) > self.max_reply_bytes:
                raise ServerError(too_long)
        return bytes(payload)


class TransformersServer:
    """``transformers serve MODEL_DIR`` in a child process on a free loopback port, for tests, benchmarks and
    local runs without vLLM (needs the ``transformers[serving]`` extra: ``pip install 'mosaic-gym[serving]'``).

    Use as a context manager; ``base_url`` and ``model`` are what :class:`ServerAgent` takes. Offline: the
    model is a local folder (with a chat template), and ``HF_HUB_OFFLINE=1`` keeps the server off the hub.

    Args:
        model_dir: a folder written by ``save_pretrained`` whose tokenizer has a chat template.
        continuous_batching: the server's ``--continuous-batching`` (requests in flight share forward passes).
        start_timeout_s: how long to wait for ``/health`` before giving up.
        log_path: where the server's output goes (default: discarded).
    """

    def __init__(self, model_dir: str, continuous_batching: bool = False, start_timeout_s: float = 120.0,
                 log_path: str | None = None):
        self.model = str(model_dir)
        self.continuous_batching = continuous_batching
        self.start_timeout_s = start_timeout_s
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "TransformersServer":
        import os
        import shutil
        import subprocess
        import sys

        exe = shutil.which("transformers") or os.path.join(os.path.dirname(sys.executable), "transformers")
        if not os.path.exists(exe):
            raise FileNotFoundError("the `transformers` command is missing: pip install 'mosaic-gym[serving]'")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        command = [exe, "serve", self.model, "--host", "127.0.0.1", "--port", str(self.port), "--device", "cpu",
                   "--log-level", "warning"]
        if self.continuous_batching:
            command.append("--continuous-batching")
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        out = open(self.log_path, "w") if self.log_path else subprocess.DEVNULL
        process = self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"transformers serve exited with status {process.returncode} at start"
                                   + (f" (see {self.log_path})" if self.log_path else ""))
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as response:
                    if response.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"transformers serve did not answer /health within {self.start_timeout_s:g} s")

    def stop(self) -> None:
        """End the server (SIGKILL if it does not stop within 10 s)."""
        import subprocess

        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> "TransformersServer":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()
