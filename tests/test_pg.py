"""PolicyGradient: loss only on generated tokens, token-mean over the batch, PPO clipping, the direction of a
step, the KL to the reference, Dr. GRPO, and old log-probs that match what the sampler saw."""

from __future__ import annotations

import copy
import dataclasses

import gymnasium as gym
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import algos.learn.pg
import algos.logprobs
import envs  # noqa: F401  (registers the environments)
from agents.base import Agent, RecordingAgent
from agents.llm import LLMAgent
from agents.models import build_tiny_model, train_tokenizer
from agents.records import AgentStep, Choice
from algos.learn.config import PGConfig, TrainConfig
from algos.learn.pg import PolicyGradient
from algos.logprobs import micro_batches, sequence_logprobs
from algos.rollout import Collector, Request, TrainSequence, Trajectory, session_sequences
from helpers import SITE_SIZE

TEXTS = ['Question: where was Edra Vane born? search("Edra Vane") open(1) answer("Oskarde")',
         'Question: who founded Tolis Marr? search("Tolis Marr") open(2) answer("Ikel Osk")'] * 20
CPU = torch.device("cpu")


def _env_texts() -> list[str]:
    """Observations of the env the rollout tests play, past their first search."""
    env = gym.make("mosaic/WebQA-v0", site_size=SITE_SIZE, hops=1, max_steps=3, candidates=True, chunk_tokens=96)
    texts = []
    for seed in range(3):
        _, info = env.reset(seed=seed)
        texts.append(env.step(info["candidates"][0])[0])
    return texts


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(TEXTS, vocab_size=300)


@pytest.fixture(scope="module")
def env_tokenizer():
    """For real rollouts: trained on the env's own text too, so a context is about half as many tokens (and the
    tests that play and re-score rollouts about half as long) as under a tokenizer that has seen only the TEXTS."""
    return train_tokenizer(TEXTS + _env_texts() * 5, vocab_size=600)


@pytest.fixture
def model(tokenizer):
    return build_tiny_model(tokenizer, "1m", seed=0)


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def _logprobs(model: torch.nn.Module, seqs: list[TrainSequence]) -> list[list[float]]:
    """The model's log-prob of each sequence's generated tokens (0 where there are none), unpadded."""
    with torch.no_grad():
        logp, _ = sequence_logprobs(model, seqs, CPU)
    return [logp[b, : len(s.token_ids)].tolist() for b, s in enumerate(seqs)]


def _on_policy(model, tokenizer, prompt: str, action: str, advantage: float) -> TrainSequence:
    """A session (prompt then generated action) whose old log-probs are the model's own: every ratio is 1."""
    p, a = _ids(tokenizer, prompt), _ids(tokenizer, action)
    seq = TrainSequence(p + a, [False] * len(p) + [True] * len(a), [0.0] * (len(p) + len(a)), advantage)
    lp = _logprobs(model, [seq])[0]
    seq.old_logprobs = [x if m else 0.0 for x, m in zip(lp, seq.gen_mask)]
    return seq


def _action_logprob(model, tokenizer, prompt: str, action: str) -> float:
    seq = _on_policy(model, tokenizer, prompt, action, 0.0)
    return float(np.sum(seq.old_logprobs))


def _grads(model: torch.nn.Module) -> list[torch.Tensor]:
    return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in model.parameters()]


def _batch(model, tokenizer) -> list[TrainSequence]:
    return [
        _on_policy(model, tokenizer, "Question: where was Edra Vane born?", 'search("Edra Vane")', 1.0),
        _on_policy(model, tokenizer, "Question: who founded Tolis Marr? Tolis", 'open(2) answer("Ikel Osk")', -0.5),
        _on_policy(model, tokenizer, "Question:", 'answer("Oskarde")', 0.25),
    ]


# Loss masking --------------------------------------------------------------------------------------------------


def test_only_positions_that_predict_generated_tokens_receive_gradient(model, tokenizer):
    pg = PolicyGradient(model, PGConfig(lr=0.0, kl_coef=0.1))
    batch = _batch(model, tokenizer)
    captured: list[torch.Tensor] = []

    def keep(module, inputs, out):
        if out.requires_grad:  # (the update's last pass, which measures what it did, runs without gradient)
            out.retain_grad()
            captured.append(out)

    pg.model.model.norm.register_forward_hook(keep)
    pg.update(batch)
    # The last hidden state at t is what predicts token t + 1 (only through the vocabulary projection at t).
    # Two passes when the rows share a prefix: that prefix as one row, then the rest of every row.
    grads = [h.grad if h.grad is not None else torch.zeros_like(h) for h in captured]
    if len(grads) == 2:
        assert grads[0].shape[0] == 1 and grads[1].shape[0] == len(batch)
        grads = [torch.cat([grads[0].expand(len(batch), -1, -1), grads[1]], dim=1)]
    hidden_grad = grads[0].abs().sum(-1)  # (B, L)
    for b, s in enumerate(batch):
        predicts_generated = torch.zeros(hidden_grad.shape[1], dtype=torch.bool)
        predicts_generated[: len(s.token_ids) - 1] = torch.tensor(s.gen_mask[1:])
        assert torch.all(hidden_grad[b, ~predicts_generated] == 0), f"prompt or padding of row {b} got gradient"
        assert torch.all(hidden_grad[b, predicts_generated] > 0), f"a generated token of row {b} got no gradient"


def test_values_at_masked_positions_change_nothing(model, tokenizer):
    clean = _batch(model, tokenizer)
    dirty = copy.deepcopy(clean)
    for s in dirty:  # garbage where nothing was generated: old log-probs far off in both directions
        s.old_logprobs = [x if m else (-1e4 if k % 2 else 1e4) for k, (x, m) in enumerate(zip(s.old_logprobs, s.gen_mask))]
    results = []
    for seqs in (clean, dirty):
        m = copy.deepcopy(model)
        stats = PolicyGradient(m, PGConfig(lr=1e-2, kl_coef=0.1, epochs=2)).update(seqs)
        results.append((stats, list(m.parameters())))
    assert np.isfinite(results[1][0]["loss"])
    assert results[0][0]["loss"] == results[1][0]["loss"]
    assert all(torch.equal(a, b) for a, b in zip(results[0][1], results[1][1]))


def test_sequences_without_generated_tokens_are_skipped(model, tokenizer):
    before = [p.clone() for p in model.parameters()]
    ids = _ids(tokenizer, "Question: where?")
    prompt_only = TrainSequence(ids, [False] * len(ids), [0.0] * len(ids), advantage=3.0)
    stats = PolicyGradient(model, PGConfig(lr=1e-2)).update([prompt_only])
    assert stats["tokens"] == 0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


# Token-mean aggregation ------------------------------------------------------------------------------------------


def test_loss_is_the_token_mean_of_advantages_at_ratio_one(model, tokenizer):
    # At ratio 1 the surrogate of a token is its session's advantage, so the loss is -sum_s A_s n_s / sum_s n_s:
    # every generated token of the batch weighs 1/N, and a session weighs as many tokens as it generated.
    batch = _batch(model, tokenizer)
    n = np.array([s.num_generated for s in batch])
    a = np.array([s.advantage for s in batch])
    stats = PolicyGradient(model, PGConfig(lr=0.0)).update(batch)
    assert stats["loss"] == pytest.approx(-(a * n).sum() / n.sum(), abs=1e-5)
    assert stats["loss"] != pytest.approx(-a.mean(), abs=1e-3)  # what a mean over rows would give


def test_splitting_a_trajectory_into_more_session_rows_does_not_change_its_weight(model, tokenizer):
    # Token-mean: the gradient is sum over generated tokens / N_gen, so a trajectory weighs as many tokens as it
    # generated however many rows (sessions) hold them. Here the same tokens come as one row or as two rows
    # (each masking in half of them); a mean over rows would double the split trajectory's weight.
    whole, *others = _batch(model, tokenizer)
    generated = [k for k, m in enumerate(whole.gen_mask) if m]
    halves = []
    for part in (generated[: len(generated) // 2], generated[len(generated) // 2 :]):
        half = copy.deepcopy(whole)
        half.gen_mask = [k in part for k in range(len(whole.gen_mask))]
        half.old_logprobs = [x if k in part else 0.0 for k, x in enumerate(whole.old_logprobs)]
        halves.append(half)
    grads, losses = [], []
    for seqs in ([whole, *others], [*halves, *others]):
        m = copy.deepcopy(model)
        losses.append(PolicyGradient(m, PGConfig(lr=0.0, max_grad_norm=1e9)).update(seqs)["loss"])
        grads.append(_grads(m))
    assert losses[0] == pytest.approx(losses[1], abs=1e-6)
    assert all(torch.allclose(g, h, atol=1e-7) for g, h in zip(*grads))
    # The construction is not degenerate: a mean of per-row token-means weighs the two cases differently.
    per_row = [np.mean([-s.advantage for s in seqs]) for seqs in ([whole, *others], [*halves, *others])]
    assert per_row[0] != pytest.approx(per_row[1])


def test_micro_batches_accumulate_the_same_gradient_as_one_batch(model, tokenizer):
    batch = _batch(model, tokenizer)
    grads = []
    for budget in (1 << 20, 1):  # everything in one padded pass, or one sequence per pass
        m = copy.deepcopy(model)
        PolicyGradient(m, PGConfig(lr=0.0, max_grad_norm=1e9, micro_batch_tokens=budget)).update(batch)
        grads.append(_grads(m))
    assert all(torch.allclose(g, h, atol=1e-6) for g, h in zip(*grads))


def test_micro_batches_keep_order_and_padded_size():
    seqs = [TrainSequence([1] * n, [True] * n, [0.0] * n) for n in (5, 3, 9, 2, 2, 7)]
    batches = list(micro_batches(seqs, max_tokens=18))
    assert [s for b in batches for s in b] == seqs
    assert all(len(b) == 1 or len(b) * max(len(s.token_ids) for s in b) <= 18 for b in batches)
    assert len(batches) < len(seqs)  # it does group


# Clipping ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_second_epoch_gives_no_gradient_to_tokens_whose_ratio_left_the_clip_range(model, tokenizer, advantage):
    seq = _on_policy(model, tokenizer, "Question: where was Edra Vane born?", 'answer("Oskarde")', advantage)
    config = PGConfig(lr=0.1, clip_eps=0.2, max_grad_norm=1e9)
    one = copy.deepcopy(model)
    PolicyGradient(one, config).update([seq])
    gen = np.flatnonzero(seq.gen_mask)
    ratio = np.exp(np.array(_logprobs(one, [seq])[0]) - np.array(seq.old_logprobs))[gen]
    # Clipped: past the range on the side the advantage pushes to (the min then takes the flat clipped term).
    clipped = ratio > 1.2 if advantage > 0 else ratio < 0.8
    assert clipped.any()
    two = PolicyGradient(copy.deepcopy(model), dataclasses.replace(config, epochs=2))
    captured: list[torch.Tensor] = []

    def keep(module, inputs, out):
        if out.requires_grad:  # (the update's last pass, which measures what it did, runs without gradient)
            out.retain_grad()
            captured.append(out)

    two.model.model.norm.register_forward_hook(keep)
    stats = two.update([seq])
    second_epoch = captured[-1].grad[0].abs().sum(-1)[gen - 1]  # the hidden state at t - 1 predicts token t
    assert torch.all(second_epoch[torch.tensor(clipped)] == 0)
    assert torch.all(second_epoch[torch.tensor(~clipped)] > 0)
    if clipped.all():
        assert stats["grad_norm"] == 0.0 and all(torch.count_nonzero(g) == 0 for g in _grads(two.model))


def test_clipping_is_pessimistic_a_ratio_past_the_range_against_the_advantage_still_learns(model, tokenizer):
    # ratio = e > 1 + eps: with A > 0 the min picks the flat clipped term (no gradient); with A < 0 it picks
    # ratio * A, which still pushes the ratio down.
    grads = {}
    for advantage in (1.0, -1.0):
        seq = _on_policy(model, tokenizer, "Question: where was Edra Vane born?", 'answer("Oskarde")', advantage)
        seq.old_logprobs = [x - 1.0 if m else 0.0 for x, m in zip(seq.old_logprobs, seq.gen_mask)]
        m = copy.deepcopy(model)
        PolicyGradient(m, PGConfig(lr=0.0, max_grad_norm=1e9)).update([seq])
        grads[advantage] = sum(float(g.abs().sum()) for g in _grads(m))
    assert grads[1.0] == 0.0
    assert grads[-1.0] > 0.0


# The direction of a step ---------------------------------------------------------------------------------------------


def test_one_step_raises_a_positively_advantaged_action_and_lowers_a_negative_one(model, tokenizer):
    prompt = "Question: where was Edra Vane born?"
    good, bad = 'answer("Oskarde")', 'search("Tolis Marr")'
    before = {a: _action_logprob(model, tokenizer, prompt, a) for a in (good, bad)}
    batch = [_on_policy(model, tokenizer, prompt, good, 1.0), _on_policy(model, tokenizer, prompt, bad, -1.0)]
    PolicyGradient(model, PGConfig(lr=1e-3)).update(batch)
    after = {a: _action_logprob(model, tokenizer, prompt, a) for a in (good, bad)}
    assert after[good] > before[good] + 0.05
    assert after[bad] < before[bad] - 0.05


# KL to the reference -----------------------------------------------------------------------------------------------


def test_kl_to_the_reference_is_zero_at_first_and_grows_with_updates(model, tokenizer):
    pg = PolicyGradient(model, PGConfig(lr=1e-2, kl_coef=0.5))
    reference = [p.clone() for p in pg.ref_model.parameters()]
    batch = _batch(model, tokenizer)
    first = pg.update(batch)
    assert first["kl_ref"] == pytest.approx(0.0, abs=1e-7)
    second = pg.update(batch)
    assert second["kl_ref"] > 1e-4
    assert all(torch.equal(a, b) for a, b in zip(reference, pg.ref_model.parameters()))
    assert PolicyGradient(copy.deepcopy(model), PGConfig(kl_coef=0.0)).ref_model is None


def test_kl_term_pulls_back_towards_the_reference(model, tokenizer):
    # With every advantage 0 only the KL term acts: steps must bring the policy's tokens back to the reference.
    pg = PolicyGradient(model, PGConfig(lr=1e-2, kl_coef=1.0))
    batch = _batch(model, tokenizer)
    pg.update(batch)
    pg.update(batch)
    for s in batch:
        s.advantage = 0.0
    pg.optimizer = torch.optim.SGD(pg.model.parameters(), lr=0.1)  # no momentum left from the drifting steps
    kl = [pg.update(batch)["kl_ref"] for _ in range(4)]  # each measured before its step
    assert kl[0] > 1e-4
    assert all(later < earlier for earlier, later in zip(kl, kl[1:]))


# Dr. GRPO -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("advantage", ["broadcast", "mosaic"])
def test_dr_grpo_option_reaches_the_advantage_estimator(model, advantage):
    rewards, rows = [1.0, 0.0, 0.0, 0.0], np.array([0, 1, 2, 3])
    shaping = dict(lambda_use=0.0, beta=0.0)
    dr = PolicyGradient(model, PGConfig(advantage=advantage, normalize_std=False, **shaping))
    std = PolicyGradient(model, PGConfig(advantage=advantage, normalize_std=True, **shaping))
    assert dr.advantages(rewards, rows) == pytest.approx([0.75, -0.25, -0.25, -0.25])
    assert std.advantages(rewards, rows) == pytest.approx([3**0.5, -(3**-0.5), -(3**-0.5), -(3**-0.5)], abs=1e-5)


def test_dr_grpo_flag_of_the_command_line_reaches_the_learner_config():
    from mosaic_gym.cli import build_parser
    from mosaic_gym.commands.train import config_from_args

    config = config_from_args(build_parser().parse_args(["train", "--dr-grpo", "--algo", "broadcast"]))
    assert config.pg.normalize_std is False and config.pg.advantage == "broadcast"
    assert TrainConfig(algo="mosaic", pg={"normalize_std": False}).pg.normalize_std is False


# The handoff: step records come back from the agent, advantages go to sessions by id --------------------------------


class _Recorder(RecordingAgent):
    """Answers at once and returns a made-up step record per env (no model): what a collector must keep."""

    def act_batch_recorded(self, observations, infos):
        steps = [AgentStep(i["session_id"], [1, 2], [3], torch.tensor([-0.5]), 'answer("x")') for i in infos]
        return [s.text for s in steps], steps


class _Unrecorded(Agent):
    """Not a recording agent: an attribute that looks like records is not a handoff."""

    last_steps = [AgentStep(0, [9], [9], torch.tensor([0.0]), "not a record")]

    def act(self, observation, info):
        return 'answer("x")'


def test_a_collector_keeps_the_steps_a_recording_agent_returns_and_only_those():
    make = lambda: gym.make("mosaic/WebQA-v0", site_size=SITE_SIZE, hops=1)  # noqa: E731
    requests = [Request(seed=s, options={}) for s in range(2)]
    recorded = Collector(make, 2).run(_Recorder(), requests)
    assert [list(t.steps) for t in recorded] == [[0], [0]] and recorded[0].steps[0][0].gen_ids == [3]
    (seq,) = session_sequences(recorded[0])[0]
    assert (seq.token_ids, seq.gen_mask, seq.old_logprobs) == ([1, 2, 3], [False, False, True], [0.0, 0.0, -0.5])
    assert [t.steps for t in Collector(make, 2).run(_Unrecorded(), requests)] == [{}, {}]


def test_session_advantages_are_keyed_by_trajectory_and_session(model):
    from algos.credit.estimators import credit_for

    tree = lambda n: {"sessions": [{"id": k} for k in range(n)]}  # noqa: E731
    group = [Trajectory(0, "t", 8, reward, tree(n)) for reward, n in ((1.0, 2), (0.0, 1), (1.0, 3))]
    d = [np.array([0.5, -0.5]), np.array([0.0]), np.array([0.2, 0.1, -0.3])]
    config = TrainConfig(algo="mosaic")
    keyed = credit_for(config).session_advantages(group, d)
    # The learner's own formula on the same rows (one switch: algos.credit.advantages.by_name).
    rows = PolicyGradient(model, config.pg).advantages([1.0, 0.0, 1.0], [0, 0, 1, 2, 2, 2], np.concatenate(d))
    assert list(keyed) == [(0, 0), (0, 1), (1, 0), (2, 0), (2, 1), (2, 2)]
    assert list(keyed.values()) == rows.tolist()
    assert keyed[(0, 0)] != keyed[(0, 1)]  # Mosaic tells a trajectory's sessions apart


# Old log-probs match what the sampler saw ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["choose", "generate"])
def test_first_ratio_is_one_on_real_rollouts(env_tokenizer, choose_rollouts, mode):
    # The learner re-scores the packed sessions with the same weights: every generated token's log-prob must equal
    # the one the agent recorded while sampling (KV caches, tree-masked candidate scoring, batching, a sampling
    # temperature other than 1), or the ratio would not start at 1.
    if mode == "choose":
        model, _, seqs = choose_rollouts
        seqs = copy.deepcopy(seqs)
    else:
        model = build_tiny_model(env_tokenizer, "1m", seed=1)
        make = lambda: gym.make("mosaic/WebQA-v0", site_size=SITE_SIZE, hops=1, max_steps=3,  # noqa: E731
                                candidates=True, chunk_tokens=96)
        agent = LLMAgent(model, env_tokenizer, mode=mode, temperature=0.5, max_new_tokens=6, seed=0)
        runs = Collector(make, 3).run(agent, [Request(seed=s, options={}) for s in range(3)])
        seqs = [s for t in runs for rows in session_sequences(t).values() for s in rows]
    assert sum(s.num_generated for s in seqs) > 0
    forced_tokens = 0
    for s, lp in zip(seqs, _logprobs(model, seqs)):
        gen = np.array(s.gen_mask)
        # A choice of one candidate (the forced compaction) is not scored when acting: its tokens record 0.
        for c in s.choices:
            if len(c.candidates) == 1:
                span = slice(c.prompt_len, c.prompt_len + len(c.candidates[0]))
                assert gen[span].all() and not np.any(np.array(s.old_logprobs)[span])
                gen[span] = False
                forced_tokens += span.stop - span.start
        np.testing.assert_allclose(np.array(lp)[gen], np.array(s.old_logprobs)[gen], atol=2e-4)
    assert mode == "generate" or 0 < forced_tokens < sum(s.num_generated for s in seqs)
    before = copy.deepcopy(model.state_dict())
    for k, s in enumerate(seqs):  # (a sequence of advantage 0 is not run: every one here is)
        s.advantage = 1.0 if k % 2 else -0.5
    stats = PolicyGradient(model, PGConfig(lr=0.0)).update(seqs)
    assert abs(stats["approx_kl"]) < 1e-4 and stats["clip_fraction"] == 0.0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # (the shared model is unchanged)


# Choose mode: the unit is the choice among the candidates ----------------------------------------------------------


def _choose_rollouts(tokenizer, model, temperature=0.5, n=3):
    make = lambda: gym.make("mosaic/WebQA-v0", site_size=SITE_SIZE, hops=1, max_steps=3, candidates=True,  # noqa: E731
                            chunk_tokens=96)
    agent = LLMAgent(model, tokenizer, mode="choose", temperature=temperature, seed=0)
    runs = Collector(make, n).run(agent, [Request(seed=s, options={}) for s in range(n)])
    return runs, [s for t in runs for rows in session_sequences(t).values() for s in rows]


@pytest.fixture(scope="module")
def choose_rollouts(env_tokenizer):
    """``(model, runs, sequences)``: choose-mode rollouts at temperature 0.5, read by two tests (not changed)."""
    model = build_tiny_model(env_tokenizer, "1m", seed=1)
    return (model, *_choose_rollouts(env_tokenizer, model))


def test_choice_logprobs_match_the_softmax_the_agent_sampled_from(choose_rollouts):
    model, runs, seqs = choose_rollouts
    steps = [s for t in runs for ss in t.steps.values() for s in ss]
    assert sum(len(s.choices) for s in seqs) == len(steps) > 3
    with torch.no_grad():
        logp, old, mask, _ = algos.logprobs.choice_logprobs(model, seqs, CPU)
    recorded = torch.tensor([float(torch.log(s.choice_probs[s.choice])) for s in steps])
    np.testing.assert_allclose(logp[mask].numpy(), old[mask].numpy(), atol=2e-4)
    # Row by row the choices come in step order, and they are log softmax(score / 0.5) of the agent's own probs.
    np.testing.assert_allclose(old[mask].numpy(), recorded.numpy(), atol=1e-5)


def test_choice_gradient_equals_the_gradient_of_the_candidate_log_softmax_by_separate_passes(env_tokenizer):
    # Independent check of the tree pass, gradient included: score every candidate in its own full forward pass
    # (prefix + candidate), take log softmax over candidates at the policy's temperature, backpropagate.
    model = build_tiny_model(env_tokenizer, "1m", seed=2)
    _, seqs = _choose_rollouts(env_tokenizer, model, temperature=0.7, n=2)
    seq = next(s for s in seqs if len(s.choices) >= 2)
    model.zero_grad()
    logp, _, mask, _ = algos.logprobs.choice_logprobs(model, [seq], CPU)
    logp[mask].sum().backward()
    tree = _grads(model)
    model.zero_grad()
    total = 0.0
    for c in seq.choices:
        prefix = seq.token_ids[: c.prompt_len]
        rows = [TrainSequence(prefix + cand, [False] * len(prefix) + [True] * len(cand), [0.0] * (len(prefix) + len(cand)))
                for cand in c.candidates]
        lp, m = sequence_logprobs(model, rows, CPU)
        scores = (lp * m).sum(1)
        total = total + torch.log_softmax(scores / c.temperature, -1)[c.index]
    total.backward()
    separate = _grads(model)
    np.testing.assert_allclose(float(logp[mask].sum().detach()), float(total.detach()), atol=1e-4)
    for a, b in zip(tree, separate):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-3)


@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_one_choose_step_moves_the_probability_of_the_chosen_candidate_with_the_advantage(env_tokenizer, advantage):
    model = build_tiny_model(env_tokenizer, "1m", seed=3)
    _, seqs = _choose_rollouts(env_tokenizer, model, temperature=1.0, n=2)
    seq = next(s for s in seqs if any(len(c.candidates) > 1 for c in s.choices))
    seq.choices = [c for c in seq.choices if len(c.candidates) > 1][:1]  # (a single candidate has log pi = 0)
    seq.advantage = advantage
    with torch.no_grad():
        before = algos.logprobs.choice_logprobs(model, [seq], CPU)[0][0, 0]
    PolicyGradient(model, PGConfig(lr=3e-3)).update([seq])
    with torch.no_grad():
        after = algos.logprobs.choice_logprobs(model, [seq], CPU)[0][0, 0]
    assert (after - before) * advantage > 0.01


# The shared prefix: the tokens every session opens with run once per update ----------------------------------------


def _update_grads(model, seqs, shared: bool, monkeypatch, micro_batch_tokens: int = 1 << 20, kl_coef: float = 0.0,
                  min_tokens: int = 16):
    """The gradient one update leaves, with the shared prefix or with every row run whole; and the prefix's
    length (0 without)."""
    lengths = []
    make = algos.logprobs.SharedPrefix.of

    def of(*args, **kwargs):
        prefix = make(*args, **{**kwargs, "min_tokens": min_tokens}) if shared else None
        lengths.append(0 if prefix is None else len(prefix))
        return prefix

    monkeypatch.setattr(algos.logprobs.SharedPrefix, "of", of)
    m = copy.deepcopy(model)
    stats = PolicyGradient(m, PGConfig(lr=0.0, max_grad_norm=1e9, micro_batch_tokens=micro_batch_tokens,
                                       kl_coef=kl_coef)).update(seqs)
    monkeypatch.setattr(algos.logprobs.SharedPrefix, "of", make)
    return _grads(m), stats, max(lengths)


@pytest.mark.parametrize("micro_batch_tokens", [1, 1 << 20])
def test_the_shared_prefix_gives_the_gradient_of_whole_rows_on_real_choose_rollouts(
        choose_rollouts, monkeypatch, micro_batch_tokens):
    model, _, seqs = choose_rollouts
    seqs = copy.deepcopy(seqs)
    for k, s in enumerate(seqs):
        s.advantage = (-1.0) ** k * (1 + k / 10)
    whole, whole_stats, none = _update_grads(model, seqs, False, monkeypatch, micro_batch_tokens, kl_coef=0.1)
    shared, shared_stats, length = _update_grads(model, seqs, True, monkeypatch, micro_batch_tokens, kl_coef=0.1)
    assert none == 0 and length >= 16  # the system message is shared; the comparison is not empty
    assert sum(float(g.abs().sum()) for g in whole) > 0
    for a, b in zip(whole, shared):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)
    assert shared_stats["loss"] == pytest.approx(whole_stats["loss"], rel=1e-5, abs=1e-6)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_shared_prefix_gives_the_same_gradient_for_any_batch(model, monkeypatch, data):
    # Sequences with a common opening of any length (up to their first generated token, or past it), any masks,
    # any micro-batching: the gradient is the one of whole rows, and the prefix never covers a scored column.
    common = data.draw(st.lists(st.integers(1, 299), min_size=0, max_size=40), label="common")
    seqs = []
    for k in range(data.draw(st.integers(2, 5), label="rows")):
        tail = data.draw(st.lists(st.integers(1, 299), min_size=2, max_size=12), label="tail")
        ids = common + tail
        first = data.draw(st.integers(max(1, len(common) - 3), len(ids) - 1), label="first generated")
        mask = [False] * first + [data.draw(st.booleans()) or t == first for t in range(first, len(ids))]
        seqs.append(TrainSequence(ids, mask, [-1.0] * len(ids), advantage=0.5 - k))  # (none 0: all run)
    micro = data.draw(st.sampled_from([1, 40, 1 << 20]), label="micro_batch_tokens")
    whole, _, _ = _update_grads(model, seqs, False, monkeypatch, micro)
    shared, _, length = _update_grads(model, seqs, True, monkeypatch, micro, min_tokens=1)
    assert length <= min(s.gen_mask[1:].index(True) for s in seqs)
    for a, b in zip(whole, shared):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


def test_a_sequence_of_advantage_zero_is_not_run_and_the_step_is_the_one_that_ran_it(choose_rollouts):
    # Without a KL term, a session of advantage 0 adds nothing to the loss or its gradient: it is not run. The
    # reference runs the same sessions with 1e-30 in place of 0 (every row goes through, adding nothing a
    # float32 sum can hold), both with SGD with momentum (Adam would scale a 1e-30 gradient up to a full step).
    # The parameters after two updates must agree, the second of which has only zeros: the optimizer's step then
    # still moves the weights by its momentum, as it did when such sessions ran (a missing gradient would not).
    model, _, seqs = choose_rollouts
    seqs = [s for s in seqs if any(len(c.candidates) > 1 for c in s.choices)]
    assert len(seqs) >= 3
    results = []
    for zero in (0.0, 1e-30):
        batch = copy.deepcopy(seqs)
        for k, s in enumerate(batch):
            s.advantage = (1.0, zero, zero)[k % 3]
        idle = copy.deepcopy(batch)
        for s in idle:
            s.advantage = zero
        learner = PolicyGradient(copy.deepcopy(model), PGConfig(lr=1e-3))
        learner.optimizer = torch.optim.SGD(learner.model.parameters(), lr=1e-2, momentum=0.9)
        rows = []
        hook = learner.model.register_forward_pre_hook(
            lambda m, args, kw: rows.append(kw["input_ids"].shape[0]), with_kwargs=True)
        first = learner.update(batch)
        after_first = [p.detach().clone() for p in learner.model.parameters()]
        second = learner.update(idle)
        hook.remove()
        results.append((first, second, after_first, [p.detach().clone() for p in learner.model.parameters()],
                        sum(rows)))
    (first, second, mid, end, rows), (first_ref, second_ref, mid_ref, end_ref, rows_ref) = results
    assert rows < rows_ref  # fewer rows through the model
    for a, b in zip(mid + end, mid_ref + end_ref):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert any(not torch.equal(a, b) for a, b in zip(mid, end))  # the all-zero update still stepped
    for key in ("loss", "grad_norm", "approx_kl", "clip_fraction", "tokens"):
        assert first[key] == pytest.approx(first_ref[key], rel=1e-4, abs=1e-5), key  # (ratios 1 to rounding)
    assert second["loss"] == 0.0 and second["grad_norm"] == 0.0 and second["tokens"] == second_ref["tokens"]
    # The metrics say how many sequences ran: one in three here, every one in the reference.
    assert (first["sequences_run"], second["sequences_run"]) == (len([k for k in range(len(seqs)) if k % 3 == 0]), 0)
    assert (first_ref["sequences_run"], second_ref["sequences_run"]) == (len(seqs), len(seqs))


def test_a_sequence_that_does_not_start_with_the_shared_prefix_is_refused(model, tokenizer):
    batch = _batch(model, tokenizer)
    prefix = algos.logprobs.SharedPrefix.of(model, batch, CPU, min_tokens=1)
    assert prefix is not None and len(prefix) >= 1
    other = TrainSequence([prefix.ids[0] + 1] + batch[0].token_ids[1:], batch[0].gen_mask, batch[0].old_logprobs)
    with pytest.raises(ValueError, match="does not start with the shared prefix"):
        sequence_logprobs(model, [other], CPU, prefix)
    early = TrainSequence(batch[0].token_ids, [False, True] + batch[0].gen_mask[2:], batch[0].old_logprobs)
    if len(prefix) > 1:
        with pytest.raises(ValueError, match="covers column 0"):
            sequence_logprobs(model, [early], CPU, prefix)


def test_single_candidate_choices_and_the_tokens_after_the_last_real_choice_change_nothing(choose_rollouts):
    # A choice of one candidate has log pi = 0 (no gradient), and a session's last step is often one (the
    # forced compaction); the learner scores neither it nor the tokens after the last choice of several.
    model, _, seqs = choose_rollouts
    seq = copy.deepcopy(next(s for s in seqs if any(len(c.candidates) > 1 for c in s.choices)))
    seq.advantage = 1.0
    n = len(seq.token_ids)
    forced = Choice(prompt_len=n + 3, candidates=[[7, 8, 9, 10]], index=0, old_logprob=0.0)
    longer = TrainSequence(seq.token_ids + [4, 5, 6, 7, 8, 9, 10], seq.gen_mask + [False] * 3 + [True] * 4,
                           seq.old_logprobs + [0.0] * 7, advantage=1.0, choices=seq.choices + [forced])
    only_forced = TrainSequence(seq.token_ids, seq.gen_mask, seq.old_logprobs, advantage=-1.0,
                                choices=[Choice(prompt_len=n - 1, candidates=[[3]], index=0, old_logprob=0.0)])
    grads, logps = [], []
    for batch in ([seq], [longer], [longer, only_forced]):
        model.zero_grad()
        logp, old, mask, _ = algos.logprobs.choice_logprobs(model, batch, CPU)
        weights = 1 + torch.arange(logp.shape[1]) / 10  # (choice j of a row weighs 1 + j / 10)
        (logp * weights)[mask].sum().backward()
        grads.append(_grads(model))
        logps.append(logp[0, : len(seq.choices)].detach())
        assert mask.sum() == sum(len(s.choices) for s in batch) and float(logp.detach()[0, len(seq.choices):].abs().sum()) == 0
    for other in (1, 2):
        torch.testing.assert_close(logps[other], logps[0], atol=1e-6, rtol=1e-5)
        for a, b in zip(grads[0], grads[other]):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)
    assert logps[0].abs().sum() > 0 and sum(float(g.abs().sum()) for g in grads[0]) > 0
    # A micro-batch of single-candidate choices only runs no pass at all, and its loss is still counted.
    calls = []
    handle = model.register_forward_pre_hook(lambda *args: calls.append(1))
    logp, old, mask, _ = algos.logprobs.choice_logprobs(model, [only_forced], CPU)
    handle.remove()
    assert calls == [] and mask.tolist() == [[True]] and logp.tolist() == [[0.0]]
    stats = PolicyGradient(copy.deepcopy(model), PGConfig(lr=1e-3)).update([only_forced])
    assert stats["loss"] == pytest.approx(1.0 / 1) and stats["grad_norm"] == 0.0


# Repeated sessions ------------------------------------------------------------------------------------------------


def _scored_twice(choose_rollouts):
    """A sequence with at least two choices of several candidates, and another one."""
    model, _, seqs = choose_rollouts
    seq = next(s for s in seqs if sum(len(c.candidates) > 1 for c in s.choices) >= 2)
    other = next(s for s in seqs if s is not seq and any(len(c.candidates) > 1 for c in s.choices))
    return model, copy.deepcopy(seq), copy.deepcopy(other)


def test_repeated_sessions_run_once_and_each_keeps_its_own_choice(choose_rollouts):
    model, seq, other = _scored_twice(choose_rollouts)
    last = max(j for j, c in enumerate(seq.choices) if len(c.candidates) > 1)
    again = copy.deepcopy(seq)  # the same tokens and candidates; another candidate chosen last, another old log-prob
    again.choices[last] = dataclasses.replace(again.choices[last], index=(seq.choices[last].index + 1)
                                              % len(seq.choices[last].candidates), old_logprob=-3.0)
    swapped = copy.deepcopy(seq)  # the same tokens, but one choice's candidates in another order: not the same run
    swapped.choices[last] = dataclasses.replace(swapped.choices[last],
                                                candidates=swapped.choices[last].candidates[::-1])
    batch = [seq, other, again, swapped]
    assert algos.logprobs.run_key(seq) == algos.logprobs.run_key(again) != algos.logprobs.run_key(swapped)
    rows_run = []
    handle = model.register_forward_pre_hook(lambda m, args, kwargs: rows_run.append(kwargs["input_ids"].shape[0]),
                                             with_kwargs=True)
    model.zero_grad()
    logp, old, mask, _ = algos.logprobs.choice_logprobs(model, batch, CPU)
    handle.remove()
    assert rows_run[0] == 3  # the causal pass: seq (for itself and again), other, swapped
    weights = torch.arange(1, 1 + logp.numel(), dtype=torch.float32).view(logp.shape) / 7  # every unit its own
    (logp * weights)[mask].sum().backward()
    shared = _grads(model)
    # Each row alone: the same log-probs, old log-probs and, summed, the same gradient.
    model.zero_grad()
    for b, s in enumerate(batch):
        alone, alone_old, alone_mask, _ = algos.logprobs.choice_logprobs(model, [s], CPU)
        n = alone.shape[1]
        torch.testing.assert_close(logp[b, :n].detach(), alone[0].detach(), atol=1e-5, rtol=1e-4)
        assert torch.equal(old[b, :n], alone_old[0]) and torch.equal(mask[b, :n], alone_mask[0])
        (alone * weights[b : b + 1, :n])[alone_mask].sum().backward()
    _close_grads(shared, _grads(model))
    assert float(logp[2, last]) != pytest.approx(float(logp[0, last]), abs=1e-4)  # its own chosen candidate
    assert float(logp[3, last]) != pytest.approx(float(logp[0, last]), abs=1e-4)  # its own candidates' scores


def test_an_update_over_repeated_sessions_is_the_update_over_each(choose_rollouts):
    model, seq, other = _scored_twice(choose_rollouts)
    repeats = [dataclasses.replace(copy.deepcopy(seq), advantage=a) for a in (1.0, -0.5, 2.0)]
    other.advantage = -1.0
    batch = [repeats[0], other, *repeats[1:]]
    config = PGConfig(lr=0.0, max_grad_norm=1e9)
    results = []
    for budget in (1 << 20, 1):  # repeats together (one run), or (micro-batches of one) each run alone
        m = copy.deepcopy(model)
        calls = []
        handle = m.register_forward_pre_hook(lambda *a: calls.append(1))
        stats = PolicyGradient(m, dataclasses.replace(config, micro_batch_tokens=budget)).update(batch)
        handle.remove()
        results.append((stats, _grads(m), len(calls)))
    (together, g1, calls1), (apart, g2, calls2) = results
    assert together["loss"] == pytest.approx(apart["loss"], rel=1e-5, abs=1e-7)
    _close_grads(g1, g2)
    assert calls1 < calls2


def _close_grads(got: list[torch.Tensor], want: list[torch.Tensor]) -> None:
    """The same gradient to float rounding: relative to the whole gradient's size (the sums run in another order)."""
    flat_got, flat_want = torch.cat([g.flatten() for g in got]), torch.cat([g.flatten() for g in want])
    assert float(flat_want.norm()) > 0
    assert float((flat_got - flat_want).norm() / flat_want.norm()) < 1e-5


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(2, 12), st.booleans()), min_size=1, max_size=14),
       st.integers(1, 40))
def test_micro_batches_keep_a_run_together_and_count_it_once(specs, max_tokens):
    """Any sequences, some repeating another's scored part: each sequence comes out once, a run's sequences in one
    micro-batch, runs in their first order, and a batch of several runs fits ``max_tokens`` counted by runs."""
    seqs = []
    for token, n, scored in specs:
        choices = [Choice(prompt_len=n, candidates=[[1], [2]] if scored else [[1]], index=0, old_logprob=0.0)]
        seqs.append(TrainSequence([token] * n + [5], [False] * n + [True], [0.0] * (n + 1), choices=choices))

    def run_of(s):
        key = algos.logprobs.run_key(s)
        return id(s) if key is None else key

    batches = list(micro_batches(seqs, max_tokens))
    flat = [s for b in batches for s in b]
    assert sorted(map(id, flat)) == sorted(map(id, seqs))
    where = {}
    for k, b in enumerate(batches):
        for s in b:
            assert where.setdefault(run_of(s), k) == k
        runs = {run_of(s) for s in b}
        assert len(runs) == 1 or len(runs) * max(s.length for s in b) <= max_tokens
    first = list(dict.fromkeys(run_of(s) for s in seqs))
    assert list(dict.fromkeys(run_of(s) for s in flat)) == first
