"""ServerAgent against a real ``transformers serve`` (a tiny model saved by the test, served on a loopback
port): whole episodes, the messages as the server received them, a wrong model name, a killed server."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import gymnasium as gym
import pytest

import envs  # noqa: F401  (registers the environments)
from algos.rollout import Collector, Request

from conftest import SITE_SIZE

pytest.importorskip("fastapi", reason="the ServerAgent tests need transformers serve: pip install 'mosaic-gym[serving]'")

from agents.server import ServerAgent, ServerError, ServerUnavailable, TransformersServer  # noqa: E402

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
    with pytest.raises(ServerUnavailable, match=r"127\.0\.0\.1:9/v1 did not answer GET /models"):
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
    with pytest.raises(ServerUnavailable, match=r"did not answer POST /chat/completions .* after 3 tries"):
        agent.act_batch([obs], [info])
    assert time.monotonic() - started < 10
    agent.close()
