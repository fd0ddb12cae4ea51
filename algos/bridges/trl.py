"""Our envs inside TRL's ``GRPOTrainer``: a multi-session rollout, one training row per session.

TRL's own multi-turn path trains one row per rollout (or per turn) with the group-relative advantage of the
whole rollout: broadcast. :class:`MosaicGRPOTrainer` replaces the trainer's generation step with our learner's:

1. each prompt of the batch (a dataset row naming a ``task_id``; TRL repeats it ``num_generations`` times, a
   group) is one episode of the env, run by an :class:`agents.llm.LLMAgent` sampling from the trainer's model
   (:class:`algos.rollout.Collector`);
2. every session of every episode becomes its own row (:func:`algos.rollout.session_sequences`): its first
   prompt is the row's prompt, the rest of the session its completion, with the env's tokens inside it masked
   out of the loss (TRL's ``tool_mask``);
3. each row gets its session's advantage from :mod:`algos.credit.advantages`: :func:`~algos.credit.advantages.broadcast` by
   default, or :func:`~algos.credit.advantages.mosaic` with the session contributions of :mod:`algos.credit`
   (``SessionCredit(credit="mosaic", estimator="likelihood" | "rollout")``).

The loss, optimizer, KL and clipping stay TRL's (``GRPOConfig``). Where TRL and our learner
(:class:`algos.learn.pg.PolicyGradient`) choose differently, see ``docs/trl.md``.

Example (not run here: it trains)::

    env_kwargs = {"site_size": 150, "hops": 1, "max_steps": 4, "session_max_tokens": 300}
    trainer = MosaicGRPOTrainer(
        model, processing_class=tokenizer, make_env=lambda: gym.make("mosaic/WebQA-Compact-v0", **env_kwargs),
        args=GRPOConfig(output_dir="out", num_generations=4, per_device_train_batch_size=4, max_steps=10,
                        max_completion_length=32, use_cpu=True),
        credit=SessionCredit(credit="mosaic", estimator="likelihood"))
    trainer.train()
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

import gymnasium as gym
import numpy as np
import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import pad

import envs  # noqa: F401  (registers the environments)
from agents.llm import LLMAgent
from agents.records import TrainSequence

from algos.credit import advantages as adv
from algos.credit import estimators as mosaic_credit
from algos.rollout import Collector, Request, Trajectory, session_sequences

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["MosaicGRPOTrainer", "SessionCredit", "SessionGroup", "env_reward", "session_rows", "task_dataset"]

CREDITS = ("broadcast", "mosaic")
ESTIMATORS = ("likelihood", "rollout")


@dataclass
class SessionCredit:
    """How the rows of a group get their advantages (the names of :class:`algos.learn.config.PGConfig`'s settings).

    ``normalize_std`` is not here: it is TRL's ``scale_rewards`` (``"group"``: divide by the group's reward std;
    ``"none"``: Dr. GRPO).
    """

    credit: str = "broadcast"  # "broadcast" or "mosaic"
    estimator: str = "likelihood"  # Mosaic: "likelihood" (log p of the gold answer) or "rollout" (continuations)
    continuations: int = 4  # Mosaic rollout estimator: continuations per session boundary (M)
    root_start: str = "rollout"  # Mosaic rollout estimator: where the root chain's value starts (algos.credit)
    lambda_use: float = 0.5  # Mosaic: weight of the session-usage term
    beta: float = 0.5  # Mosaic: weight of the session-contribution term (not TRL's KL beta)
    clip: float | None = 5.0  # Mosaic: advantages clipped to [-clip, clip]

    def __post_init__(self) -> None:
        if self.credit not in CREDITS:
            raise ValueError(f"credit={self.credit!r}: use one of {', '.join(CREDITS)}")
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"estimator={self.estimator!r}: use one of {', '.join(ESTIMATORS)}")
        if self.root_start not in mosaic_credit.ROOT_STARTS:
            raise ValueError(f"root_start={self.root_start!r}: use one of {', '.join(mosaic_credit.ROOT_STARTS)}")


@dataclass
class SessionGroup:
    """One group as the trainer trained it: its episodes, each session's D (Mosaic) and advantage, its rows.

    ``rows[r]`` is ``(i, sid)``: row ``r`` of the group's part of the batch is (a sequence of) session ``sid`` of
    ``trajectories[i]``.
    """

    trajectories: list[Trajectory]
    contributions: list[np.ndarray] | None
    advantages: dict[tuple[int, int], float]
    rows: list[tuple[int, int]] = field(default_factory=list)


def env_reward(trajectories: Sequence[Trajectory], **_: Any) -> list[float]:
    """The env's reward of each episode: the reward source :class:`MosaicGRPOTrainer` hands ``GRPOTrainer``."""
    return [float(t.reward) for t in trajectories]


def task_dataset(env: gym.Env) -> Dataset:
    """One row per task of ``env`` (its split): ``prompt`` (the question, which TRL's logs show) and ``task_id``.

    Example:
        >>> import gymnasium as gym
        >>> rows = task_dataset(gym.make("mosaic/WebQA-Single-v0", site_size=120))
        >>> rows.column_names
        ['prompt', 'task_id']
    """
    tasks = envs.view(env).tasks
    return Dataset.from_dict({"prompt": [t.question for t in tasks], "task_id": [t.id for t in tasks]})


def session_rows(group: Sequence[Trajectory], advantages: dict[tuple[int, int], float]
                 ) -> tuple[list[tuple[int, int]], list[TrainSequence]]:
    """Every session of a group as training sequences with its advantage, keyed ``(i, sid)`` in tree order.

    A session in which the agent took no step (a handoff on the last step) has no row; one whose chat template
    rewrote earlier turns has several, each with the session's advantage (:func:`agents.records.pack_session`).
    """
    keys, rows = [], []
    for i, t in enumerate(group):
        for sid, sequences in session_sequences(t).items():
            for s in sequences:
                s.advantage = advantages[(i, sid)]
                keys.append((i, sid))
                rows.append(s)
    return keys, rows


class MosaicGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` on a mosaic-gym env: episodes as rollouts, one row per session, our advantages.

    Args:
        model: the policy, a Transformers causal LM (the one the agent samples from and TRL trains).
        make_env: builds one env (called once for the tasks and gold answers, then once per parallel episode).
        args: TRL's ``GRPOConfig``. ``num_generations`` is the group size, ``max_completion_length`` the tokens
            of one step (an action), ``temperature`` the agent's, ``scale_rewards`` ``"group"`` or ``"none"``.
            One process, and one optimizer step per generation batch (``steps_per_generation=1``): the rows of a
            batch vary in number, and TRL would split them evenly.
        processing_class: the model's tokenizer.
        train_dataset: rows with ``task_id`` (and optionally ``max_steps``, the episode's budget); default
            :func:`task_dataset` of the env.
        credit: :class:`SessionCredit` (default: broadcast).
        num_envs: episodes run side by side.
        examples: a worked exchange the agent puts in every prompt (``envs.prompts.EXAMPLE_EXCHANGE``).
        callbacks: TRL/Transformers callbacks.
    """

    # What Transformers' Trainer types more widely (TrainingArguments, any processor, an optional model) is, in this
    # trainer, the GRPOConfig, the tokenizer and the policy it is given.
    args: GRPOConfig
    processing_class: PreTrainedTokenizerBase
    model: torch.nn.Module

    def __init__(self, model: Any, make_env: Callable[[], gym.Env], args: GRPOConfig,
                 processing_class: PreTrainedTokenizerBase,
                 train_dataset: Dataset | None = None, credit: SessionCredit | None = None, num_envs: int = 8,
                 examples: Sequence[dict[str, str]] = (), callbacks: list[Any] | None = None):
        if args.steps_per_generation != 1:
            raise ValueError(f"steps_per_generation={args.steps_per_generation} (gradient_accumulation_steps="
                             f"{args.gradient_accumulation_steps}): MosaicGRPOTrainer takes one optimizer step per "
                             "generation batch; set gradient_accumulation_steps=1 and steps_per_generation=1")
        if args.scale_rewards not in ("group", "none"):
            raise ValueError(f"scale_rewards={args.scale_rewards!r}: our advantages are group-relative; use "
                             "'group' (divide by the group's reward std) or 'none' (Dr. GRPO)")
        self.credit = credit or SessionCredit()
        self.env = make_env()
        self.collector = Collector(make_env, num_envs)
        self.examples = list(examples)
        self.last_groups: list[SessionGroup] = []  # the groups of the last generation batch (logs, tests)
        self.last_batch: dict[str, torch.Tensor] = {}  # its rows, in group order, before TRL shuffles them
        self._rng = np.random.default_rng(args.seed)
        self._agent: LLMAgent | None = None
        # (TRL types a reward function's result list[float | None], invariantly; env_reward's list[float] is one.)
        super().__init__(model=model, reward_funcs=env_reward, args=args,  # type: ignore[arg-type]
                         train_dataset=train_dataset if train_dataset is not None else task_dataset(self.env),
                         processing_class=processing_class, callbacks=callbacks)
        if self.accelerator.num_processes != 1:
            raise ValueError("MosaicGRPOTrainer runs in one process: a group's sessions must be scored together")

    def agent(self) -> LLMAgent:
        """The agent sampling from the trainer's current weights (its caches follow weight updates)."""
        model = self.accelerator.unwrap_model(self.model)
        if self._agent is None or self._agent.model is not model:
            tokens = self.args.max_completion_length
            if tokens is None:
                raise ValueError("max_completion_length=None: the agent needs a token limit per step (an action)")
            self._agent = LLMAgent(model, self.processing_class, temperature=self.args.temperature,
                                   max_new_tokens=tokens, seed=self.args.seed,
                                   examples=self.examples)
        return self._agent

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        mode = "train" if self.model.training else "eval"
        size = self.num_generations if mode == "train" else self.num_generations_eval
        if size is None:  # (GRPOTrainer sets both from GRPOConfig, whose num_generations defaults to 8)
            raise RuntimeError(f"GRPOTrainer has no group size for {mode}: set num_generations in GRPOConfig")
        groups = _groups(inputs, size)
        agent = self.agent()
        agent.reset()
        mosaic_rollout = self.credit.credit == "mosaic" and self.credit.estimator == "rollout"
        requests = [Request(seed=int(self._rng.integers(2**31)), group=g,
                            options={"task_id": x["task_id"], **({"max_steps": x["max_steps"]} if "max_steps" in x
                                                                  else {})})
                    for g, group in enumerate(groups) for x in group]
        model = self.accelerator.unwrap_model(self.model)
        training = model.training
        model.eval()
        try:
            trajectories = self.collector.run(agent, requests, record_snapshots=mosaic_rollout)
            self.last_groups = [self.score_group([t for t in trajectories if t.group == g])
                                for g in range(len(groups))]
        finally:
            model.train(training)
        keys, sequences = [], []
        for g, group in enumerate(self.last_groups):
            group.rows, rows = session_rows(group.trajectories, group.advantages)
            keys += [(g, *key) for key in group.rows]
            sequences += rows
        if not sequences:
            raise RuntimeError("no session of the batch took a step: check the env's max_steps and the agent")
        batch = self._tensors(sequences)
        self._log_rollouts(mode, trajectories, len(sequences), batch["advantages"])
        self.last_batch = batch
        return batch

    def score_group(self, group: list[Trajectory]) -> SessionGroup:
        """One group's contributions (Mosaic, by the agent over the current weights) and one advantage per session,
        keyed ``(i, sid)``: every session of the tree, as :meth:`algos.credit.Credit.session_advantages` keys
        them (a session that never acted counts in ``K_i`` but has no row)."""
        c = self.credit
        agent = self.agent()
        d = None
        if c.credit == "mosaic" and c.estimator == "likelihood":
            answer = envs.view(self.env).task(group[0].task_id).answer
            d = mosaic_credit.likelihood_contributions(group, agent.model, agent.encode_action, answer,
                                                       device=str(agent.device))
        elif c.credit == "mosaic":
            d = mosaic_credit.rollout_contributions(group, self.collector, agent, c.continuations,
                                                    seed=int(self._rng.integers(2**31)), root_start=c.root_start)
        keys = [(i, sid) for i, t in enumerate(group) for sid in t.session_ids]
        traj = np.array([i for i, _ in keys])
        rewards = env_reward(group)
        normalize_std = self.args.scale_rewards == "group"
        if c.credit == "broadcast":
            values = adv.broadcast(rewards, traj, normalize_std=normalize_std)
        else:
            if d is None:
                raise RuntimeError(f"credit {c.credit!r} (estimator {c.estimator!r}) estimated no contributions")
            values = adv.mosaic(rewards, traj, np.array([d[i][sid] for i, sid in keys]), lambda_use=c.lambda_use,
                                beta=c.beta, clip=c.clip, normalize_std=normalize_std)
        return SessionGroup(group, d, dict(zip(keys, values.tolist())))

    def _tensors(self, sequences: list[TrainSequence]) -> dict[str, Any]:
        """The rows as ``GRPOTrainer``'s loss reads them: left-padded prompts, right-padded completions."""
        device = self.accelerator.device
        pad_id = self.processing_class.pad_token_id
        pad_id = self.processing_class.eos_token_id if pad_id is None else pad_id
        prompts, completions, tool_masks = [], [], []
        for s in sequences:
            start = s.gen_mask.index(True)  # the session's first generated token: its prompt ends there
            prompts.append(torch.tensor(s.token_ids[:start]))
            completions.append(torch.tensor(s.token_ids[start:]))
            tool_masks.append(torch.tensor(s.gen_mask[start:], dtype=torch.long))
        prompt_ids = pad(prompts, padding_value=pad_id, padding_side="left").to(device)
        prompt_mask = pad([torch.ones_like(p) for p in prompts], padding_value=0, padding_side="left").to(device)
        completion_ids = pad(completions, padding_value=pad_id, padding_side="right").to(device)
        completion_mask = pad([torch.ones_like(c) for c in completions], padding_value=0,
                              padding_side="right").to(device)
        tool_mask = pad(tool_masks, padding_value=0, padding_side="right").to(device)
        batch = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
                 "completion_mask": completion_mask, "tool_mask": tool_mask,
                 "advantages": torch.tensor([s.advantage for s in sequences], dtype=torch.float32, device=device),
                 "num_items_in_batch": (completion_mask * tool_mask).sum()}
        ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention = torch.cat([prompt_mask, completion_mask], dim=1)
        keep = completion_ids.size(1)
        with torch.no_grad():
            # TRL's own rule: old log-probs only when a batch is trained on after the weights moved (num_iterations
            # > 1); otherwise the ratio is 1 and the loss reads the current log-probs, detached.
            generate_every = self.num_iterations  # (times steps_per_generation, which __init__ holds at 1)
            if self.args.gradient_accumulation_steps % generate_every != 0:
                batch["old_per_token_logps"] = self._get_per_token_logps_and_entropies(
                    self.model, ids, attention, keep, batch_size=self.args.per_device_train_batch_size)[0]
            if self.beta != 0.0:
                batch["ref_per_token_logps"] = self._get_per_token_logps_and_entropies(
                    self.ref_model, ids, attention, keep, batch_size=self.args.per_device_train_batch_size)[0]
        return batch

    def _log_rollouts(self, mode: str, trajectories: list[Trajectory], rows: int, advantages: torch.Tensor) -> None:
        metrics = self._metrics[mode]
        metrics["reward"].append(float(np.mean(env_reward(trajectories))))
        metrics["sessions"].append(float(np.mean([t.num_sessions for t in trajectories])))
        metrics["rows"].append(float(rows))
        metrics["advantage_abs_mean"].append(float(advantages.abs().mean()))


def _groups(inputs: list[dict[str, Any]], size: int) -> list[list[dict[str, Any]]]:
    """The batch's prompts in groups of ``size`` consecutive rows of one task (TRL's sampler repeats each prompt)."""
    if len(inputs) % size:
        raise ValueError(f"a batch of {len(inputs)} prompts does not hold whole groups of {size}: make "
                         "per_device_train_batch_size a multiple of num_generations")
    groups = [inputs[k:k + size] for k in range(0, len(inputs), size)]
    for group in groups:
        if "task_id" not in group[0]:
            raise ValueError(f"dataset rows need a 'task_id' column (see task_dataset); got {sorted(group[0])}")
        if len({x["task_id"] for x in group}) != 1:
            raise ValueError(f"a group holds several tasks {sorted({x['task_id'] for x in group})}: the dataset "
                             "must be sampled by GRPOTrainer's repeat sampler (num_generations per prompt)")
    return groups
