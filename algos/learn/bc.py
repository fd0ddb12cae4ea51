"""Warm start: behaviour cloning of an ``LLMAgent`` on ``OracleAgent`` demonstrations.

A model that starts from nothing knows neither the action format nor what a good step looks like; sparse
final reward then gives RL nothing to work with (``docs/findings.md``). So the oracle plays (compacting and
forking where its knobs say), and the student records, at every step, the exact tokens it would have
conditioned on and the oracle's action as its own output (:class:`TeacherForcing`). Each session becomes one
training sequence, the loss on the action tokens only.

Example:
    >>> import gymnasium as gym, envs
    >>> from agents import OracleAgent
    >>> from agents.llm import LLMAgent
    >>> from agents.models import load_model
    >>> from algos.rollout import Collector, Request
    >>> model, tokenizer = load_model("tiny-1m", texts=['search("Edra Vane") open(1)'] * 30)
    >>> make = lambda: gym.make("mosaic/WebQA-v0", site_size=150, hops=1)
    >>> env = make()
    >>> forced = TeacherForcing(OracleAgent(env), LLMAgent(model, tokenizer))
    >>> demos = Collector(make, 2).run(forced, [Request(seed=s, options={}) for s in range(2)])
    >>> all(d.reward == 1.0 for d in demos)
    True
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from agents.base import Agent, RecordingAgent
from agents.records import AgentStep, TrainSequence
from envs.web.progress import progress_bar

from algos.logprobs import SharedPrefix, micro_batches, sequence_logprobs
from algos.rollout import Trajectory, session_sequences


class TeacherForcing(RecordingAgent):
    """Acts as ``teacher``; records each action as ``student``'s output (its prompt tokens, the action's tokens).

    The student only tokenizes (:meth:`agents.llm.LLMAgent.record`): the recorded tokens are exactly those it
    would condition on and emit. The steps returned by :meth:`act_batch_recorded` are the student's, so a
    collector packs the demonstrations as it packs the student's own rollouts.
    """

    def __init__(self, teacher: Agent, student: Any):
        self.teacher = teacher
        self.student = student

    def reset(self, index: int | None = None) -> None:
        self.teacher.reset(index)
        self.student.reset(index)

    def act_batch_recorded(self, observations: Sequence[str], infos: Sequence[dict[str, Any]]
                           ) -> tuple[list[str], list[AgentStep]]:
        actions = self.teacher.act_batch(observations, infos)
        return actions, self.student.record(observations, infos, actions)


def clone(model: torch.nn.Module, demos: Sequence[Trajectory], epochs: int, lr: float, device: str = "cpu",
          micro_batch_tokens: int = 8192, batch_sequences: int = 8, seed: int = 0,
          optimizer: torch.optim.Optimizer | None = None) -> list[float]:
    """Maximise the log-likelihood of the demonstrated action tokens (token-mean per batch); the loss per batch.

    Only successful demonstrations are used, so the student copies what works.
    """
    sequences = [s for d in demos if d.reward > 0 for seqs in session_sequences(d).values() for s in seqs]
    if not sequences:
        raise ValueError("no successful demonstration to clone: check the oracle's env settings")
    optimizer = optimizer or torch.optim.AdamW(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    losses: list[float] = []
    model.train()
    bar = progress_bar(total=epochs * ((len(sequences) + batch_sequences - 1) // batch_sequences),
                       desc="warm start", leave=False)
    for _ in range(epochs):
        order = torch.randperm(len(sequences), generator=generator).tolist()
        for start in range(0, len(order), batch_sequences):
            batch = [sequences[i] for i in order[start : start + batch_sequences]]
            losses.append(_step(model, optimizer, batch, torch.device(device), micro_batch_tokens))
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    bar.close()
    model.eval()
    return losses


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: list[TrainSequence],
          device: torch.device, micro_batch_tokens: int) -> float:
    total = sum(s.num_generated for s in batch)
    optimizer.zero_grad(set_to_none=True)
    loss_sum = 0.0
    prefix = SharedPrefix.of(model, batch, device)  # the system message, run once for the batch
    for micro in micro_batches(batch, micro_batch_tokens):
        logp, mask = sequence_logprobs(model, micro, device, prefix)
        loss = -(logp * mask).sum() / total
        loss.backward()
        loss_sum += float(loss.detach())
    if prefix is not None:
        prefix.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss_sum
