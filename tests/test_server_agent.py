"""ServerAgent against a real ``transformers serve`` (a tiny model saved by the test, served on a loopback
port): whole episodes, the messages as the server received them, a wrong model name, a killed server."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import envs  # noqa: F401  (registers the environments)
from algos.rollout import Collector, Request

from helpers import SITE_SIZE

from agents.server import ServerAgent, ServerError, ServerUnavailable, TransformersServer

ENV_KWARGS = {"site_size": SITE_SIZE, "split": "test", "max_steps": 4}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from agents.models import TRANSCRIPT_CHAT_TEMPLATE, make_tiny

    folder = tmp_path_factory.mktemp("served") / "tiny"
    texts = ['search("Edra Vane") open(1) answer("Oskarde")'] * 40
    model, _ = make_tiny(folder, texts, size="1m", chat_template=TRANSCRIPT_CHAT_TEMPLATE)
    model.generation_config.do_sample = True  # the server samples at the request's temperature
    model.generation_config.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def served(model_dir, tmp_path_factory):
    pytest.importorskip("fastapi", reason="these tests need transformers serve: pip install 'mosaic-gym[serving]'")
    log = tmp_path_factory.mktemp("serve-log") / "serve.log"
    with TransformersServer(model_dir, log_path=str(log)) as running:
        yield running


@pytest.fixture
def server(served):
    """The module's server, started again if a test killed it (starting one takes seconds)."""
    if served.process.poll() is not None:
        served.start()
    return served


class RecordingProxy:
    """A loopback HTTP relay in front of the server that keeps each request body it passes on: what the
    server received, byte for byte."""

    def __init__(self, target: str):
        bodies = self.bodies = []
        proxy, lock = self, threading.Lock()
        self.in_flight = self.most_in_flight = 0

        class Relay(BaseHTTPRequestHandler):
            def _relay(self, data=None, replied=lambda: None):
                request = urllib.request.Request(target + self.path, data=data, method=self.command,
                                                 headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(request, timeout=60) as response:
                        status, payload = response.status, response.read()
                except urllib.error.HTTPError as err:
                    status, payload = err.code, err.read()
                finally:
                    # Out of flight before the client can see the reply: the client may send its next
                    # request as soon as it reads this one's, before this thread would count it done.
                    replied()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self):
                self._relay()

            def do_POST(self):
                data = self.rfile.read(int(self.headers["Content-Length"]))
                with lock:
                    bodies.append(json.loads(data))
                    proxy.in_flight += 1
                    proxy.most_in_flight = max(proxy.most_in_flight, proxy.in_flight)
                def replied():
                    with lock:
                        proxy.in_flight -= 1

                self._relay(data, replied)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Relay)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_episode_completes_and_the_server_receives_the_envs_messages(server, caplog):
    proxy = RecordingProxy(f"http://127.0.0.1:{server.port}")
    try:
        agent = ServerAgent(proxy.base_url, server.model, max_tokens=12, temperature=1.0)
        env = gym.make("mosaic/WebQA-v0", **ENV_KWARGS)
        obs, info = env.reset(seed=0)
        sent, done, steps = [], False, []
        while not done:
            sent.append(info["messages"])
            (action,), (step,) = agent.act_batch_recorded([obs], [info])
            steps.append(step)
            obs, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        agent.close()
    finally:
        proxy.close()
    assert info["trajectory"]["steps_used"] == len(steps) <= ENV_KWARGS["max_steps"]
    assert [body["messages"] for body in proxy.bodies] == sent
    assert all(body["model"] == server.model and body["logprobs"] is True for body in proxy.bodies)
    assert all(step.session_id == 0 for step in steps) and any(step.text for step in steps)
    # transformers serve 5.x ignores "logprobs": the records say so (none), and the agent warns once.
    assert all(len(step.logprobs) == 0 for step in steps)
    assert sum("returned no token log-probs" in r.getMessage() for r in caplog.records) == 1


def test_collector_runs_many_envs_in_flight(server):
    proxy = RecordingProxy(f"http://127.0.0.1:{server.port}")
    try:
        agent = ServerAgent(proxy.base_url, server.model, max_tokens=8, max_in_flight=4)
        make = lambda: gym.make("mosaic/WebQA-v0", **ENV_KWARGS)  # noqa: E731
        requests = [Request(seed=s, options={}, group=s) for s in range(4)]
        trajectories = Collector(make, num_envs=4).run(agent, requests)
        agent.close()
    finally:
        proxy.close()
    assert 2 <= proxy.most_in_flight <= 4  # the envs' requests overlapped, within the agent's limit
    assert [t.group for t in trajectories] == [0, 1, 2, 3]
    assert all(sum(len(s) for s in t.steps.values()) == t.tree["steps_used"] for t in trajectories)


def test_wrong_model_name_is_a_clear_error(server):
    with pytest.raises(ServerError, match=r"does not serve model 'no-such-model'.*pass one of those as --model"):
        ServerAgent(server.base_url, "no-such-model")


def test_no_server_at_the_address_is_a_clear_error():
    with pytest.raises(ServerUnavailable, match=r"127\.0\.0\.1:9/v1 gave no usable answer to GET /models"):
        ServerAgent("http://127.0.0.1:9/v1", "m", retries=0)


def test_eval_and_rollout_take_a_server_url_and_a_model(server, tmp_path, capsys):
    from mosaic_gym.cli import main

    common = ["--site-size", str(SITE_SIZE), "--max-new-tokens", "8"]
    assert main(["eval", "--agent", server.base_url, "--model", server.model, "--tasks", "2", "--n", "1", "--ks",
                 "1", "--ts", "2", "--num-envs", "2", "--no-progress", "--out", str(tmp_path), *common]) == 0
    runs = json.loads((tmp_path / "passkt.json").read_text())["samples"]
    assert len(runs) == 2 and all(1 <= run["steps_used"] <= 2 for run in runs)  # budget T = 2
    assert main(["rollout", "--agent", server.base_url, "--model", "nope", *common]) == 2
    assert "does not serve model 'nope'" in capsys.readouterr().err


# Last in the file: it kills the module's server, and starting another takes seconds.
def test_killed_server_gives_a_clear_error(server):
    agent = ServerAgent(server.base_url, server.model, max_tokens=4, retries=2, backoff_s=0.1, timeout_s=10)
    env = gym.make("mosaic/WebQA-v0", **ENV_KWARGS)
    obs, info = env.reset(seed=0)
    agent.act_batch([obs], [info])  # it answers while it runs
    server.process.kill()
    server.process.wait()
    started = time.monotonic()
    with pytest.raises(ServerUnavailable, match=r"gave no usable answer to POST /chat/completions .* after 3 tries"):
        agent.act_batch([obs], [info])
    assert time.monotonic() - started < 10
    agent.close()


# --- a server that misbehaves ----------------------------------------------------------------------------
# A real loopback HTTP server whose answer is whatever a test hands it: a reply that trickles or never ends,
# a redirect, a busy signal, or bytes that are not a chat completion. No transformers serve needed.

OK_REPLY = {"choices": [{"message": {"content": "open(1)"}, "logprobs": {"content": [
    {"token": "token_id:5", "logprob": -0.5}, {"token": "token_id:7", "logprob": -1.0}]}}], "prompt_token_ids": [1, 2]}
INFO = {"messages": [{"role": "user", "content": "Who?"}], "session_id": 0}


class MisbehavingServer:
    """Answers every request with ``answer(handler)`` on a real socket; keeps each request's method, path,
    headers and arrival time. Slow answers stop when the test closes the server."""

    def __init__(self, answer):
        self.answer, self.requests, self.stopped = answer, [], threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.requests.append((self.command, self.path, dict(self.headers), time.monotonic()))
                try:
                    outer.answer(self)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up on the answer: what most of these tests want
                self.close_connection = True

            do_GET = do_POST = _any

            def log_message(self, *args):
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.outer = self
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def sleep(self, seconds: float) -> bool:
        """Wait ``seconds``; False once the server is closing."""
        return not self.stopped.wait(seconds)

    def close(self):
        self.stopped.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def misbehaving():
    servers = []

    def start(answer):
        servers.append(MisbehavingServer(answer))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def send(body: bytes | str | object = OK_REPLY, status: int = 200, headers: dict[str, str] | None = None):
    """An answer: ``body`` (JSON-encoded unless bytes) with ``status`` and ``headers``."""
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()

    def answer(handler):
        handler.send_response(status)
        sent = {"Content-Type": "application/json", "Content-Length": str(len(payload)), **(headers or {})}
        for key, value in sent.items():
            handler.send_header(key, value)
        handler.end_headers()
        handler.wfile.write(payload)
    return answer


def raw(data: bytes):
    """An answer of these exact bytes, status line and headers included."""
    return lambda handler: handler.wfile.write(data)


def trickling_body(handler):
    handler.send_response(200)
    handler.send_header("Content-Length", "100000")
    handler.end_headers()
    while handler.server.outer.sleep(0.1):
        handler.wfile.write(b" ")
        handler.wfile.flush()


def endless_chunks(handler):
    handler.send_response(200)
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    while handler.server.outer.sleep(0.05):
        handler.wfile.write(b"1\r\n \r\n")
        handler.wfile.flush()


def trickling_headers(handler):
    handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
    while handler.server.outer.sleep(0.1):
        handler.wfile.write(b"X-Slow: 1\r\n")
        handler.wfile.flush()


def silence(handler):
    handler.server.outer.sleep(30)


def agent_for(server, **kwargs) -> ServerAgent:
    settings = {"check": False, "retries": 0, "timeout_s": 1.0, "backoff_s": 0.01, **kwargs}
    return ServerAgent(server.base_url, "m", **settings)


def choice_with(**fields) -> dict:
    """``OK_REPLY`` with its first choice's fields replaced (a field of None is dropped)."""
    choice = {**OK_REPLY["choices"][0], **fields}
    return {**OK_REPLY, "choices": [{k: v for k, v in choice.items() if v is not None}]}


def message_with(**fields) -> dict:
    return choice_with(message={"content": "open(1)", **fields})


def logprobs_with(*content) -> dict:
    return choice_with(logprobs={"content": list(content)})


def call_with(function) -> dict:
    return message_with(tool_calls=[{"type": "function", "function": function}])


DEEP = b"[" * 100_000 + b"]" * 100_000
MALFORMED = [  # (what the server sends, what the ServerError names)
    (b"", "not JSON"),
    (b"not json", "not JSON"),
    (b'{"choices": [', "not JSON"),
    (b'\xff\xfe{"choices": []}', "not UTF-8"),
    (b'{"choices": [{"message": {"content": "\xc3("}}]}', "not UTF-8"),
    (DEEP, "nested"),
    (b'{"a": ' * 50_000 + b"1" + b"}" * 50_000, "nested"),
    (b"[" * 40 + b"]" * 40, "nested"),
    (b"1" * 5000, "digits"),
    (None, "not a chat completion"),
    (5, "not a chat completion"),
    ("open(1)", "not a chat completion"),
    ([OK_REPLY], "not a chat completion"),
    ({}, "choices is missing"),
    ({"choices": None}, "choices must be"),
    ({"choices": {}}, "choices must be"),
    ({"choices": []}, "choices must be"),
    ({"choices": [5]}, r"choices\[0\] must be"),
    ({"choices": [{}]}, r"choices\[0\].message is missing"),
    ({"choices": [{"message": None}]}, r"choices\[0\].message must be"),
    ({"choices": [{"message": "open(1)"}]}, r"choices\[0\].message must be"),
    (message_with(content=5), "content must be"),
    (message_with(content=["open(1)"]), "content must be"),
    (b'{"choices": [{"message": {"content": "\\ud800"}}]}', "surrogate"),
    (message_with(tool_calls="search"), "tool_calls must be"),
    (message_with(tool_calls=[5]), r"tool_calls\[0\] must be"),
    (message_with(tool_calls=[{}]), r"tool_calls\[0\].function is missing"),
    (call_with("search"), "function must be"),
    (call_with({}), "name is missing"),
    (call_with({"name": 5, "arguments": "{}"}), "name must be"),
    (call_with({"name": "search", "arguments": 5}), "arguments must be"),
    (choice_with(logprobs="high"), "logprobs must be"),
    (choice_with(logprobs={"content": 5}), "logprobs.content must be"),
    (logprobs_with(5), r"logprobs.content\[0\] must be"),
    (logprobs_with({"token": "a"}), r"content\[0\].logprob is missing"),
    (logprobs_with({"token": "a", "logprob": "-1"}), "logprob must be"),
    (logprobs_with({"token": "a", "logprob": True}), "logprob must be"),
    (b'{"choices": [{"message": {"content": "a"}, "logprobs": {"content": [{"logprob": NaN}]}}]}', "logprob must be"),
    (logprobs_with({"token": 5, "logprob": -1.0}), "token must be"),
    (logprobs_with({"token": "token_id:x", "logprob": -1.0}), "token_id:x"),
    (choice_with(token_ids="5"), "token_ids must be"),
    (choice_with(token_ids=[1.5, 2]), r"token_ids\[0\] must be"),
    (choice_with(token_ids=[True, 2]), r"token_ids\[0\] must be"),
    (choice_with(token_ids=[1, 2, 3]), "3 token ids but 2 log-probs"),
    ({**OK_REPLY, "prompt_token_ids": {"a": 1}}, "prompt_token_ids must be"),
    ({**OK_REPLY, "prompt_token_ids": ["1"]}, r"prompt_token_ids\[0\] must be"),
]


@pytest.mark.parametrize("body, named", MALFORMED, ids=[f"malformed-{i}" for i in range(len(MALFORMED))])
def test_a_malformed_reply_is_a_server_error_naming_the_fault(misbehaving, body, named):
    agent = agent_for(misbehaving(send(body)))
    with pytest.raises(ServerError, match=named) as caught:
        agent.act_batch_recorded(["obs"], [INFO])
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 400  # one line a user can read
    agent.close()


@pytest.mark.parametrize("reply, text, gen_ids", [
    (OK_REPLY, "open(1)", [5, 7]),
    (message_with(content=None), "", [5, 7]),
    (call_with({"name": "search", "arguments": '{"query": "Edra"}'}),
     '<tool_call>{"name": "search", "arguments": {"query": "Edra"}}</tool_call>', [5, 7]),
    (call_with({"name": "search", "arguments": "{not json"}),  # the env reports bad arguments itself
     '<tool_call>{"name": "search", "arguments": "{not json"}</tool_call>', [5, 7]),
    (call_with({"name": "search", "arguments": "[" * 5000 + "]" * 5000}),
     '<tool_call>{"name": "search", "arguments": "' + "[" * 5000 + "]" * 5000 + '"}</tool_call>', [5, 7]),
    (call_with({"name": "search", "arguments": None}), '<tool_call>{"name": "search", "arguments": {}}</tool_call>',
     [5, 7]),
    (choice_with(logprobs=None), "open(1)", []),
    (choice_with(token_ids=[9, 8]), "open(1)", [9, 8]),
], ids=["plain", "no-content", "tool-call", "bad-arguments", "deep-arguments", "null-arguments", "no-logprobs",
        "vllm-token-ids"])
def test_a_well_formed_reply_still_becomes_the_action(misbehaving, reply, text, gen_ids):
    agent = agent_for(misbehaving(send(reply)))
    (action,), (step,) = agent.act_batch_recorded(["obs"], [INFO])
    assert action == step.text == text and step.gen_ids == gen_ids
    assert len(step.logprobs) == (0 if reply["choices"][0].get("logprobs") is None else 2)
    agent.close()


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
FIELDS = [("choices",), ("choices", 0), ("choices", 0, "message"), ("choices", 0, "message", "content"),
          ("choices", 0, "message", "tool_calls"), ("choices", 0, "logprobs"), ("choices", 0, "logprobs", "content"),
          ("choices", 0, "logprobs", "content", 0), ("choices", 0, "logprobs", "content", 0, "logprob"),
          ("choices", 0, "logprobs", "content", 1, "token"), ("choices", 0, "token_ids"), ("prompt_token_ids",),
          ("choices", 0, "message", "tool_calls", 0), ("choices", 0, "message", "tool_calls", 0, "function"),
          ("choices", 0, "message", "tool_calls", 0, "function", "name"),
          ("choices", 0, "message", "tool_calls", 0, "function", "arguments")]


def replaced(field: tuple, value) -> object:
    """A tool-call reply with the value at ``field`` replaced (``()``: the whole reply)."""
    reply = json.loads(json.dumps(call_with({"name": "search", "arguments": "{}"})))
    if not field:
        return value
    holder = reply
    for key in field[:-1]:
        holder = holder[key]
    holder[field[-1]] = value
    return reply


@pytest.fixture(scope="module")
def replying():
    """One server for many examples: it sends whatever reply its ``answer`` holds now."""
    server = MisbehavingServer(send())
    agent = agent_for(server)
    yield server, agent
    agent.close()
    server.close()


@settings(max_examples=150, deadline=None)
@given(field=st.sampled_from([(), *FIELDS]), value=JSON_VALUES)
def test_any_json_anywhere_in_a_reply_is_an_action_or_a_server_error(replying, field, value):
    server, agent = replying
    server.answer = send(json.dumps(replaced(field, value)).encode())  # NaN and Infinity too, as servers write them
    try:
        (action,), (step,) = agent.act_batch_recorded(["obs"], [INFO])
    except ServerError as err:
        assert "\n" not in str(err)
    else:
        assert isinstance(action, str) and action == step.text
        assert all(isinstance(i, int) for i in step.gen_ids + step.prompt_ids)
        assert not step.gen_ids or len(step.gen_ids) == len(step.logprobs)
        assert not step.logprobs.isnan().any()


@pytest.mark.parametrize("answer", [trickling_body, endless_chunks, trickling_headers, silence],
                         ids=["trickling-body", "endless-chunked-body", "trickling-headers", "no-answer"])
@pytest.mark.parametrize("retries", [0, 1])
def test_a_slow_or_endless_reply_is_cut_off_at_one_deadline_per_try(misbehaving, answer, retries):
    server = misbehaving(answer)
    agent = agent_for(server, timeout_s=0.5, retries=retries)
    started = time.monotonic()
    with pytest.raises(ServerUnavailable, match=rf"no complete answer within 0.5 s\) after {retries + 1} tries"):
        agent.act_batch_recorded(["obs"], [INFO])
    # Each try ends at its deadline; the server would have gone on for 30 s.
    assert time.monotonic() - started < (retries + 1) * 0.5 + 1.5
    assert len(server.requests) == retries + 1
    agent.close()


@pytest.mark.parametrize("answer", [
    send(b" " * 5000),  # Content-Length says how long: refused before it is read
    raw(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + b" " * 5000),  # no length: counted as it comes
    raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"3e8\r\n" + b" " * 1000 + b"\r\n" * 1 + b"3e8\r\n"
        + b" " * 1000 + b"\r\n0\r\n\r\n"),
    send(b" " * 5000, status=500),  # an error's body is capped as well
], ids=["content-length", "until-close", "chunked", "error-body"])
def test_a_reply_longer_than_max_reply_bytes_is_refused(misbehaving, answer):
    agent = agent_for(misbehaving(answer), max_reply_bytes=1500)
    with pytest.raises(ServerError, match=r"more than 1,500 bytes \(max_reply_bytes\)"):
        agent.act_batch_recorded(["obs"], [INFO])
    agent.close()


def test_a_reply_of_exactly_max_reply_bytes_is_read(misbehaving):
    size = len(json.dumps(OK_REPLY).encode())
    agent = agent_for(misbehaving(send()), max_reply_bytes=size)
    assert agent.act_batch_recorded(["obs"], [INFO])[0] == ["open(1)"]
    agent.close()


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_is_not_followed_and_the_api_key_goes_nowhere_else(misbehaving, status):
    elsewhere = misbehaving(send())
    target = elsewhere.base_url + "/chat/completions"
    server = misbehaving(send(b"", status, {"Location": target}))
    agent = agent_for(server, api_key="sk-secret")
    with pytest.raises(ServerError, match=rf"redirect \({status}\) to '{re.escape(target)}'"):
        agent.act_batch_recorded(["obs"], [INFO])
    assert server.requests[0][2]["Authorization"] == "Bearer sk-secret"  # the server asked was sent it
    assert elsewhere.requests == []  # and the address it named never heard from the agent
    agent.close()


@pytest.mark.parametrize("answer, named", [
    (raw(b"garbage\r\n\r\n"), "BadStatusLine"),
    (raw(b""), "RemoteDisconnected"),
    (raw(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"choices\""),
     "ended after 10 bytes, before its Content-Length"),
    (raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"), "IncompleteRead"),
    (raw(b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 101 + b"\r\n"), "more than 100 headers"),
    (raw(b"HTTP/1.1 200 OK\r\nX-A: " + b"b" * 70_000 + b"\r\n\r\n"), "LineTooLong"),
], ids=["status-line", "nothing", "short-body", "bad-chunk", "too-many-headers", "long-header"])
def test_a_broken_http_reply_is_retried_then_a_server_error(misbehaving, answer, named):
    server = misbehaving(answer)
    agent = agent_for(server, retries=1)
    with pytest.raises(ServerUnavailable, match=rf"{named}.* after 2 tries") as caught:
        agent.act_batch_recorded(["obs"], [INFO])
    assert len(server.requests) == 2 and "\n" not in str(caught.value)
    agent.close()


@pytest.mark.parametrize("body, named", [
    (b"[" * 100_000, "refused POST /chat/completions \\(400\\): \\[\\[\\["),
    (b"\xff\xfe bad", "refused POST /chat/completions \\(400\\): \ufffd\ufffd bad"),
    ({"error": {"message": "max_tokens is too large"}}, "\\(400\\): max_tokens is too large"),
    ({"detail": ["field", "required"]}, "\\(400\\): \\['field', 'required'\\]"),
    (b"line one\nline two", "\\(400\\): line one line two"),
], ids=["deep", "not-utf8", "openai-error", "fastapi-detail", "two-lines"])
def test_an_error_reply_of_any_shape_is_one_line(misbehaving, body, named):
    agent = agent_for(misbehaving(send(body, status=400)))
    with pytest.raises(ServerError, match=named) as caught:
        agent.act_batch_recorded(["obs"], [INFO])
    assert "\n" not in str(caught.value)
    agent.close()


@pytest.mark.parametrize("listing, named", [
    ([], "answered GET /models with a list of 0"),
    ({}, "data is missing"),
    ({"data": 5}, "data must be a list"),
    ({"data": [5]}, r"data\[0\] must be an object"),
    ({"data": [{"id": 5}]}, r"data\[0\].id must be a string"),
    ({"data": [{"name": "m"}]}, r"data\[0\].id is missing"),
    ({"data": [{"id": "other"}]}, r"does not serve model 'm'; it serves \['other'\]"),
], ids=["list", "no-data", "data-int", "entry-int", "id-int", "no-id", "other-model"])
def test_a_malformed_model_list_is_a_server_error(misbehaving, listing, named):
    with pytest.raises(ServerError, match=named):
        ServerAgent(misbehaving(send(listing)).base_url, "m", retries=0, timeout_s=1)


def busy_then_ok(status: int, headers: dict[str, str]):
    answers = iter([send({"error": "busy"}, status, headers), send()])
    return lambda handler: next(answers)(handler)


@pytest.mark.parametrize("status, headers, least, most", [
    (429, {"Retry-After": "1"}, 1.0, 2.0),
    (503, {"Retry-After": "1"}, 1.0, 2.0),
    (429, {"Retry-After": "100000"}, 0.3, 1.3),  # capped at max_retry_after_s
    (429, {"Retry-After": "soon"}, 0.05, 0.9),  # unreadable: the backoff
    (429, {}, 0.05, 0.9),
    (500, {"Retry-After": "1"}, 0.05, 0.9),  # a 500 asks nothing of the client
], ids=["429-seconds", "503-seconds", "429-capped", "429-unreadable", "429-without", "500-ignored"])
def test_retry_after_is_honoured_within_a_cap(misbehaving, status, headers, least, most):
    server = misbehaving(busy_then_ok(status, headers))
    agent = agent_for(server, retries=1, backoff_s=0.05, max_retry_after_s=0.3 if "100000" in str(headers) else 60)
    assert agent.act_batch_recorded(["obs"], [INFO])[0] == ["open(1)"]
    gap = server.requests[1][3] - server.requests[0][3]
    assert least <= gap < most
    agent.close()


def test_retry_after_reads_an_http_date():
    from datetime import datetime, timezone

    from agents.server import retry_after_s

    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
    assert retry_after_s("Wed, 01 Jan 2025 12:00:07 GMT", now=now) == 7.0
    assert retry_after_s("Wed, 01 Jan 2025 11:00:00 GMT", now=now) == 0.0  # past: no wait
    assert [retry_after_s(v, now=now) for v in ("-1", "1.5", "", "1e9", "Jan 2025")] == [None] * 5


@pytest.mark.parametrize("answer, named", [
    (send({"detail": "boom"}, 500),
     r"gave no usable answer to POST /chat/completions \(HTTP 500: boom\) after 4 tries"),
    (send({"detail": "bad field"}, 400), r"refused POST /chat/completions \(400\): bad field"),
    (send({"choices": [{"message": "open(1)"}]}), r"choices\[0\].message must be an object"),
    (send(b"", 302, {"Location": "http://example.invalid/v1"}), "redirect \\(302\\)"),
], ids=["http-500", "http-400", "malformed", "redirect"])
def test_rollout_shows_one_line_for_a_server_fault(misbehaving, capsys, answer, named):
    from mosaic_gym.cli import main

    def models_then(handler):
        (send({"data": [{"id": "m"}]}) if handler.path.endswith("/models") else answer)(handler)

    server = misbehaving(models_then)
    assert main(["rollout", "--agent", server.base_url, "--model", "m", "--site-size", str(SITE_SIZE)]) == 2
    err = capsys.readouterr().err
    assert re.search(named, err) and "Traceback" not in err and err.count("\n") == 1


def test_eval_shows_one_line_for_a_malformed_reply(misbehaving, capsys, tmp_path):
    from mosaic_gym.cli import main

    def models_then(handler):
        (send({"data": [{"id": "m"}]}) if handler.path.endswith("/models") else send([OK_REPLY]))(handler)

    server = misbehaving(models_then)
    assert main(["eval", "--agent", server.base_url, "--model", "m", "--site-size", str(SITE_SIZE), "--tasks", "1",
                 "--n", "1", "--ks", "1", "--ts", "2", "--num-envs", "1", "--no-progress", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "it is a list of 1, not an object" in err and "Traceback" not in err and err.count("\n") == 1
