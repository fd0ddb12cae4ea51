"""LLMAgent's context store: a step takes the keys another session already computed for its prompt's prefix
(a continuation starting where its rollout ran), feeds only the rest, and acts as if it had fed it all."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import envs  # noqa: F401  (registers the environments)
from agents.llm import LLMAgent
from agents.models import build_tiny_model, default_texts, load_model, train_tokenizer
from algos.credit.estimators import likelihood_contributions, rollout_contributions
from algos.rollout import Collector, Request
from envs.actions import format_action
from envs.prompts import render_transcript
from helpers import float32_tol

SYSTEM = "You browse an offline encyclopedia. Call one tool per turn."
CANDIDATES = ['search("Edra Vane")', "open(1)", "open(2)", 'answer("Oskarde")']


def _messages(turns: int) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Question: where was Edra Vane born?"}]
    for k in range(turns):
        messages += [{"role": "assistant", "content": CANDIDATES[k % 3]},
                     {"role": "user", "content": f"[Result {k}]\n{k + 1}. Edra Vane /wiki/Edra_Vane born in Oskarde"}]
    return messages


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    texts = [render_transcript(_messages(4)) + " " + c for c in CANDIDATES] * 20
    tokenizer = train_tokenizer(texts, vocab_size=400)
    return build_tiny_model(tokenizer, "1m", seed=0).eval(), tokenizer


def _fed(model):
    """Token counts of every forward pass (input_ids' second dimension times rows)."""
    fed: list[int] = []
    handle = model.register_forward_pre_hook(lambda m, a, kw: fed.append(kw["input_ids"].numel()), with_kwargs=True)
    return fed, handle


def _step(agent, env_index: int, session_id: int, turns: int):
    messages = _messages(turns)
    info = {"session_id": session_id, "messages": messages, "candidates": CANDIDATES, "env_index": env_index}
    return agent.act_batch_recorded([render_transcript(messages)], [info])[1][0]


def _shared(a: list[int], b: list[int]) -> int:
    """How many leading ids two prompts share (a prompt's last token may merge with what follows it)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _tol(step) -> float:
    return float32_tol(len(step.prompt_ids) + sum(map(len, step.candidate_ids)), 10.0) * 8


def test_a_new_session_starts_from_a_context_another_session_ran(tiny):
    # Env 0 runs one session 4 steps; then env 1 opens a session two turns further (a continuation from a
    # snapshot): with the store it feeds only what env 0's last context does not cover, and chooses with the
    # probabilities of an agent that fed everything.
    model, tokenizer = tiny
    runs, fed_by_run = [], []
    for store in (1 << 16, 0):
        agent = LLMAgent(model, tokenizer, mode="choose", seed=3, prefix_cache_tokens=store)
        steps = [_step(agent, 0, 0, k) for k in range(4)]
        fed, handle = _fed(model)
        steps += [_step(agent, 1, 0, 5), _step(agent, 1, 0, 6)]
        handle.remove()
        runs.append(steps)
        fed_by_run.append(fed)
    (with_store, without) = runs
    opened, last_of_env0 = with_store[4], with_store[3]
    assert fed_by_run[0][0] == len(opened.prompt_ids) - _shared(opened.prompt_ids, last_of_env0.prompt_ids) < 80
    assert fed_by_run[1][0] == len(opened.prompt_ids)  # (without the store: the whole prompt)
    for a, b in zip(with_store, without):
        assert (a.text, a.prompt_ids, a.choice) == (b.text, b.prompt_ids, b.choice)
        torch.testing.assert_close(a.choice_probs, b.choice_probs, atol=_tol(a), rtol=0)
        torch.testing.assert_close(a.logprobs, b.logprobs, atol=_tol(a), rtol=0)


def test_a_session_takes_a_longer_context_than_its_own_cache(tiny):
    # Two envs in the same state, one a step ahead: the one behind catches up on the keys the other computed.
    model, tokenizer = tiny
    agent = LLMAgent(model, tokenizer, mode="choose", seed=3, score_cache_choices=0)
    for k in range(3):
        _step(agent, 0, 0, k)
    _step(agent, 1, 0, 0)
    fed, handle = _fed(model)
    step = _step(agent, 1, 0, 3)
    handle.remove()
    ahead = _step(agent, 2, 0, 2).prompt_ids  # (env 0's last prompt, as env 2 sees it)
    assert fed[0] == len(step.prompt_ids) - _shared(step.prompt_ids, ahead)


def test_the_store_keeps_its_capacity_and_drops_prefixes_of_longer_contexts(tiny):
    model, tokenizer = tiny
    agent = LLMAgent(model, tokenizer, mode="choose", seed=3, prefix_cache_tokens=600)
    lengths = [len(_step(agent, 0, 0, k).prompt_ids) for k in range(6)]
    stored = [len(key) for key in agent._prefixes._entries]
    assert stored == [lengths[-1]] if lengths[-1] <= 600 else stored == []  # (one session: only its last context)
    for e in range(1, 8):
        _step(agent, e, 0, e % 3)
    assert sum(len(key) for key in agent._prefixes._entries) <= 600


def _fork_env():
    return gym.make("mosaic/WebQA-Fork-v0", site_size=120, hops=2, families=["compare"], compare_answer="year",
                    max_steps=8, candidates=True, session_max_tokens=700)


def test_continuations_with_the_store_equal_continuations_without_it():
    # Mosaic's rollout estimator on a fork env: a group's rollouts and every continuation from their session
    # boundaries run the same steps, with the same probabilities to float rounding, and give the same D, with
    # the store on (continuations start from their rollout's keys) as with it off; and they feed fewer tokens.
    torch.set_num_threads(1)
    env = _fork_env()
    model, tokenizer = load_model("tiny-100k", texts=default_texts(env=env), seed=0)
    model.eval()
    task = env.unwrapped.tasks[0].id
    results, fed_by_run = [], []
    for store in (1 << 16, 0):
        agent = LLMAgent(model, tokenizer, mode="choose", seed=0, length_normalize=True, prefix_cache_tokens=store)
        collector = Collector(_fork_env, 4)
        fed, handle = _fed(model)
        group = collector.run(agent, [Request(seed=s, options={"task_id": task}) for s in range(4)],
                              record_snapshots=True)
        runs: list = []
        original = collector.run
        collector.run = lambda *a, **k: runs.extend(original(*a, **k)) or runs[-len(a[1]):]
        d = rollout_contributions(group, collector, agent, continuations=2, seed=5)
        handle.remove()
        fed_by_run.append(sum(fed))
        results.append((group + runs, d))
    (with_store, d_with), (without, d_without) = results
    assert sum(t.num_sessions for t in with_store) > len(with_store)  # (boundaries to continue from)
    assert len(with_store) == len(without)
    for a, b in zip(with_store, without):
        assert a.reward == b.reward and sorted(a.steps) == sorted(b.steps)
        for sid in a.steps:
            for x, y in zip(a.steps[sid], b.steps[sid], strict=True):
                assert (x.text, x.prompt_ids, x.choice) == (y.text, y.prompt_ids, y.choice)
                if x.choice_probs is not None:
                    torch.testing.assert_close(x.choice_probs, y.choice_probs, atol=_tol(x), rtol=0)
    for a, b in zip(d_with, d_without):
        np.testing.assert_array_equal(a, b)
    assert fed_by_run[0] < fed_by_run[1]


def test_the_likelihood_estimator_through_the_agents_store_equals_its_plain_pass():
    # Mosaic's likelihood estimator scores the gold answer after the contexts around each session: through the
    # acting agent (LLMAgent.score_after, from the keys its rollouts left) the same D as the plain batched pass
    # over every context, to float rounding, while feeding a fraction of the tokens.
    torch.set_num_threads(1)
    env = _fork_env()
    model, tokenizer = load_model("tiny-100k", texts=default_texts(env=env), seed=0)
    model.eval()
    task = env.unwrapped.tasks[1]
    agent = LLMAgent(model, tokenizer, mode="choose", seed=0, length_normalize=True)
    group = Collector(_fork_env, 4).run(agent, [Request(seed=s, options={"task_id": task.id}) for s in range(4)])
    assert sum(t.num_sessions for t in group) > len(group)
    fed, handle = _fed(model)
    through_agent = likelihood_contributions(group, model, agent.encode_action, task.answer,
                                             score_after=agent.score_after)
    handle.remove()
    fed_by_agent = sum(fed)
    fed, handle = _fed(model)
    plain = likelihood_contributions(group, model, agent.encode_action, task.answer)
    handle.remove()
    assert fed_by_agent < sum(fed) / 2
    # Each D is two sums of the answer's token log-probs (each of magnitude at most about log(vocab) = 8 here),
    # every one of them a float32 sum over at most the longest context's keys.
    answer = agent.encode_action(format_action("answer", task.answer))
    longest = max(len(s.prompt_ids) + len(s.gen_ids) for t in group for steps in t.steps.values() for s in steps)
    for a, b in zip(through_agent, plain):
        np.testing.assert_allclose(a, b, rtol=0, atol=2 * len(answer) * float32_tol(longest + len(answer), 8.0))
    # And each score is the plain forward pass's over the context and the answer.
    contexts = [list(t.steps[sid][k].prompt_ids) for t in group for sid in t.steps for k in (0, -1)]
    for context, score in zip(contexts, agent.score_after(contexts, answer)):
        with torch.no_grad():
            logits = model(torch.tensor([context + answer])).logits[0, len(context) - 1 : -1].float()
        direct = float(torch.log_softmax(logits, -1).gather(1, torch.tensor(answer)[:, None]).sum())
        assert score == pytest.approx(direct, abs=len(answer) * float32_tol(len(context) + len(answer), 8.0))


def test_score_after_refuses_empty_inputs(tiny):
    agent = LLMAgent(*tiny, mode="choose")
    with pytest.raises(ValueError, match="at least one id"):
        agent.score_after([[1, 2, 3]], [])
    with pytest.raises(ValueError, match="non-empty context"):
        agent.score_after([[1, 2], []], [4])
    assert agent.score_after([], [4]) == []
