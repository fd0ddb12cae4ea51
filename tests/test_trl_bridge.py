"""MosaicGRPOTrainer end to end on the CPU: our env inside TRL's GRPOTrainer, a tiny model, a few steps.

Rows are sessions (each with its own prompt and completion), their advantages are algos.credit.advantages' on the same
groups (Mosaic with the likelihood estimator, and broadcast), and TRL's loss falls on a fixed batch of a fixed
task (num_iterations > 1: the same rows, trained on four times)."""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import pytest

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # (TRL warns that rollouts it does not run are experimental)

from trl import GRPOConfig  # noqa: E402  (the trl extra: scripts/setup.sh installs it)

import envs  # noqa: E402,F401
from agents import OracleAgent  # noqa: E402
from agents.models import default_texts, load_model  # noqa: E402
from algos.credit import advantages as adv  # noqa: E402
from algos.bridges.trl import MosaicGRPOTrainer, SessionCredit, task_dataset  # noqa: E402
from algos.rollout import Collector, Request, session_sequences  # noqa: E402

from helpers import SITE_SIZE, TEST_MODEL  # noqa: E402

# A window of a search and a page or so: most episodes compact, so a trajectory has several sessions.
ENV = {"site_size": SITE_SIZE, "hops": 1, "max_steps": 5, "chunk_tokens": 96, "session_max_tokens": 250}
GROUP = 4


def make_env() -> gym.Env:
    return gym.make("mosaic/WebQA-Compact-v0", **ENV)


def grpo_args(tmp_path, **overrides) -> GRPOConfig:
    settings = dict(output_dir=str(tmp_path), num_generations=GROUP, per_device_train_batch_size=GROUP,
                    max_steps=1, max_completion_length=12, learning_rate=3e-3, logging_steps=1, report_to=[],
                    use_cpu=True, save_strategy="no", seed=0, disable_tqdm=True,
                    bf16=False)  # (TRL defaults to bf16 autocast even on the CPU: float32 here, as our learner)
    return GRPOConfig(**{**settings, **overrides})


def trainer(tmp_path, credit: SessionCredit, **overrides) -> MosaicGRPOTrainer:
    model, tokenizer = load_model(TEST_MODEL, texts=default_texts(episodes=4, env=make_env()), seed=0)
    one_task = task_dataset(make_env()).select([0])  # a fixed task: every step trains on the same group
    return MosaicGRPOTrainer(model, make_env=make_env, args=grpo_args(tmp_path, **overrides),
                             processing_class=tokenizer, train_dataset=one_task, credit=credit, num_envs=GROUP)


@pytest.fixture(scope="module")
def mosaic_run(tmp_path_factory):
    """Mosaic credit (likelihood estimator): one generation batch trained on four times."""
    run = trainer(tmp_path_factory.mktemp("trl-mosaic"), SessionCredit(credit="mosaic", estimator="likelihood"),
                  max_steps=4, num_iterations=4)
    run.train()
    return run


def expected_rows(group):
    return [(i, sid) for i, t in enumerate(group.trajectories)
            for sid, sequences in session_sequences(t).items() for _ in sequences]


def test_every_session_is_its_own_row_with_its_prompt_and_completion(mosaic_run):
    (group,) = mosaic_run.last_groups
    batch = mosaic_run.last_batch
    assert len(group.trajectories) == GROUP
    assert max(t.num_sessions for t in group.trajectories) > 1  # the case this is for: several sessions
    assert group.rows == expected_rows(group)
    assert batch["completion_ids"].shape[0] == len(group.rows) > GROUP  # more rows than episodes
    sequences = [s for t in group.trajectories for seqs in session_sequences(t).values() for s in seqs]
    for r, s in enumerate(sequences):
        start = s.gen_mask.index(True)
        prompt = batch["prompt_ids"][r][batch["prompt_mask"][r].bool()].tolist()
        completion = batch["completion_ids"][r][batch["completion_mask"][r].bool()].tolist()
        assert prompt + completion == s.token_ids and len(prompt) == start
        # the loss reads the session's generated tokens only, not the env's messages between them
        assert batch["tool_mask"][r][batch["completion_mask"][r].bool()].tolist() == s.gen_mask[start:]
    assert int(batch["num_items_in_batch"]) == sum(s.num_generated for s in sequences)


def test_mosaic_advantages_are_algos_on_the_same_group(mosaic_run):
    (group,) = mosaic_run.last_groups
    keys = [(i, sid) for i, t in enumerate(group.trajectories) for sid in t.session_ids]
    d = np.array([group.contributions[i][sid] for i, sid in keys])
    assert np.any(d != 0)  # the likelihood estimator gave each session its own D
    want = adv.mosaic([t.reward for t in group.trajectories], [i for i, _ in keys], d)
    assert group.advantages == pytest.approx(dict(zip(keys, want)))
    rows = mosaic_run.last_batch["advantages"].tolist()
    assert rows == pytest.approx([dict(zip(keys, want))[key] for key in group.rows], abs=1e-6)


def test_the_loss_falls_on_the_fixed_batch(mosaic_run):
    losses = [h["loss"] for h in mosaic_run.state.log_history if "loss" in h]
    assert len(losses) == 4
    assert losses[-1] < losses[0], losses


def test_broadcast_is_the_default_and_is_algos_broadcast(tmp_path):
    run = trainer(tmp_path, SessionCredit())
    assert run.credit.credit == "broadcast"
    run.train()
    (group,) = run.last_groups
    assert group.contributions is None and group.rows == expected_rows(group)
    # Rewards that differ (a tiny model seldom succeeds): the same task run by the oracle too, in one group.
    # (in a window wide enough for the oracle's pages: its episodes of the task still have several sessions)
    roomy = {**ENV, "session_max_tokens": 400}
    oracle = OracleAgent(gym.make("mosaic/WebQA-Compact-v0", **roomy), seed=0, chunk_tokens=roomy["chunk_tokens"],
                         session_max_tokens=roomy["session_max_tokens"], compact_at=0.3)
    task = group.trajectories[0].task_id
    solved = Collector(lambda: gym.make("mosaic/WebQA-Compact-v0", **roomy), 2).run(
        oracle, [Request(seed=k, options={"task_id": task}) for k in range(2)])
    assert all(t.num_sessions > 1 for t in solved)
    mixed = group.trajectories[:2] + solved
    assert len({t.reward for t in mixed}) > 1
    keys = [(i, sid) for i, t in enumerate(mixed) for sid in t.session_ids]
    want = adv.broadcast([t.reward for t in mixed], [i for i, _ in keys])
    assert run.score_group(mixed).advantages == pytest.approx(dict(zip(keys, want)))
    no_std = grpo_args(tmp_path, scale_rewards="none")
    run.args.scale_rewards = no_std.scale_rewards  # Dr. GRPO: TRL's setting, our formula
    want = adv.broadcast([t.reward for t in mixed], [i for i, _ in keys], normalize_std=False)
    assert run.score_group(mixed).advantages == pytest.approx(dict(zip(keys, want)))


@pytest.mark.parametrize("overrides, message", [
    ({"gradient_accumulation_steps": 2}, "steps_per_generation"),
    ({"scale_rewards": "batch"}, "scale_rewards"),
])
def test_settings_it_cannot_honour_get_one_clear_error(tmp_path, overrides, message):
    model, tokenizer = load_model(TEST_MODEL, texts=["search"] * 20)
    with pytest.raises(ValueError, match=message):
        MosaicGRPOTrainer(model, make_env=make_env, args=grpo_args(tmp_path, **overrides), processing_class=tokenizer)


@pytest.mark.parametrize("fields, message", [
    ({"credit": "gigpo"}, "credit='gigpo'"),
    ({"estimator": "critic"}, "estimator='critic'"),
    ({"root_start": "zero"}, "root_start='zero'"),
])
def test_an_unknown_credit_setting_gets_one_clear_error(fields, message):
    with pytest.raises(ValueError, match=message):
        SessionCredit(**fields)


def test_rows_without_a_task_id_get_one_clear_error(tmp_path):
    from datasets import Dataset

    model, tokenizer = load_model(TEST_MODEL, texts=["search"] * 20)
    run = MosaicGRPOTrainer(model, make_env=make_env, args=grpo_args(tmp_path), processing_class=tokenizer,
                            train_dataset=Dataset.from_dict({"prompt": ["Who?"]}))
    with pytest.raises(ValueError, match="task_id"):
        run.train()
