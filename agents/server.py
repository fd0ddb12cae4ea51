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

Errors: a server that does not answer gets ``retries`` more tries with exponential backoff, then a
:class:`ServerUnavailable` naming the address; a model the server does not serve is a :class:`ServerError`
naming the models it does serve, raised when the agent is made.

Example:
    >>> agent = ServerAgent("http://127.0.0.1:8000/v1", "Qwen/Qwen3-4B")  # doctest: +SKIP
    >>> actions, steps = agent.act_batch_recorded(observations, infos)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import socket
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import torch

from .base import RecordingAgent
from .records import AgentStep

logger = logging.getLogger(__name__)

RETRIED_STATUS = (408, 429, 500, 502, 503, 504)
"""HTTP statuses worth another try: the server is busy, restarting or timed out, not refusing the request."""


class ServerError(RuntimeError):
    """The server refused a request (a wrong model name, a bad field): retrying would not help."""


class ServerUnavailable(ServerError):
    """No answer from the server (down, killed, unreachable, too slow) after every retry."""


def is_server_url(text: str) -> bool:
    """Whether an ``--agent`` value names a server (``http://HOST:PORT/v1``) rather than a model.

    Example:
        >>> is_server_url("http://127.0.0.1:8000/v1"), is_server_url("tiny-1m")
        (True, False)
    """
    return text.startswith(("http://", "https://"))


def tool_call_text(call: dict[str, Any]) -> str:
    """A reply's structured tool call as the env's action string, ``<tool_call>{...}</tool_call>``.

    Example:
        >>> tool_call_text({"function": {"name": "search", "arguments": '{"query": "Edra"}'}})
        '<tool_call>{"name": "search", "arguments": {"query": "Edra"}}</tool_call>'
    """
    function = call["function"]
    arguments = function.get("arguments") or "{}"
    try:
        arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
    except json.JSONDecodeError:
        pass  # the env reports the bad arguments as an action error
    return "<tool_call>" + json.dumps({"name": function["name"], "arguments": arguments}) + "</tool_call>"


def parse_reply(reply: dict[str, Any], session_id: Any = None) -> AgentStep:
    """An OpenAI chat-completion reply as a step record: the action text, and the tokens' ids and log-probs
    where the reply has them (``choices[0].logprobs.content``; ids from vLLM's ``token_id:N`` tokens or
    ``choices[0].token_ids``, the prompt's from ``prompt_token_ids``).

    Example:
        >>> reply = {"choices": [{"message": {"content": "open(1)"}, "logprobs": {"content": [
        ...     {"token": "token_id:5", "logprob": -0.5}, {"token": "token_id:7", "logprob": -1.0}]}}],
        ...     "prompt_token_ids": [1, 2]}
        >>> step = parse_reply(reply, session_id=0)
        >>> step.text, step.prompt_ids, step.gen_ids, step.logprobs.tolist()
        ('open(1)', [1, 2], [5, 7], [-0.5, -1.0])
    """
    try:
        choice = reply["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError):
        raise ServerError(f"the server's reply is not a chat completion: {json.dumps(reply)[:300]}") from None
    calls = message.get("tool_calls") or []
    text = tool_call_text(calls[0]) if calls else (message.get("content") or "")
    content = (choice.get("logprobs") or {}).get("content") or []
    logprobs = torch.tensor([float(t["logprob"]) for t in content], dtype=torch.float32)
    gen_ids = list(choice.get("token_ids") or [])
    tokens = [t.get("token", "") for t in content]
    if not gen_ids and tokens and all(t.startswith("token_id:") for t in tokens):
        gen_ids = [int(t.removeprefix("token_id:")) for t in tokens]
    prompt_ids = list(reply.get("prompt_token_ids") or choice.get("prompt_token_ids") or [])
    return AgentStep(session_id, prompt_ids, gen_ids, logprobs, text)


class ServerAgent(RecordingAgent):
    """An agent whose actions come from an OpenAI-compatible chat-completions server.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``.
        model: the model name the server serves (``GET {base_url}/models`` lists them).
        temperature: sampling temperature (0: greedy).
        max_tokens: the most tokens a reply may have.
        max_in_flight: requests sent at once (the envs of a batch beyond it wait for a free one).
        timeout_s: how long one request may take before it is tried again.
        retries: more tries after a failed one (no answer, or a busy/erroring server: 408, 429, 5xx).
        backoff_s: the wait before the first retry; it doubles each time.
        seed: sent with each request, mixed with ``info["episode_seed"]`` and ``steps_used`` where a
            ``Collector`` gives them, so a server that honours seeds repeats an episode.
        logprobs: ask for the generated tokens' log-probs.
        extra_body: more request fields, for a server's own options (vLLM: ``{"return_token_ids": True}``).
        api_key: sent as a bearer token, for servers started with one.
        check: ask the server for its models now, so a wrong address or model name fails here, not mid-run.
    """

    def __init__(self, base_url: str, model: str, temperature: float = 1.0, max_tokens: int = 256,
                 max_in_flight: int = 8, timeout_s: float = 120.0, retries: int = 3, backoff_s: float = 0.5,
                 seed: int = 0, logprobs: bool = True, extra_body: dict[str, Any] | None = None,
                 api_key: str | None = None, check: bool = True) -> None:
        if not is_server_url(base_url):
            raise ValueError(f"base_url must start with http:// or https://, e.g. http://127.0.0.1:8000/v1; "
                             f"got {base_url!r}")
        if max_in_flight < 1 or retries < 0 or timeout_s <= 0 or max_tokens < 1:
            raise ValueError("max_in_flight and max_tokens must be at least 1, retries at least 0, timeout_s > 0")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.temperature, self.max_tokens, self.seed = temperature, max_tokens, seed
        self.max_in_flight, self.timeout_s, self.retries, self.backoff_s = max_in_flight, timeout_s, retries, backoff_s
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
        served = [m.get("id") for m in self._call("GET", "/models").get("data", [])]
        if self.model not in served:
            raise ServerError(f"the server at {self.base_url} does not serve model {self.model!r}; it serves "
                              f"{served}: pass one of those as --model")
        return served

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One request, tried again with backoff while the server does not answer or is busy."""
        url = self.base_url + path
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        started, wait = time.monotonic(), self.backoff_s
        for attempt in range(self.retries + 1):
            request = urllib.request.Request(url, data=data, headers=headers, method=method)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as err:
                detail = _detail(err)
                if err.code not in RETRIED_STATUS:
                    raise ServerError(f"the server at {self.base_url} refused {method} {path} "
                                      f"({err.code}): {detail}") from None
                why = f"HTTP {err.code}: {detail}"
            except (urllib.error.URLError, socket.timeout, ConnectionError, TimeoutError) as err:
                reason = getattr(err, "reason", err)
                why = f"no answer within {self.timeout_s:g} s" if isinstance(reason, (socket.timeout, TimeoutError)) \
                    else f"{type(reason).__name__}: {reason}"
            except json.JSONDecodeError as err:
                raise ServerError(f"the server at {self.base_url} answered {path} with something that is not "
                                  f"JSON ({err})") from None
            if attempt < self.retries:
                logger.info("server %s: %s; retrying in %.2f s", self.base_url, why, wait)
                time.sleep(wait)
                wait *= 2
        raise ServerUnavailable(f"the inference server at {self.base_url} did not answer {method} {path} "
                                f"({why}) after {self.retries + 1} tries over {time.monotonic() - started:.1f} s: "
                                f"is it running, and is the address right?")


def _detail(err: urllib.error.HTTPError) -> str:
    """What an HTTP error's body says (FastAPI's ``detail``, OpenAI's ``error.message``), in one line."""
    try:
        text = err.read().decode(errors="replace")
    except OSError:
        return err.reason or ""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return text.strip()[:300]
    if isinstance(data, dict):
        found = data.get("detail") or data.get("error") or data
        if isinstance(found, dict):
            found = found.get("message", found)
        return str(found)[:300]
    return str(data)[:300]


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
        self.process = None
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
        self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"transformers serve exited with status {self.process.returncode} at start"
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
