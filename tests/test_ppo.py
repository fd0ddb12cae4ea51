"""The PPO update that says what it did (epochs, minibatches, target KL, entropy bonus, the post-step metrics),
the summary decision the env offers, the summary probe, dynamic sampling, and the new `mosaic train` flags."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import envs  # noqa: F401  (registers the environments)
from agents import OracleAgent
from agents.llm import LLMAgent
from agents.models import build_tiny_model, train_tokenizer
from agents.records import TrainSequence
from algos.learn.config import PGConfig, TrainConfig
from algos.learn.pg import PolicyGradient, measured_share, minibatch_split
from algos.logprobs import run_key, sequence_logprobs
from algos.evaluate.probes import probe_probabilities, summary_states
from helpers import SITE_SIZE, TEST_MODEL

CPU = torch.device("cpu")
TEXTS = ['Question: where was Edra Vane born? search("Edra Vane") open(1) answer("Oskarde")',
         'Question: who founded Tolis Marr? search("Tolis Marr") open(2) answer("Ikel Osk")'] * 20
SUMMARY_ENV = {"site_size": SITE_SIZE, "hops": 1, "candidates": True, "session_max_tokens": 600,
               "summary_choices": True}


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(TEXTS, vocab_size=300)


@pytest.fixture
def model(tokenizer):
    return build_tiny_model(tokenizer, "1m", seed=0)


def _batch(model, tokenizer, advantages=(1.0, -1.0, 0.5, -0.5)) -> list[TrainSequence]:
    """Token sequences with their sampling-time log-probs (the model's own), one advantage each."""
    out = []
    for k, adv in enumerate(advantages):
        prompt = tokenizer(f"Question {k}: where was Edra Vane born?")["input_ids"]
        action = tokenizer(f' search("Edra Vane {k}") open({k})')["input_ids"]
        ids = prompt + action
        seq = TrainSequence(ids, [False] * len(prompt) + [True] * len(action), [0.0] * len(ids), advantage=adv)
        with torch.no_grad():
            logp, _ = sequence_logprobs(model, [seq], CPU)
        seq.old_logprobs = logp[0].tolist()
        out.append(seq)
    return out


# The update --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("epochs,minibatches", [(1, 1), (3, 1), (2, 2)])
def test_the_update_takes_epochs_times_minibatches_steps_and_measures_the_kl_after_them(model, tokenizer, epochs,
                                                                                       minibatches):
    batch = _batch(model, tokenizer)
    pg = PolicyGradient(model, PGConfig(lr=1e-2, epochs=epochs, minibatches=minibatches))
    stats = pg.update(batch)
    assert stats["optimizer_steps"] == epochs * minibatches
    # kl_after, recomputed here from the updated model's log-probs: the k3 estimate per generated token.
    with torch.no_grad():
        logp, mask = sequence_logprobs(pg.model, batch, CPU)
    old = torch.zeros_like(logp)
    for b, s in enumerate(batch):
        old[b, :len(s.old_logprobs)] = torch.tensor(s.old_logprobs)
    diff = torch.where(mask, logp - old, 0.0)
    k3 = (torch.expm1(diff) - diff)[mask]
    assert stats["kl_after"] == pytest.approx(float(k3.mean()), rel=1e-4, abs=1e-7)
    assert stats["kl_after"] > 0
    # Direction: what had a positive advantage rose against what had a negative one (the sequences share most
    # tokens, so a step moves both the same way too; only their difference is the gradient's to first order).
    assert stats["dlogp_pos"] > stats["dlogp_neg"]
    assert stats["dlogp_zero"] is None  # no sequence of advantage 0 here
    if epochs * minibatches > 1:
        assert stats["approx_kl"] > 0  # measured by the passes after the first step
    else:
        assert stats["approx_kl"] == 0.0


def test_the_measuring_pass_reads_the_share_asked_for_and_never_changes_the_step(model, tokenizer):
    batch = _batch(model, tokenizer, advantages=(1.0, -1.0, 0.5, -0.5, 0.25, -0.25, 0.75, -0.75))
    learners = {share: PolicyGradient(copy.deepcopy(model), PGConfig(lr=1e-2, epochs=2, measure_fraction=share))
                for share in (1.0, 0.25, 0.0)}
    stats = {share: pg.update(batch) for share, pg in learners.items()}
    # The measurement is a pass without gradient: the weights after the update are the same whatever it reads.
    weights = [torch.cat([p.flatten() for p in pg.model.parameters()]) for pg in learners.values()]
    assert all(torch.equal(weights[0], w) for w in weights[1:])
    assert stats[1.0]["loss"] == stats[0.0]["loss"] and stats[1.0]["approx_kl"] == stats[0.0]["approx_kl"]
    # 0: no pass, and none of its metrics (a reader must not mistake them for a measured 0).
    assert not {"kl_after", "entropy", "dlogp_pos", "units_measured"} & set(stats[0.0])
    # A quarter: two of the eight sequences (each its own run), evenly spaced; kl_after over their units only.
    quarter = [batch[0], batch[4]]
    assert stats[0.25]["units_measured"] == sum(s.num_units for s in quarter) < stats[1.0]["units_measured"]
    with torch.no_grad():
        logp, mask = sequence_logprobs(learners[0.25].model, quarter, CPU)
    old = torch.zeros_like(logp)
    for b, s in enumerate(quarter):
        old[b, :len(s.old_logprobs)] = torch.tensor(s.old_logprobs)
    diff = torch.where(mask, logp - old, 0.0)
    assert stats[0.25]["kl_after"] == pytest.approx(float((torch.expm1(diff) - diff)[mask].mean()), rel=1e-4,
                                                    abs=1e-7)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=40), st.floats(0, 1))
def test_the_measured_share_is_whole_runs_evenly_spaced_and_at_least_the_share(tokens, share):
    # (choice sequences of one task and prompt share a run; token sequences are each their own)
    seqs = [TrainSequence([1, t], [False, True], [0.0, 0.0]) for t in tokens]
    picked = measured_share(seqs, share)
    assert len({id(s) for s in picked}) == len(picked) and all(any(s is q for q in seqs) for s in picked)
    if share == 0:
        assert picked == []
    else:
        assert len(seqs) * share - 1e-6 <= len(picked) <= max(1, math.ceil(len(seqs) * share))
        positions = [next(i for i, q in enumerate(seqs) if q is s) for s in picked]
        assert positions == sorted(positions) and positions[0] == 0


def test_a_target_kl_stops_the_epochs_before_the_step_that_passes_it(model, tokenizer):
    batch = _batch(model, tokenizer)
    free = PolicyGradient(copy.deepcopy(model), PGConfig(lr=5e-2, epochs=6)).update(batch)
    assert free["optimizer_steps"] == 6 and free["stopped_by_target_kl"] == 0.0
    target = free["kl_step_max"] / 10
    stopped = PolicyGradient(copy.deepcopy(model), PGConfig(lr=5e-2, epochs=6, target_kl=target)).update(batch)
    assert stopped["stopped_by_target_kl"] == 1.0
    assert 1 <= stopped["optimizer_steps"] < 6
    assert stopped["kl_after"] < free["kl_after"]


def test_an_entropy_bonus_raises_the_entropy_where_no_advantage_pulls(model, tokenizer):
    # First a peaked policy (an untrained one is near the uniform, the most entropy there is): sharpen it on the
    # sequences, then take them again with advantage 0.
    PolicyGradient(model, PGConfig(lr=1e-2, epochs=8)).update(_batch(model, tokenizer, advantages=(1.0,) * 4))
    batch = _batch(model, tokenizer, advantages=(0.0, 0.0, 0.0, 0.0))
    before = PolicyGradient(copy.deepcopy(model), PGConfig(lr=0.0)).measure(batch)["entropy"]
    assert before < np.log(tokenizer.vocab_size) - 0.5
    pg = PolicyGradient(copy.deepcopy(model), PGConfig(lr=1e-3, entropy_coef=1.0, epochs=3))
    stats = pg.update(batch)
    assert stats["entropy"] > before
    # Without the bonus nothing runs (every advantage is 0): the entropy is the one before.
    plain = PolicyGradient(copy.deepcopy(model), PGConfig(lr=1e-2, epochs=3)).update(batch)
    assert plain["entropy"] == pytest.approx(before, rel=1e-6) and plain["sequences_run"] == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=30), st.integers(1, 8), st.integers(0, 10))
def test_minibatches_partition_the_batch_and_keep_repeated_runs_together(tokens, parts, seed):
    seqs = [TrainSequence([1, t], [False, True], [0.0, 0.0]) for t in tokens]
    split = minibatch_split(seqs, parts, seed)
    assert sorted(id(s) for p in split for s in p) == sorted(id(s) for s in seqs)  # each sequence once
    assert len(split) <= parts and all(split)
    # (token sequences have no run key: each is its own run, so parts differ by at most one sequence)
    assert max(map(len, split)) - min(map(len, split)) <= 1 or run_key(seqs[0]) is not None


@pytest.mark.parametrize("bad", [{"epochs": 0}, {"minibatches": 0}, {"clip_eps": 0.0}, {"target_kl": -1.0},
                                 {"entropy_coef": -0.1}, {"entropy_coef": float("nan")}, {"max_grad_norm": 0},
                                 {"epochs": True}, {"target_kl": "0.1"}, {"measure_fraction": 1.5},
                                 {"measure_fraction": -0.1}, {"measure_fraction": float("nan")},
                                 {"measure_fraction": True}, {"measure_fraction": "1"}])
def test_bad_learner_settings_are_refused_naming_the_setting(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        PGConfig(**bad)


@pytest.mark.parametrize("bad", [{"dynamic_sampling": -1}, {"dynamic_max_draws": 0}, {"probe": "timing"},
                                 {"probe_states": 0}, {"bc_max_steps": 0}, {"temperature": -1.0},
                                 {"eval_temperature": float("inf")}])
def test_bad_train_settings_are_refused_naming_the_setting(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        TrainConfig(**bad)


# The summary decision ----------------------------------------------------------------------------------------


def _forced_compaction(env, seed: int):
    oracle = OracleAgent(env)
    obs, info = env.reset(seed=seed)
    while not info["must_compact"]:
        obs, _, terminated, truncated, info = env.step(oracle.act(obs, info))
        assert not (terminated or truncated)
    return obs, info


def test_a_forced_compaction_offers_the_complete_summary_first_and_a_lossy_one():
    with_choice = gym.make("mosaic/WebQA-v0", **SUMMARY_ENV, max_steps=12)
    without = gym.make("mosaic/WebQA-v0", **{**SUMMARY_ENV, "summary_choices": False}, max_steps=12)
    for seed in range(4):
        _, info = _forced_compaction(with_choice, seed)
        _, plain = _forced_compaction(without, seed)
        complete, lossy = info["candidates"]
        assert plain["candidates"] == [complete]  # without the choice: the complete one alone, as before
        assert lossy.endswith('Notes: none")') and "Notes: none" not in complete
        assert complete.split("Notes:")[0] == lossy.split("Notes:")[0]  # the same pages read


@pytest.mark.parametrize("lossy,budget,solves,compactions", [(0.0, 5, True, 1), (1.0, 5, False, 1),
                                                              (1.0, 12, False, 2), (0.5, 12, True, 1)])
def test_a_lossy_summary_costs_the_research_again(lossy, budget, solves, compactions):
    """Complete: answered at T=5. Lossy: the notes are gone, so the next session reads again and must compact
    again (always lossy: never answered, at any budget); half lossy: recovered within T=12."""
    env = gym.make("mosaic/WebQA-v0", **SUMMARY_ENV, max_steps=budget)
    oracle = OracleAgent(env, lossy_summary=lossy, seed=2)
    rewards, compacted = [], []
    for seed in range(6):
        obs, info = env.reset(seed=seed)
        oracle.reset()
        done, count = False, 0
        while not done:
            count += info["must_compact"]
            obs, reward, terminated, truncated, info = env.step(oracle.act(obs, info))
            done = terminated or truncated
        rewards.append(reward)
        compacted.append(count)
    assert (np.mean(rewards) >= 0.8) if solves else (np.mean(rewards) <= 0.2)
    assert min(compacted) >= compactions


def test_the_summary_probe_is_the_probability_the_agent_samples_with(tokenizer):
    env = gym.make("mosaic/WebQA-v0", **SUMMARY_ENV, max_steps=12)
    states = summary_states(env, 4, seed=3)
    assert len(states) == 4 and all(s.target == 0 for s in states)
    texts = [s.observation for s in states] * 3
    tok = train_tokenizer(TEXTS + texts, vocab_size=400)
    agent = LLMAgent(build_tiny_model(tok, "100k", seed=1), tok, mode="choose", temperature=1.3,
                     length_normalize=True, seed=0)
    probe = probe_probabilities(agent, states, temperature=1.3, length_normalize=True)
    # The agent's own scorer (a separate code path: its KV caches and batching) on the same states.
    steps = agent.act_batch_recorded([s.observation for s in states],
                                     [{**s.info, "env_index": k} for k, s in enumerate(states)])[1]
    acting = np.array([float(step.choice_probs[s.target]) for step, s in zip(steps, states)])
    np.testing.assert_allclose(probe, acting, rtol=1e-4, atol=1e-6)  # float32 scores of a few hundred tokens
    assert np.all((probe > 0) & (probe < 1))
    with pytest.raises(ValueError, match="summary_choices"):
        summary_states(gym.make("mosaic/WebQA-v0", site_size=SITE_SIZE, candidates=True), 2)


@pytest.mark.parametrize("max_tokens", [1, 700, 1_500])
def test_the_probe_scores_in_bounded_passes_and_gets_what_one_pass_gets(tokenizer, monkeypatch, max_tokens):
    """The probe runs its states in passes of at most max_tokens padded tokens (one pass over the summary
    preset's 32 states raised a run's peak memory by ~720 MiB): each state's probability is the one a single
    pass over all of them gives, to float32 rounding, in the states' order."""
    import algos.evaluate.probes as probes

    env = gym.make("mosaic/WebQA-v0", **SUMMARY_ENV, max_steps=12)
    states = summary_states(env, 5, seed=4)
    tok = train_tokenizer(TEXTS + [s.observation for s in states] * 3, vocab_size=400)
    agent = LLMAgent(build_tiny_model(tok, "100k", seed=2), tok, mode="choose", temperature=1.0,
                     length_normalize=True, seed=0)
    whole = probe_probabilities(agent, states, temperature=1.0, length_normalize=True, max_tokens=10**9)
    passes: list[int] = []
    real = probes.choice_logprobs

    def counted(model, batch, device, prefix=None):
        passes.append(len(batch))
        assert len(batch) == 1 or len(batch) * max(len(s.token_ids) for s in batch) <= max_tokens
        return real(model, batch, device, prefix)

    monkeypatch.setattr(probes, "choice_logprobs", counted)
    parts = probe_probabilities(agent, states, temperature=1.0, length_normalize=True, max_tokens=max_tokens)
    assert sum(passes) == len(states) and len(passes) > 1
    np.testing.assert_allclose(parts, whole, rtol=1e-5, atol=1e-7)
    # Each in its state's place: the agent's own scorer (its caches and batching, another code path) agrees.
    steps = agent.act_batch_recorded([s.observation for s in states],
                                     [{**s.info, "env_index": k} for k, s in enumerate(states)])[1]
    acting = np.array([float(step.choice_probs[s.target]) for step, s in zip(steps, states)])
    np.testing.assert_allclose(parts, acting, rtol=1e-4, atol=1e-6)
    assert len(set(np.round(acting, 4))) == len(states)  # (the states differ: an order mix-up would show)


# A tiny run through the command line --------------------------------------------------------------------------


def _run(tmp_path: Path, *flags: str) -> list[dict]:
    from mosaic_gym.cli import main

    out = tmp_path / "run"
    main(["train", "--model", TEST_MODEL, "--site-size", str(SITE_SIZE), "--hops", "1", "--max-steps", "5",
          "--session-max-tokens", "600", "--summary-choices", "--bc-max-steps", "12", "--bc-episodes", "6",
          "--bc-epochs", "1", "--iterations", "2", "--tasks-per-iter", "2", "--group-size", "3",
          "--eval-episodes", "1", "--eval-tasks", "2", "--num-envs", "6", "--algo", "broadcast",
          "--length-normalize", "--probe", "summary", "--probe-states", "4",
          "--no-progress", "--out", str(out), *flags])
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_a_tiny_run_with_epochs_logs_the_post_step_kl_the_entropy_and_the_probe(tmp_path):
    # Mosaic's likelihood estimator gives sessions distinct advantages even where every run of a group fails (an
    # untrained policy's lot), so every iteration's update has something to move.
    metrics = _run(tmp_path, "--algo", "mosaic", "--estimator", "likelihood", "--epochs", "3", "--minibatches",
                   "2", "--rl-temperature", "2.0", "--lr", "1e-2")
    for m in metrics:
        assert 0 <= m["probe_summary"] <= 1 and m["probe_summary_states"] == 4
        assert m["kl_after"] > 0 and m["entropy"] > 0 and m["optimizer_steps"] == 6
        assert m["groups_drawn"] == m["groups_trained"] == 2
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert 0 <= summary["probe_warm_start"]["probe_summary"] <= 1
    assert summary["probe_final"] == metrics[-1]["probe_summary"]
    assert 0 <= summary["success_final"]["greedy"]["success"] <= 1  # greedy beside sampled, by default


def test_dynamic_sampling_trains_on_groups_of_unequal_rewards_only(tmp_path):
    # (and with no measuring pass after the update, through the command line: none of its metrics is logged)
    metrics = _run(tmp_path, "--dynamic-sampling", "1", "--dynamic-max-draws", "3", "--rl-temperature", "3.0",
                   "--log-groups", "0", "--measure-fraction", "0")
    for m in metrics:
        assert not {"kl_after", "entropy", "dlogp_pos", "units_measured"} & set(m) and "loss" in m
        assert m["groups_trained"] <= 1
        # Drawn round by round until one group of unequal rewards is found, or the three rounds are spent.
        assert m["groups_drawn"] == 6 if m["groups_trained"] == 0 else m["groups_drawn"] in (2, 4, 6)
        assert m["unequal_groups"] >= m["groups_trained"] / m["groups_drawn"]
        if m["groups_trained"]:
            assert m["groups_reward_varies"] == 1.0  # (the trained groups' own diversity)
