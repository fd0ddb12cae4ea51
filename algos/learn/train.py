"""Training an LLM policy across sessions: warm start, then broadcast or Mosaic policy gradient.

Read top to bottom: :class:`TrainConfig` holds every setting (one line each), :func:`train` is the loop.

1. Build the env, the model (a tiny preset, a local folder, SmolLM2, a hub id) and an ``LLMAgent``.
2. Warm start: behaviour cloning on ``OracleAgent`` demonstrations (:mod:`algos.learn.bc`).
3. RL: each iteration draws ``tasks_per_iter`` train tasks, one budget per group (BudgetMix), runs
   ``group_size`` trajectories per task, computes one advantage per session (broadcast or Mosaic, with
   the rollout or likelihood estimator of marginal contribution) and takes one :class:`PolicyGradient` step.
4. Held-out success (the test split) before and after RL; metrics to ``metrics.jsonl`` every iteration; a
   checkpoint every iteration (atomic; ``resume=True`` continues exactly); a training-curve PNG and the
   trained model (``final/``, loadable by ``mosaic eval --agent``) at the end.

The settings are written to ``config.json`` in the run folder when it starts. A resume must keep them (only
``iterations`` may change, :data:`algos.learn.config.RESUMABLE`); one stopped before its first checkpoint (during the
warm start) starts again from the beginning, exactly as a run that never stopped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import gymnasium as gym
import numpy as np
import torch

import envs  # noqa: F401  (registers the environments)
from agents import OracleAgent
from agents.llm import LLMAgent
from agents.models import load_model
from envs.pool import EnvPool, make_pool
from envs.memory import peak_rss_mib
from envs.web.progress import progress_bar
from envs.prompts import EXAMPLE_EXCHANGE

from algos import logs
from algos.learn.bc import TeacherForcing, clone
from algos.learn.budgets import FixedBudget, parse_budgets
from algos.learn.checkpoint import (CheckpointError, check_training_state, read_checkpoint, remove_stale_temps,
                         restore_checkpoint, save_checkpoint)
from algos.learn.config import (RESUMABLE, WARM_START_FREE, ConfigError, TrainConfig, changed_settings, config_to_json,
                     read_config, write_config, write_text_atomic)
from algos.credit.estimators import credit_for
from algos.learn.lora import add_lora, merge_lora
from algos.learn.pg import PolicyGradient
from algos.evaluate.probes import ProbeState, probe_metrics, probe_probabilities, summary_states
from algos.rollout import Collector, Request, session_sequences
from algos.evaluate.session_metrics import group_diversity, session_metrics

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from algos.rollout import Trajectory


def train(config: TrainConfig, log: Any = print, reporters: Sequence[Any] = ()) -> dict[str, Any]:
    """Run (or resume) training; returns the summary (held-out success before and after RL, and more).

    ``reporters`` (:mod:`algos.learn.reporting`: TensorBoard, W&B) get each iteration's metrics too, besides
    ``metrics.jsonl``.
    """
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = out / "checkpoint.pt"
    for stale in remove_stale_temps(checkpoint):
        log(f"removed {stale}, left by a checkpoint write that was killed")
    # Read (and checked) first: a checkpoint that cannot be resumed from is refused before any work is done.
    payload = _resume_payload(config, checkpoint, log)
    resumed = payload is not None
    if not resumed and config.warm_start_from is not None:
        payload = _warm_start_payload(config, config.warm_start_from, log)
    write_config(out / "config.json", config)
    _seed_everything(config.seed)
    make_env = lambda split="train": gym.make(config.env_id, **{**config.env_kwargs, "split": split})  # noqa: E731
    env = make_env()
    # (a warm start taken from another run: the model is built here, then its weights come from that checkpoint)
    model, tokenizer = _model(config, env, out, from_run=resumed)
    adapters = add_lora(model, config.lora_rank, seed=config.seed) if config.lora_rank else None
    agent = make_agent(config, model, tokenizer)
    learner = PolicyGradient(model, config.pg)
    collector = Collector(make_env, config.num_envs, pool=_ray_pool(config, "train"))
    eval_collector = Collector(lambda: make_env("test"), config.num_envs, pool=_ray_pool(config, "test"))
    sampler = budget_sampler(config)
    rng = np.random.default_rng(config.seed)

    state: dict[str, Any] = {"iteration": 0, "phase": "warm_start", "history": [], "summary": {}}
    if payload is not None:
        # A warm start's RL optimiser has taken no step (phase rl, iteration 0): this run keeps its own, built
        # with its own learning rate; a resume continues the checkpoint's.
        restore_checkpoint(checkpoint, payload, model, learner.optimizer if resumed else None)
        state = payload["extra"]["state"]
        rng.bit_generator.state = payload["extra"]["rng"]
        agent.generator.set_state(payload["extra"]["agent_rng"])
        if learner.ref_model is not None:  # (KL switched on at resume: anchor to the policy as it stands)
            learner.ref_model.load_state_dict(payload["extra"].get("ref_model", payload["model"]))
        if resumed:
            log(f"resumed from {checkpoint} at iteration {state['iteration']} ({state['phase']})")

    def save() -> None:
        # What a resumed run starts with: an agent holding no keys from before (a run resumed here has none).
        agent.reset()
        ref = {"ref_model": learner.ref_model.state_dict()} if learner.ref_model is not None else {}
        save_checkpoint(checkpoint, model, learner.optimizer, state["iteration"],
                        extra={"state": state, "rng": rng.bit_generator.state,
                               "agent_rng": agent.generator.get_state(), "config": config_to_json(config), **ref})

    probe_states = None
    if config.active_probe == "summary":
        probe_states = summary_states(make_env(), config.probe_states, seed=10_007)
    parts = _Run(config, out, agent, learner, collector, eval_collector, env, state, save, log, reporters,
                 probe_states)
    if state["phase"] == "warm_start":
        _warm_start(parts, model)
    _rl_loop(parts, sampler, rng)
    return _finish(parts, model, tokenizer, adapters)


def _probe(config: TrainConfig, agent: LLMAgent, states: list[ProbeState]) -> dict[str, Any]:
    """``config.probe``'s metrics of the policy as it stands (:mod:`algos.evaluate.probes`): exact, no sampling."""
    p = probe_probabilities(agent, states, config.temperature, config.length_normalize, device=config.pg.device,
                            max_tokens=config.pg.micro_batch_tokens)
    return probe_metrics(p, config.active_probe or "summary")


def _ray_pool(config: TrainConfig, split: str) -> EnvPool | None:
    """With ``config.ray``, the split's envs on Ray workers (the same results as local envs); else None."""
    if config.ray is None:
        return None
    return make_pool(config.env_id, {**config.env_kwargs, "split": split}, config.num_envs, ray=config.ray)


@dataclasses.dataclass
class _Run:
    """What the phases of one training run share (built once by :func:`train`)."""

    config: TrainConfig
    out: Path
    agent: LLMAgent
    learner: PolicyGradient
    collector: Collector
    eval_collector: Collector
    env: gym.Env
    state: dict[str, Any]
    save: Callable[[], None]
    log: Any
    reporters: Sequence[Any] = ()
    probe_states: list[ProbeState] | None = None  # config.probe's fixed states (None: no probe)


BC_MICRO_BATCH_TOKENS = 8192  # the warm start's padded tokens per forward/backward, at most (see _warm_start)


def make_agent(config: TrainConfig, model: PreTrainedModel, tokenizer: Any) -> LLMAgent:
    """The run's agent: its mode, temperature, token limit, prompt examples, seed and device."""
    return LLMAgent(model, tokenizer, mode=config.mode, temperature=config.temperature, seed=config.seed,
                    length_normalize=config.length_normalize, device=config.pg.device,
                    max_new_tokens=config.max_new_tokens,
                    examples=EXAMPLE_EXCHANGE if config.prompt_examples else ())


def _warm_start(run: _Run, model: torch.nn.Module) -> None:
    """Held-out success of the initial policy (if asked), behaviour cloning on oracle demonstrations, and
    held-out success after it; then the run is in its RL phase, checkpointed."""
    config, agent, learner, env, state, log = run.config, run.agent, run.learner, run.env, run.state, run.log
    collector, eval_collector = run.collector, run.eval_collector
    summary = state["summary"]
    if config.eval_initial:
        summary["success_initial"] = evaluate(agent, eval_collector, config, "held-out (initial)")
    if config.bc_episodes > 0:
        started = time.time()
        tasks = envs.view(env).tasks
        budget = {} if config.bc_max_steps is None else {"max_steps": config.bc_max_steps}
        requests = [Request(seed=config.seed * 100_003 + k, options={"task_id": tasks[k % len(tasks)].id, **budget})
                    for k in range(config.bc_episodes)]
        styles = config.bc_styles or [{"compact_at": config.bc_compact_at, "fork": config.bc_fork}]
        demos = []
        for n, style in enumerate(styles):  # demonstration k in style k mod len(styles)
            oracle = OracleAgent(env, **{"fork": config.bc_fork, **style}, seed=config.seed * 1_009 + n)
            demos += collector.run(TeacherForcing(oracle, agent), requests[n::len(styles)],
                                   progress=f"oracle demonstrations ({n + 1}/{len(styles)})" if len(styles) > 1
                                   else "oracle demonstrations")
        # Micro-batches at most the learner's: the setting that fits a model's activations in memory binds the
        # warm start too (SmolLM2's at 8,192 padded tokens reached 12-17 GB on CPU; at 2,048, about 7 GB).
        losses = clone(model, demos, config.bc_epochs, config.bc_lr, device=config.pg.device, seed=config.seed,
                       micro_batch_tokens=min(BC_MICRO_BATCH_TOKENS, config.pg.micro_batch_tokens))
        summary["warm_start_loss"] = [losses[0], losses[-1]]
        summary["demo_sessions"] = float(np.mean([d.num_sessions for d in demos]))
        summary["demo_metrics"] = _finite(session_metrics(demos))
        log(f"warm start: {len(demos)} demonstrations ({summary['demo_sessions']:.2f} sessions each), "
            f"loss {losses[0]:.3f} -> {losses[-1]:.3f} in {time.time() - started:.0f}s")
    if learner.ref_model is not None:  # the KL anchors RL to the warm-started policy, not to the random init
        learner.ref_model.load_state_dict(model.state_dict())
    summary["success_warm_start"] = evaluate(agent, eval_collector, config, "held-out (warm start)")
    log(f"held-out success after warm start: {summary['success_warm_start']['success']:.3f}")
    if run.probe_states is not None:
        summary["probe_warm_start"] = _probe(config, agent, run.probe_states)
        log(f"probe after warm start: {summary['probe_warm_start']}")
    state["phase"] = "rl"
    run.save()


def _rl_loop(run: _Run, sampler: Any, rng: np.random.Generator) -> None:
    """RL iterations up to ``config.iterations``, each logged to ``metrics.jsonl`` and checkpointed."""
    config, out, state = run.config, run.out, run.state
    metrics_path = out / "metrics.jsonl"
    # From the checkpoint's history: no lines of an earlier run in this folder, none twice after a kill.
    metrics_path.write_text("".join(json.dumps(m) + "\n" for m in state["history"]))
    if state["iteration"] < config.iterations:
        state["summary"].pop("success_final", None)  # a finished run extended by resume: evaluate it again
    bar = progress_bar(total=config.iterations, initial=state["iteration"], desc=f"RL ({config.algo})")
    while state["iteration"] < config.iterations:
        it = state["iteration"]
        log_to = _iteration_log(out, it) if config.log_groups else None
        metrics = rl_iteration(config, it, run.agent, run.learner, run.collector, run.env, sampler, rng, log_to)
        if run.probe_states is not None:
            metrics.update(_probe(config, run.agent, run.probe_states))
        state["history"].append(metrics)
        with metrics_path.open("a") as f:
            f.write(json.dumps(metrics) + "\n")
        for reporter in run.reporters:
            reporter.write(metrics, it)
        state["iteration"] = it + 1
        run.save()
        bar.update(1)
        bar.set_postfix(success=f"{metrics['success']:.2f}", sessions=f"{metrics['sessions']:.2f}")
    bar.close()


def _finish(run: _Run, model: PreTrainedModel, tokenizer: Any, adapters: Any = None) -> dict[str, Any]:
    """Held-out success after RL, the trained model in ``final/`` (LoRA ``adapters`` merged into it), the summary,
    the plot and the report."""
    config, out, state = run.config, run.out, run.state
    summary = state["summary"]
    if "success_final" not in summary:
        # No RL iteration (a warm start alone): the policy is the one just evaluated.
        summary["success_final"] = summary["success_warm_start"] if config.iterations == 0 else \
            evaluate(run.agent, run.eval_collector, config, "held-out (after RL)")
        run.save()
    if adapters is not None:
        # In place: the merged model is ``model`` itself (the run's state is saved: the checkpoint keeps the
        # adapters apart).
        merge_lora(adapters)
    model.save_pretrained(out / "final")
    tokenizer.save_pretrained(out / "final")
    summary.update(algo=config.algo, iterations=config.iterations, run=str(out), model=str(out / "final"))
    if state["history"] and state["history"][-1].get("probe_summary") is not None:
        summary["probe_final"] = state["history"][-1]["probe_summary"]
    if "per_task" in summary["success_warm_start"]:
        summary["rl_gain"], summary["rl_gain_stderr"] = paired_gain(summary["success_warm_start"],
                                                                    summary["success_final"])
    # Where this run's credit departed from broadcast's on its logged groups (docs/algorithms.md, section 8):
    # this run's own iteration logs only (a folder may hold an older run's later iterations).
    paths = [_iteration_log(out, it) for it in range(config.iterations)]
    try:
        compared = credit_for(config).compare(r for path in paths if path.is_file() for r in logs.read(path))
    except ValueError as err:  # a damaged log (logs.LogError is one) costs the comparison, not the summary
        run.log(f"credit comparison skipped: {err}")
    else:
        if compared is not None and compared["groups"]["n"]:
            summary["credit_vs_broadcast"] = compared
    write_text_atomic(out / "summary.json", json.dumps(summary, indent=2))  # a study reads it as "finished"
    from algos.plots import plot_training

    plot_training(state["history"], out / "training.png", title=f"{config.algo} on {config.env_id}")
    run.log(_report(summary))
    return summary


def rl_iteration(config: TrainConfig, it: int, agent: LLMAgent, learner: PolicyGradient, collector: Collector,
                 env: gym.Env, sampler: Any, rng: np.random.Generator, log_to: Path | None = None) -> dict[str, Any]:
    """One iteration: groups of rollouts, one advantage per session, one policy-gradient step.

    With ``log_to``, the first ``config.log_groups`` groups (their tasks drawn at random like every group's)
    are written there as a trajectory log (:mod:`algos.logs`), with each session's credit; logging draws no
    random number, so it changes no result.

    The metrics include the seconds of each phase (:class:`PhaseTimes`: ``time_rollouts``,
    ``time_continuations``, ``time_scoring``, ``time_update``, ``time_total``) and the process's peak resident
    memory so far (``memory_peak_mib``); measuring changes no result.
    """
    times = PhaseTimes()
    tasks = envs.view(env).tasks
    credit = credit_for(config)
    trajectories: list[Trajectory] = []
    groups: list[list[Trajectory]] = []
    budgets: list[int] = []
    rounds = config.dynamic_max_draws if config.dynamic_sampling else 1
    unequal = drawn = 0
    for r in range(rounds):
        # A round draws tasks_per_iter groups: their tasks, then per group its budget and its runs' reset seeds.
        first = r * config.tasks_per_iter
        picked = rng.choice(len(tasks), size=config.tasks_per_iter, replace=len(tasks) < config.tasks_per_iter)
        requests = []
        for g, t in enumerate(picked, start=first):
            budget = sampler.sample(rng, it)
            budgets.append(budget)
            requests += [Request(seed=int(rng.integers(2**31)),
                                 options={"task_id": tasks[t].id, "max_steps": budget},
                                 group=g, transcript=log_to is not None and g < config.log_groups)
                         for _ in range(config.group_size)]
        with times.phase("rollouts"):
            runs = collector.run(agent, requests, record_snapshots=credit.needs_snapshots, progress=f"rollouts {it}")
        trajectories += runs
        for g in range(first, first + config.tasks_per_iter):
            group = [t for t in runs if t.group == g]
            drawn += 1
            mixed = len({t.reward for t in group}) > 1
            unequal += mixed
            # Dynamic sampling trains on groups of unequal rewards only, up to the number asked for.
            if not config.dynamic_sampling or (mixed and len(groups) < config.dynamic_sampling):
                groups.append(group)
        if not config.dynamic_sampling or len(groups) >= config.dynamic_sampling:
            break
    sequences, all_adv, contrib_abs, contrib_positive, logged = [], [], [], [], []
    for group in groups:
        d = None
        if credit.phase is not None:
            with times.phase(credit.phase):
                d = credit.contributions(group, collector, agent, envs.view(env).task(group[0].task_id).answer, rng,
                                         config.pg.device)
            if d is None:
                raise RuntimeError(f"credit {credit.name!r} times a {credit.phase!r} phase but estimated no D")
            contrib_abs.append(float(np.abs(np.concatenate(d)).mean()))
            contrib_positive += list(np.concatenate(d) > 0)
        advantage = credit.session_advantages(group, d)  # (trajectory, session id) -> A_s
        if group and group[0].transcript is not None:
            question = envs.view(env).task(group[0].task_id).question
            logged += [logs.from_trajectory(t, question, "train", iteration=it, group=t.group, credit=c)
                       for t, c in zip(group, logs.credit_by_session(group, advantage, d, credit.columns(group, d),
                                                                     credit.name))]
        for i, t in enumerate(group):
            for sid, per_session in session_sequences(t).items():
                for s in per_session:
                    s.advantage = advantage[(i, sid)]
                sequences += per_session
        all_adv.append(np.array(list(advantage.values())))
    if log_to is not None:
        logs.write_records(log_to, logged)
    # The agent's caches hold keys and values of the weights the update replaces (its next use drops them): free
    # them now, so they do not stand beside the update's own memory.
    agent.reset()
    with times.phase("update"):
        stats = learner.update(sequences)
    adv_all = np.concatenate(all_adv) if all_adv else np.zeros(1)
    return {
        "iteration": it,
        "success": float(np.mean([t.reward for t in trajectories])),
        "sessions": float(np.mean([t.num_sessions for t in trajectories])),
        "steps": float(np.mean([t.tree["steps_used"] for t in trajectories])),
        "budget_mean": float(np.mean(budgets)),
        "adv_mean": float(adv_all.mean()), "adv_std": float(adv_all.std()),
        "adv_abs_max": float(np.abs(adv_all).max()),
        "contribution_abs_mean": float(np.mean(contrib_abs)) if contrib_abs else 0.0,
        # Mosaic: the share of sessions whose estimated contribution D is positive (None for broadcast: no D).
        "d_positive": float(np.mean(contrib_positive)) if contrib_positive else None,
        **{k: v for k, v in _finite(session_metrics(trajectories)).items() if k in ITERATION_METRICS},
        **{f"groups_{k}": v for k, v in (group_diversity(groups) if groups else {}).items()},
        # The share of drawn groups whose rewards differ (those broadcast can learn from), and with dynamic
        # sampling how many groups were drawn and trained on.
        "unequal_groups": unequal / drawn, "groups_drawn": drawn, "groups_trained": len(groups),
        **{k: (None if v is None else float(v)) for k, v in stats.items()},
        **times.metrics(),
        "memory_peak_mib": peak_rss_mib(),
    }


class PhaseTimes:
    """Wall-clock seconds per phase of an RL iteration, so a run's ``metrics.jsonl`` shows where its time goes.

    Every phase is reported (0 where an algorithm has none), so broadcast and Mosaic rows line up; ``total``
    runs from the timer's creation to :meth:`metrics`.

    Example:
        >>> times = PhaseTimes()
        >>> with times.phase("update"):
        ...     pass
        >>> sorted(times.metrics())
        ['time_continuations', 'time_rollouts', 'time_scoring', 'time_total', 'time_update']
    """

    PHASES = ("rollouts", "continuations", "scoring", "update")

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.seconds = dict.fromkeys(self.PHASES, 0.0)

    @contextlib.contextmanager
    def phase(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start

    def metrics(self) -> dict[str, float]:
        total = time.perf_counter() - self.started
        return {**{f"time_{k}": round(v, 4) for k, v in self.seconds.items()}, "time_total": round(total, 4)}


def budget_sampler(config: TrainConfig) -> Any:
    """One budget per group: BudgetMix from ``config.budgets``, else the env's fixed ``max_steps``."""
    if config.budgets:
        return parse_budgets(config.budgets)
    fixed = config.env_kwargs.get("max_steps", 64)
    if not isinstance(fixed, int):
        raise ValueError(f"env max_steps={fixed!r} varies per episode; give the groups' budgets with budgets='...'")
    return FixedBudget(fixed)


def evaluate(agent: LLMAgent, collector: Collector, config: TrainConfig, label: str
             ) -> dict[str, Any]:
    """Held-out success: ``eval_episodes`` runs of every test task (the first ``eval_tasks`` of them where it is
    set), sampled at ``eval_temperature`` (as in training where it is None); with ``eval_greedy`` also one greedy
    run of each (``result["greedy"]``).

    The agent's sampling generator is left as it was, so evaluating changes nothing that training samples
    (a finished run extended with ``resume`` continues as one that never stopped to evaluate).
    """
    tasks = envs.view(gym.make(config.env_id, **{**config.env_kwargs, "split": "test"})).tasks[:config.eval_tasks]
    requests = [Request(seed=1_000_003 + k, options={"task_id": t.id})
                for k, t in enumerate(tasks) for _ in range(config.eval_episodes)]
    budgets = config.eval_budgets or []
    requests += [Request(seed=2_000_003 + k, options={"task_id": t.id, "max_steps": budget})
                 for budget in budgets for k, t in enumerate(tasks) for _ in range(config.eval_episodes)]
    sampling, temperature = agent.generator.get_state(), agent.temperature
    greedy = []
    try:
        if config.eval_temperature is not None:
            agent.temperature = config.eval_temperature
        runs = collector.run(agent, requests, progress=label)
        if config.eval_greedy:  # (choose mode at temperature 0 is deterministic: one run per task)
            agent.temperature = 0.0
            greedy = collector.run(agent, [Request(seed=3_000_003 + k, options={"task_id": t.id})
                                           for k, t in enumerate(tasks)], progress=f"{label}, greedy")
    finally:
        agent.generator.set_state(sampling)
        agent.temperature = temperature
    m = len(tasks) * config.eval_episodes  # the main runs, then m runs at each budget
    at_budget = {budget: runs[(n + 1) * m:(n + 2) * m] for n, budget in enumerate(budgets)}
    runs = runs[:m]
    result: dict[str, Any] = {"success": float(np.mean([r.reward for r in runs])),
              "sessions": float(np.mean([r.num_sessions for r in runs])),
              "steps": float(np.mean([r.tree["steps_used"] for r in runs])), "episodes": len(runs),
              "per_task": _per_task(runs),
              "metrics": _finite(session_metrics(runs))}
    if greedy:
        result["greedy"] = {"success": float(np.mean([r.reward for r in greedy])), "per_task": _per_task(greedy)}
    if budgets:  # Pass@(1,T), each T its own runs under budget T (the "rerun" protocol: the agent is told T)
        result["pass_at_1"] = {str(b): float(np.mean([r.reward for r in rs])) for b, rs in at_budget.items()}
        result["per_task_at"] = {str(b): _per_task(rs) for b, rs in at_budget.items()}
        fixed = config.env_kwargs.get("max_steps", 64)
        if isinstance(fixed, int) and str(fixed) not in result["pass_at_1"]:  # the main runs: Pass@(1, env's T)
            result["pass_at_1"][str(fixed)] = result["success"]
            result["per_task_at"][str(fixed)] = result["per_task"]
        result["pass_at_1"] = dict(sorted(result["pass_at_1"].items(), key=lambda kv: int(kv[0])))
    return result


def _per_task(runs: list[Any]) -> dict[str, float]:
    per_task: dict[str, list[float]] = {}
    for r in runs:
        per_task.setdefault(r.task_id, []).append(r.reward)
    return {k: float(np.mean(v)) for k, v in per_task.items()}


ITERATION_METRICS = ("sessions_success", "sessions_failure", "context_tokens", "utility", "wasted_sessions", "forks",
                     "step_quality", "error_steps", "recovery", "parse_rate")


def _finite(metrics: dict[str, Any]) -> dict[str, Any]:
    """JSON has no NaN: an undefined metric (no failures, no forks...) is written as null."""
    return {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in metrics.items()}


def paired_gain(before: dict[str, Any], after: dict[str, Any]) -> tuple[float, float]:
    """Mean held-out gain over the test tasks and its standard error, pairing each task with itself.

    Both evaluations run the same tasks with the same reset seeds, so the task-to-task spread (some tasks are
    solved almost always, some almost never) cancels out of the difference.

    Example:
        >>> paired_gain({"per_task": {"a": 0.5, "b": 0.0}}, {"per_task": {"a": 1.0, "b": 0.5}})
        (0.5, 0.0)
    """
    diffs = np.array([after["per_task"][k] - v for k, v in before["per_task"].items()])
    stderr = float(diffs.std(ddof=1) / np.sqrt(len(diffs))) if len(diffs) > 1 else float("nan")
    return float(diffs.mean()), stderr


def _resume_payload(config: TrainConfig, checkpoint: Path, log: Any) -> dict[str, Any] | None:
    """What this run continues from: ``checkpoint``'s payload when ``config.resume`` and one was written, else None.

    A resume must keep the run's settings (its ``config.json``) but for :data:`algos.learn.config.RESUMABLE`; a run
    stopped before its first checkpoint starts again from the beginning (with the same settings, the same run).
    """
    if not config.resume:
        return None
    saved_path = checkpoint.parent / "config.json"
    changed = changed_settings(read_config(saved_path), config)
    if changed:
        name, before, after = changed[0]
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        raise ConfigError(f"resuming {checkpoint.parent} would change {name} from {before!r} to {after!r}{more}: "
                          f"a resumed run keeps the settings in {saved_path} (only {', '.join(RESUMABLE)} may change)")
    if not checkpoint.exists():
        log(f"no checkpoint in {checkpoint.parent} yet (stopped during the warm start): starting it again")
        return None
    payload = read_checkpoint(checkpoint)
    missing = [k for k in ("state", "rng", "agent_rng") if k not in payload["extra"]]
    if missing:
        raise CheckpointError(checkpoint, f"it has no training state ({', '.join(missing)}): not written by "
                                          f"mosaic train")
    check_training_state(checkpoint, payload, read_config(saved_path), log)
    return payload


def _warm_start_payload(config: TrainConfig, warm_start_from: str | Path, log: Any) -> dict[str, Any]:
    """The checkpoint of ``warm_start_from`` (the config's), a finished warm-start-only run (``iterations=0``) with this
    run's settings but :data:`algos.learn.config.WARM_START_FREE`: RL starts from it exactly as from a warm start of its
    own (the checkpoint holds the weights, the optimiser, every RNG and the held-out results so far)."""
    source = Path(warm_start_from)
    checkpoint = source / "checkpoint.pt"
    if not (source / "summary.json").is_file() or not checkpoint.is_file():
        raise ConfigError(f"warm_start_from={str(source)!r} is not a finished run (no summary.json and "
                          f"checkpoint.pt): run it first, e.g. mosaic train ... --iterations 0 --out {source}")
    changed = changed_settings(read_config(source / "config.json"), config, free=WARM_START_FREE)
    if changed:
        name, before, after = changed[0]
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        raise ConfigError(f"warm_start_from={str(source)!r}: its warm start used {name}={before!r}, this run "
                          f"{after!r}{more}; only {', '.join(WARM_START_FREE)} may differ")
    try:
        payload = read_checkpoint(checkpoint)
    except CheckpointError as err:  # (its message says "resume from": here the run takes a warm start from it)
        raise ConfigError(f"warm_start_from={str(source)!r}: cannot take its warm start from {checkpoint}: "
                          f"{err.problem}") from None
    state = payload["extra"].get("state", {})
    if state.get("phase") != "rl" or state.get("iteration") != 0:
        raise ConfigError(f"warm_start_from={str(source)!r} has run {state.get('iteration')} RL iterations: take "
                          f"the warm start of a run with iterations=0")
    log(f"warm start from {source} (computed there once)")
    return payload


def _model(config: TrainConfig, env: gym.Env, out: Path, from_run: bool):
    """The model: from the run folder when resuming from a checkpoint, else built or loaded and saved there.

    Without a checkpoint the model is built again even when the folder exists: a kill may have cut its writing
    short, and building it again is exactly what a run that never stopped did (the same RNG draws, the same
    tokenizer, the env used the same way).
    """
    folder = out / "model"
    if from_run and folder.exists():
        return load_model(str(folder))
    texts = None
    if config.model.startswith("tiny-"):
        from agents.models import default_texts

        texts = default_texts(env=env)
    model, tokenizer = load_model(config.model, texts=texts, seed=config.seed)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model.eval(), tokenizer


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _report(summary: dict[str, Any]) -> str:
    rows = [(name, summary[key]) for name, key in (("initial model", "success_initial"),
                                                    ("after warm start", "success_warm_start"),
                                                    ("after RL", "success_final")) if key in summary]
    return "\n".join(
        [f"held-out results ({summary.get('algo')}, {summary.get('iterations')} RL iterations, "
         f"run {summary.get('run')}):"]
        + [f"  {name:<18} {r['success']:.3f} success"
           + (f" ({r['greedy']['success']:.3f} greedy)" if "greedy" in r else "")
           + f", {r['sessions']:.2f} sessions per trajectory, "
           f"{r['steps']:.1f} steps, {_share(r['metrics'].get('parse_rate'))} of steps a valid call "
           f"({r['episodes']} episodes)" for name, r in rows]
        + ([f"  probe P(complete summary) at {summary['probe_warm_start']['probe_summary_states']} fixed states: "
            f"{summary['probe_warm_start']['probe_summary']:.3f} after the warm start -> "
            f"{summary['probe_final']:.3f} after RL"] if "probe_warm_start" in summary and "probe_final" in summary
           else [])
        + ([f"  RL gain {summary['rl_gain']:+.3f} +- {summary['rl_gain_stderr']:.3f} (mean over test tasks, paired, "
            f"+- one standard error)"] if "rl_gain" in summary else [])
        + ([_credit_line(summary["credit_vs_broadcast"])] if "credit_vs_broadcast" in summary else []))


def _iteration_log(out: Path, it: int) -> Path:
    """Where iteration ``it`` of the run in ``out`` logs its sampled groups."""
    return out / "trajectories" / f"iteration-{it:04d}{logs.SUFFIX}"


def _credit_line(c: dict[str, Any]) -> str:
    """One line of where Mosaic's credit departed from broadcast's (:func:`algos.credit.compare.compare_credit`)."""
    kinds = {k: v for k, v in c["groups"].items() if k != "n"}
    differ = sum((v["share"] or 0) * (v["differ"] or 0) for v in kinds.values())
    return (f"  Mosaic against broadcast on the {c['groups']['n']} logged groups: credit differs in {differ:.0%} of "
            f"them; of their session pairs {c['pairs']['split'] or 0:.0%} split (tied by broadcast), "
            f"{c['pairs']['reversed'] or 0:.0%} reversed (summary.json: credit_vs_broadcast)")
