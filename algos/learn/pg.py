"""Policy gradient for LLM policies across sessions: broadcast or Mosaic credit, one loss, read top to bottom.

Every session is its own training sequence (its own context), with the loss on the tokens the model
generated in it. The objective (``docs/algorithms.md``, eqs. (12)-(15)) for a batch of sessions s with tokens t:

    ratio_t = exp(logp_t - old_logp_t)
    loss    = sum_{s,t in gen(s)} -min(ratio_t * A_s, clip(ratio_t, 1 - eps, 1 + eps) * A_s) / N_gen
              + kl_coef * sum_{s,t} k3(ref_logp_t, logp_t) / N_gen

``N_gen`` is the number of generated tokens in the whole batch (token-mean over the batch), so a trajectory
with more sessions does not weigh more for having more rows.

A choose-mode policy (``LLMAgent(mode="choose")``) acts by sampling one of the env's candidates from the
softmax of their scores, so its unit is the choice, not the token: for such sequences ``logp`` is
``log softmax_c(score_c / T)[chosen]`` over that step's candidates (:func:`choice_logprobs`), and ``N_gen``
counts choices. (Training the chosen candidate's own tokens instead would miss the ``-E_pi[grad score]`` term.)
``A_s`` comes from :mod:`algos.credit.advantages` (``broadcast`` or ``mosaic``), computed per group with statistics
once per trajectory.

Example:
    >>> import torch
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
    ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2))
    >>> seq = TrainSequence(token_ids=[1, 5, 6, 7], gen_mask=[False, False, True, True],
    ...                     old_logprobs=[0.0, 0.0, -3.4, -3.5], advantage=1.0)
    >>> pg = PolicyGradient(model, PGConfig(lr=1e-3))
    >>> stats = pg.update([seq])
    >>> [k for k in ("approx_kl", "kl_after", "entropy", "optimizer_steps") if k in stats]
    ['approx_kl', 'kl_after', 'entropy', 'optimizer_steps']
"""

from __future__ import annotations

import copy
import math
from typing import Iterable, Sequence

import numpy as np
import torch

from agents.attention import use_skip_hidden_keys
from agents.records import TrainSequence

from algos.credit import advantages as adv
from algos.learn.config import PGConfig
from algos.logprobs import SharedPrefix, choice_logprobs, micro_batches, runs, sequence_logprobs


class PolicyGradient:
    """Clipped, token-level policy gradient on a causal LM, with broadcast or Mosaic advantages.

    Args:
        model: the policy (a Transformers causal LM; the one the ``LLMAgent`` samples from).
        config: :class:`PGConfig`.
    """

    def __init__(self, model: torch.nn.Module, config: PGConfig | None = None):
        self.config = config or PGConfig()
        self.device = torch.device(self.config.device)
        self.model = model.to(self.device, dtype=getattr(torch, self.config.dtype))
        use_skip_hidden_keys(self.model)  # (the same outputs as SDPA, less work on CPU: agents.attention)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=self.config.lr,
                                           weight_decay=self.config.weight_decay)
        self.ref_model = None
        if self.config.kl_coef > 0:
            self.ref_model = copy.deepcopy(self.model).eval()
            for p in self.ref_model.parameters():
                p.requires_grad_(False)

    # --- credit assignment ------------------------------------------------------------------------
    def advantages(self, rewards: Sequence[float], session_traj: Sequence[int],
                   contributions: Sequence[float] | None = None, advantage: str | None = None) -> np.ndarray:
        """One group's advantage per session row (row s belongs to trajectory ``session_traj[s]``), under the
        learner's credit or, with ``advantage``, under the other one with the same settings
        (:func:`algos.credit.advantages.by_name`; a training run asks its :class:`algos.credit.Credit`)."""
        c = self.config
        if advantage is not None and advantage not in adv.ALGORITHMS:
            raise ValueError(f"advantage={advantage!r}: use one of {adv.ALGORITHMS} (None: the learner's own)")
        return adv.by_name(advantage or c.advantage, rewards, session_traj, contributions,
                           normalize_std=c.normalize_std, lambda_use=c.lambda_use, beta=c.beta, clip=c.adv_clip)

    # --- the update -------------------------------------------------------------------------------
    def update(self, sequences: Sequence[TrainSequence]) -> dict[str, float | None]:
        """PPO on a batch of session sequences: ``epochs`` passes, each in ``minibatches`` optimizer steps.

        Each minibatch's loss is its units' token-mean (with one minibatch: the whole batch's, eq. (13)). From the
        second step on, the pass that computes a minibatch's loss also measures the KL between the policy that
        sampled the batch and the current one (after the steps taken so far); with ``target_kl`` set, the update
        stops before a step when that KL passes ``1.5 * target_kl`` (SB3's rule). After the last step, one pass
        without gradient over the batch measures what the update did (:meth:`measure`): the metrics
        ``kl_after``, ``clip_fraction_after``, ``entropy`` and the mean change of the chosen units' log-probs for
        positive, negative and zero advantages (``dlogp_pos``, ``dlogp_neg``, ``dlogp_zero``). With
        ``measure_fraction`` below 1 it measures that share of the batch (:func:`measured_share`); at 0 there is
        no such pass and no such metrics.
        """
        c = self.config
        sequences = [s for s in sequences if s.num_units > 0]
        if not sequences:
            return {"loss": 0.0, "clip_fraction": 0.0, "approx_kl": 0.0, "grad_norm": 0.0, "tokens": 0,
                    "sequences_run": 0, "optimizer_steps": 0}
        # Choice sequences and token sequences never share a micro-batch (their units differ).
        sequences = [s for s in sequences if s.choices] + [s for s in sequences if not s.choices]
        self.model.train()
        ref_prefix = None
        if self.ref_model is not None:
            with torch.no_grad():
                ref_prefix = SharedPrefix.of(self.ref_model, sequences, self.device)
        stats: dict[str, float | None] = {"loss": 0.0, "clip_fraction": 0.0, "grad_norm": 0.0, "kl_ref": 0.0}
        kls: list[float] = []
        steps = 0
        stopped = False
        ran: set[int] = set()
        for epoch in range(c.epochs):
            for part in minibatch_split(sequences, c.minibatches, seed=epoch):
                total = float(sum(s.num_units * s.weight for s in part))
                # A sequence of advantage 0 adds nothing to the loss or its gradient (unless a KL or entropy term
                # is on): it is not run. (In the demo, most sessions of most iterations: groups that all succeeded
                # or all failed, with no session's contribution telling them apart.) It still counts in the
                # token-mean, as it did when every sequence ran.
                running = [s for s in part if s.advantage != 0 or c.kl_coef > 0 or c.entropy_coef > 0]
                step = self._step(running, total, ref_prefix, measure_kl=steps > 0 and bool(running))
                if steps > 0 and running:
                    kls.append(step["approx_kl"])
                    if c.target_kl is not None and step["approx_kl"] > 1.5 * c.target_kl:
                        stopped = True  # (its gradient is dropped: the step is not taken)
                        self.optimizer.zero_grad(set_to_none=True)
                        break
                self.optimizer.step()
                steps += 1
                ran.update(id(s) for s in running)
                for key in ("loss", "clip_fraction", "grad_norm", "kl_ref"):
                    stats[key] = step[key]
            if stopped:
                break
        self.model.eval()
        measured = measured_share(sequences, c.measure_fraction)
        if measured:
            stats.update(self.measure(measured))
        stats["approx_kl"] = float(np.mean(kls)) if kls else 0.0  # measured by the passes after the first step
        stats["kl_step_max"] = float(max(kls)) if kls else 0.0
        stats["optimizer_steps"] = steps
        stats["stopped_by_target_kl"] = float(stopped)
        stats["tokens"] = float(sum(s.num_units * s.weight for s in sequences))
        stats["sequences_run"] = len(ran)
        return stats

    def _step(self, running: Sequence[TrainSequence], total: float, ref_prefix: SharedPrefix | None,
              measure_kl: bool) -> dict[str, float]:
        """The loss and gradient of one minibatch (``running``, normalised by ``total`` units), clipped; the
        optimizer step is the caller's. With nothing to run (every sequence of advantage 0) the gradient is zeros:
        the optimizer still takes its momentum step, as it did when such sequences ran."""
        c = self.config
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = clipped = kl_sum = approx_kl = 0.0
        prefix = SharedPrefix.of(self.model, running, self.device)
        for batch in _homogeneous(micro_batches(running, c.micro_batch_tokens)):
            logp, old, mask, entropy = _unit_logprobs(self.model, batch, self.device, prefix,
                                                      with_entropy=c.entropy_coef > 0)
            adv_t = torch.tensor([s.advantage for s in batch], device=self.device)[:, None]
            w = torch.tensor([s.weight for s in batch], device=self.device)[:, None] * mask
            ratio = torch.exp(logp - old)
            surrogate = torch.minimum(ratio * adv_t, torch.clamp(ratio, 1 - c.clip_eps, 1 + c.clip_eps) * adv_t)
            loss = -(surrogate * w).sum() / total
            if c.entropy_coef > 0:
                loss = loss - c.entropy_coef * (entropy * w).sum() / total
            if self.ref_model is not None:
                with torch.no_grad():
                    ref = _unit_logprobs(self.ref_model, batch, self.device, ref_prefix)[0]
                k3 = _k3(ref - logp)
                loss = loss + c.kl_coef * (k3 * w).sum() / total
                kl_sum += float((k3.detach() * w).sum())
            if loss.requires_grad:  # (not when every choice of the micro-batch had a single candidate)
                loss.backward()
            loss_sum += float(loss.detach())
            clipped += float(((torch.abs(ratio - 1) > c.clip_eps) * mask).sum())
            if measure_kl:
                approx_kl += float((_k3(logp.detach() - old) * w).sum())
        if prefix is not None:
            prefix.backward()
        for p in self.model.parameters():  # (a gradient of zeros where no pass ran: AdamW's step is the same)
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.max_grad_norm)
        units = max(float(sum(s.num_units * s.weight for s in running)), 1e-12)
        return {"loss": loss_sum, "clip_fraction": clipped / units, "grad_norm": float(grad_norm),
                "kl_ref": kl_sum / total, "approx_kl": approx_kl / units}

    @torch.no_grad()
    def measure(self, sequences: Sequence[TrainSequence]) -> dict[str, float | None]:
        """What the policy now is against the one that sampled ``sequences``, one pass without gradient.

        ``kl_after``: the k3 estimate of KL(sampling policy || current policy) per unit; ``clip_fraction_after``:
        the units whose ratio left ``[1 - clip_eps, 1 + clip_eps]``; ``entropy``: nats per choice of several
        candidates (choose mode) or per generated token; ``dlogp_pos`` / ``dlogp_neg`` / ``dlogp_zero``: the mean
        change of the chosen units' log-probs where the advantage was positive, negative or zero (None where none
        was); ``units_measured``. Sequences of one :func:`run_key` run once.
        """
        c = self.config
        sums = {"kl": 0.0, "clip": 0.0, "units": 0.0, "ent": 0.0, "ent_units": 0.0}
        delta = {"pos": [0.0, 0.0], "neg": [0.0, 0.0], "zero": [0.0, 0.0]}
        if not sequences:
            return {}
        prefix = SharedPrefix.of(self.model, sequences, self.device)
        for batch in _homogeneous(micro_batches(sequences, c.micro_batch_tokens)):
            logp, old, mask, entropy = _unit_logprobs(self.model, batch, self.device, prefix, with_entropy=True)
            w = torch.tensor([s.weight for s in batch], device=self.device)[:, None] * mask
            diff = logp - old
            sums["kl"] += float((_k3(diff) * w).sum())
            sums["clip"] += float(((torch.abs(torch.exp(diff) - 1) > c.clip_eps) * w).sum())
            sums["units"] += float(w.sum())
            # Entropy over units that were a choice (several candidates) or a generated token.
            real = mask if not batch[0].choices else mask & torch.tensor(
                [[len(ch.candidates) > 1 for ch in s.choices] + [False] * (mask.shape[1] - len(s.choices))
                 for s in batch], device=self.device)
            sums["ent"] += float((entropy * real).sum())
            sums["ent_units"] += float(real.sum())
            for b, s in enumerate(batch):
                kind = "pos" if s.advantage > 0 else "neg" if s.advantage < 0 else "zero"
                counted = real[b]
                delta[kind][0] += float(diff[b][counted].sum())
                delta[kind][1] += float(counted.sum())
        units = max(sums["units"], 1.0)
        out: dict[str, float | None] = {"kl_after": sums["kl"] / units, "clip_fraction_after": sums["clip"] / units,
                                 "entropy": sums["ent"] / sums["ent_units"] if sums["ent_units"] else 0.0,
                                 "units_measured": sums["units"]}
        for kind, (total, n) in delta.items():
            out[f"dlogp_{kind}"] = total / n if n else None
        return out


def _k3(diff: torch.Tensor) -> torch.Tensor:
    """The k3 estimate (eq. (14)) per unit, ``e^d - d - 1`` of ``d = log p - log q`` for samples of ``q``: of
    KL(q || p), non-negative, unbiased (Schulman's approximation). The update's KL to its reference takes
    ``d = logp_ref - logp``; what it measures of its own move, ``d = logp_new - logp_old``."""
    return torch.exp(diff) - diff - 1


def minibatch_split(sequences: Sequence[TrainSequence], minibatches: int, seed: int = 0
                    ) -> list[list[TrainSequence]]:
    """``sequences`` in ``minibatches`` parts of near-equal size, in an order shuffled by ``seed`` (one part: all,
    in order). Sequences of one :func:`run_key` stay in one part (they share a pass).

    >>> seqs = [TrainSequence([1, k], [False, True], [0.0, 0.0]) for k in range(5)]
    >>> [len(p) for p in minibatch_split(seqs, 2, seed=0)]
    [3, 2]
    """
    if minibatches <= 1:
        return [list(sequences)]
    members = runs(sequences)
    order = np.random.default_rng(seed).permutation(len(members))
    parts: list[list[TrainSequence]] = [[] for _ in range(min(minibatches, len(members)))]
    for n, i in enumerate(order):
        parts[n % len(parts)] += members[i]
    return [p for p in parts if p]


def measured_share(sequences: Sequence[TrainSequence], fraction: float) -> list[TrainSequence]:
    """The sequences of ``ceil(fraction * n)`` of the batch's ``n`` runs (:func:`algos.logprobs.runs`: sequences
    that share a pass), evenly spaced through the batch in its order: no random draw, so a run resumed from a
    checkpoint measures what it would have. ``fraction`` 1: all; 0: none.

    >>> seqs = [TrainSequence([1, k], [False, True], [0.0, 0.0]) for k in range(8)]
    >>> [s.token_ids[1] for s in measured_share(seqs, 0.25)]
    [0, 4]
    """
    members = runs(sequences)
    if fraction <= 0 or not members:
        return []
    # (1e-9: a share that is a whole number of runs, such as 0.3 of 10, takes that many, not one more)
    keep = max(1, math.ceil(fraction * len(members) - 1e-9))
    picked = np.floor(np.arange(keep) * len(members) / keep).astype(int)
    return [s for i in picked for s in members[i]]


def _unit_logprobs(model: torch.nn.Module, batch: Sequence[TrainSequence], device: torch.device,
                   prefix: SharedPrefix | None = None, with_entropy: bool = False
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(logp, old, mask, entropy)`` of the batch's loss units (choices or generated tokens), zero outside
    ``mask``; ``entropy`` is zeros unless ``with_entropy`` (choices: always computed, it costs nothing).

    Outside the loss (prompts, padding) log-probs are zeroed before any exp: there they could overflow, and
    inf * 0 would turn a masked sum into nan.
    """
    if batch[0].choices:
        logp, old, mask, entropy = choice_logprobs(model, batch, device, prefix)
    elif with_entropy:
        logp, mask, entropy = sequence_logprobs(model, batch, device, prefix, with_entropy=True)
        old = _padded([s.old_logprobs for s in batch], logp.shape, device)
    else:
        logp, mask = sequence_logprobs(model, batch, device, prefix)
        entropy = torch.zeros_like(logp)
        old = _padded([s.old_logprobs for s in batch], logp.shape, device)
    return (torch.where(mask, logp, 0.0), torch.where(mask, old, 0.0), mask, torch.where(mask, entropy, 0.0))


def _homogeneous(batches: Iterable[list[TrainSequence]]) -> Iterable[list[TrainSequence]]:
    """Micro-batches split where choice sequences end and token sequences begin."""
    for batch in batches:
        split = [s for s in batch if s.choices], [s for s in batch if not s.choices]
        yield from (part for part in split if part)


def _padded(rows: Sequence[Sequence[float]], shape: torch.Size, device: torch.device) -> torch.Tensor:
    out = torch.zeros(shape, device=device)
    for b, row in enumerate(rows):
        out[b, : len(row)] = torch.tensor(row, device=device)
    return out
