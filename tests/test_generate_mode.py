"""Generate mode end to end, on the code path a pretrained instruct model takes (SmolLM2): a model folder whose
tokenizer has a chat template, the worked exchange in every prompt, a warm start on oracle demonstrations
teacher-forced through that template, and an RL iteration whose sampled tokens' recorded log-probs equal a
fresh forward pass (so the first importance ratio of every token is 1)."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import algos.learn.train
from agents.llm import LLMAgent
from agents.models import load_model, make_tiny
from algos.learn.config import PGConfig, TrainConfig
from algos.logprobs import sequence_logprobs
from algos.rollout import Collector, Request, session_sequences
from envs.prompts import EXAMPLE_EXCHANGE

from helpers import SITE_SIZE, TEST_MODEL

# A ChatML template like SmolLM2's and Qwen's: role markers written as plain text, a turn closed by its marker.
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
ENV = {"site_size": SITE_SIZE, "hops": 1, "max_steps": 4, "candidates": False, "chunk_tokens": 96,
       "session_max_tokens": 500}


@pytest.fixture(scope="module")
def chat_model_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("chat-model")
    env = gym.make("mosaic/WebQA-v0", **ENV)
    from agents.models import default_texts

    texts = default_texts(episodes=8, env=env) + [m["content"] for m in EXAMPLE_EXCHANGE]
    make_tiny(folder, texts, size=TEST_MODEL.removeprefix("tiny-"), seed=0, chat_template=CHATML)
    return folder


@pytest.fixture(scope="module")
def run(chat_model_folder, tmp_path_factory) -> Path:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("generate-run")
    config = TrainConfig(
        algo="mosaic", estimator="likelihood", env_kwargs=dict(ENV), model=str(chat_model_folder), mode="generate",
        prompt_examples=True, max_new_tokens=12, bc_episodes=6, bc_epochs=2, bc_lr=3e-3, iterations=1,
        tasks_per_iter=2, group_size=2, eval_episodes=1, eval_initial=True, num_envs=4, seed=1, out=str(out),
        pg=PGConfig(lr=1e-3))
    try:
        algos.learn.train.train(config, log=lambda *a: None)
    finally:
        torch.set_num_threads(threads)
    return out


def test_the_prompt_is_the_chat_template_with_the_worked_exchange(chat_model_folder):
    model, tokenizer = load_model(str(chat_model_folder))
    env = gym.make("mosaic/WebQA-v0", **ENV)
    obs, info = env.reset(seed=0)
    agent = LLMAgent(model, tokenizer, max_new_tokens=4, examples=EXAMPLE_EXCHANGE)
    (_,), (step,) = agent.act_batch_recorded([obs], [info])
    prompt = tokenizer.decode(step.prompt_ids)
    # The system message first, then the exchange, then the env's own first message, each in the template.
    assert prompt.startswith("<|im_start|>system\n" + info["messages"][0]["content"])
    first_call = next(m["content"] for m in EXAMPLE_EXCHANGE if m["role"] == "assistant")
    assert prompt.index(first_call) < prompt.index(info["messages"][1]["content"])
    assert prompt.endswith("<|im_start|>assistant\n")
    plain = LLMAgent(model, tokenizer, max_new_tokens=4).act_batch_recorded([obs], [info])[1][0]
    assert first_call not in tokenizer.decode(plain.prompt_ids)


def test_a_generate_mode_run_warm_starts_and_takes_an_rl_step_with_ratios_of_one(run):
    summary = json.loads((run / "summary.json").read_text())
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 1 and metrics[0]["tokens"] > 0
    # One epoch: the learner re-scores exactly the sampled tokens with the weights that sampled them.
    assert abs(metrics[0]["approx_kl"]) < 1e-4 and metrics[0]["clip_fraction"] == 0.0
    for key in ("success_initial", "success_warm_start", "success_final"):
        assert 0.0 <= summary[key]["metrics"]["parse_rate"] <= 1.0
    # The warm start cloned demonstrations made of calls, and its loss fell (what it teaches a pretrained model
    # in a few steps takes a random tiny one far more: docs/smollm2.md's runs measure the parse rate it buys).
    assert summary["demo_metrics"]["parse_rate"] == 1.0
    assert summary["warm_start_loss"][1] < summary["warm_start_loss"][0]


def test_the_trained_models_recorded_logprobs_equal_a_fresh_forward_pass(run):
    model, tokenizer = load_model(str(run / "final"))
    assert tokenizer.chat_template == CHATML
    make = lambda: gym.make("mosaic/WebQA-v0", **ENV)  # noqa: E731
    agent = LLMAgent(model, tokenizer, temperature=1.0, max_new_tokens=12, seed=5, examples=EXAMPLE_EXCHANGE)
    runs = Collector(make, 3).run(agent, [Request(seed=s, options={}) for s in range(3)])
    seqs = [s for t in runs for rows in session_sequences(t).values() for s in rows]
    assert sum(s.num_generated for s in seqs) > 0
    with torch.no_grad():
        logp, mask = sequence_logprobs(model, seqs, torch.device("cpu"))
    for row, s in enumerate(seqs):
        generated = mask[row, : len(s.token_ids)].numpy()  # logp[row, t]: token t given the tokens before it
        np.testing.assert_allclose(logp[row, : len(s.token_ids)].numpy()[generated],
                                   np.array(s.old_logprobs)[generated], atol=2e-4)


def test_a_lora_run_trains_only_its_adapters_and_saves_them_merged(chat_model_folder, tmp_path):
    out = tmp_path / "lora"
    config = TrainConfig(
        algo="broadcast", env_kwargs=dict(ENV), model=str(chat_model_folder), mode="generate", prompt_examples=True,
        max_new_tokens=8, bc_episodes=4, bc_epochs=1, bc_lr=3e-3, iterations=1, tasks_per_iter=1, group_size=2,
        eval_episodes=1, num_envs=2, seed=2, out=str(out), lora_rank=4, pg=PGConfig(lr=1e-3))
    algos.learn.train.train(config, log=lambda *a: None)
    initial, _ = load_model(str(out / "model"))
    final, _ = load_model(str(out / "final"))
    saved = torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=False)["model"]
    adapters = {k: v for k, v in saved.items() if "lora_" in k}
    assert adapters and any(float(v.abs().sum()) > 0 for k, v in adapters.items() if "lora_B" in k)
    # The base weights never moved; the merged model differs from the initial one by the adapters alone.
    base = {k.removeprefix("base_model.model.").replace(".base_layer", ""): v for k, v in saved.items()
            if "lora_" not in k}
    start = initial.state_dict()
    assert all(torch.equal(base[k], start[k]) for k in start if k in base) and len(base) >= len(start) - 1
    assert not any("lora" in k for k in final.state_dict())
    moved = [k for k, v in final.state_dict().items() if not torch.equal(v, start[k])]
    assert moved and all(k.endswith("_proj.weight") for k in moved)
