"""The settings of the learners, as dataclasses with one documented line per field (no torch here, so the
command line can show its defaults without loading a model)."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from algos.credit.advantages import ALGORITHMS

RESUMABLE = ("iterations",)
"""The settings a resumed run may change: how many RL iterations it runs in all (extend it, or stop it earlier).

Every other setting is the run's own: changing it midway would make the run neither the old one nor the new
one. ``eval_episodes`` in particular stays: the paired gain compares the warm-start and the final evaluation
task by task, so both must run the same episodes. So do ``num_envs``, ``micro_batch_tokens`` and ``device``:
they change which episodes share a batch and the order of the arithmetic, so the resumed run would no longer
equal one that never stopped.
"""
NOT_SETTINGS = ("out", "resume", "ray", "warm_start_from")  # where the run lives, whether it continues, where its
# envs step and where its warm start was computed (the results are the same): not what it computes
WARM_START_FREE = ("algo", "pg.advantage", "pg.lambda_use", "pg.beta", "pg.adv_clip", "pg.normalize_std",
                   "pg.lr", "pg.weight_decay", "pg.clip_eps", "pg.epochs", "pg.kl_coef", "pg.max_grad_norm",
                   "pg.minibatches", "pg.target_kl", "pg.entropy_coef", "pg.measure_fraction",
                   "estimator", "continuations", "root_start", "budgets", "iterations", "tasks_per_iter", "group_size",
                   "log_groups", "dynamic_sampling", "dynamic_max_draws")
"""The settings a run may change from the run whose warm start it takes (``warm_start_from``): nothing before the
first RL iteration reads them, so arms that differ only in these start RL from one warm start, computed once.
(The RL optimiser has taken no step when a warm start ends, so its learning rate and the update's other settings
are free too: the run takes the warm start's weights and RNG states and builds its own optimiser.)"""


class ConfigError(ValueError):
    """A run's ``config.json`` that is missing or unreadable, or settings that contradict it; one line."""


def _setting(default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING, help: str) -> Any:
    """A field with its one line of help (``metadata["help"]``): what ``mosaic train --help`` says of its flag."""
    return field(default=default, default_factory=factory, metadata={"help": help})


@dataclass
class PGConfig:
    """Learner settings (CleanRL-style: one line each)."""

    lr: float = _setting(3e-4, help="RL learning rate (AdamW)")
    weight_decay: float = _setting(0.0, help="AdamW weight decay of the RL optimizer")
    clip_eps: float = _setting(0.2, help="PPO/GRPO clip range of the per-token importance ratio")
    kl_coef: float = _setting(0.0, help="weight of the k3 KL to a frozen copy of the initial model (0: off)")
    # (epochs: after the first step, ratios differ from 1 and clipping bites)
    epochs: int = _setting(1, help="PPO passes over each iteration's batch")
    minibatches: int = _setting(1, help="optimizer steps per epoch, each on its own share of the batch")
    target_kl: float | None = _setting(None, help="stop an update's steps once the KL measured after a step "
                                                  "passes 1.5x this (none: no early stop)")
    entropy_coef: float = _setting(0.0, help="weight of the entropy bonus (per choice, or per token in generate "
                                             "mode)")
    micro_batch_tokens: int = _setting(8192, help="padded tokens per forward/backward (gradient accumulation: "
                                                  "lower it to fit memory)")
    max_grad_norm: float = _setting(1.0, help="gradient clipping norm")
    # (the measuring pass is a forward pass over the batch: on the fork preset's one-step update, a quarter of it)
    measure_fraction: float = _setting(1.0, help="share of the batch the pass after the update measures "
                                                 "(kl_after, entropy, dlogp_*), evenly spaced; 0: no pass, no "
                                                 "such metrics")
    advantage: str = _setting("broadcast", help="credit assignment (set by TrainConfig.algo)")
    normalize_std: bool = _setting(True, help="divide advantages by the group's reward std (off: Dr. GRPO)")
    lambda_use: float = _setting(0.5, help="Mosaic: weight of the session-usage term")
    beta: float = _setting(0.5, help="Mosaic: weight of the session-level marginal-contribution term")
    adv_clip: float = _setting(5.0, help="Mosaic: advantages clipped to [-adv_clip, adv_clip]")
    device: str = _setting("cpu", help="torch device: cpu, cuda, cuda:1, mps, ...")
    dtype: str = _setting("float32", help="training dtype: float32, or bfloat16 (GPU)")

    def __post_init__(self):
        if self.advantage not in ALGORITHMS:
            raise ValueError(f"advantage={self.advantage!r}: use one of {ALGORITHMS}")
        _check_count("epochs", self.epochs, 1, "give the passes over each batch, an integer >= 1")
        _check_count("minibatches", self.minibatches, 1, "give the optimizer steps per epoch, an integer >= 1")
        for name in ("clip_eps", "max_grad_norm"):
            _check_number(name, getattr(self, name), strict=True)
        for name in ("lr", "entropy_coef", "kl_coef", "weight_decay"):
            _check_number(name, getattr(self, name), strict=False)
        if self.target_kl is not None:
            _check_number("target_kl", self.target_kl, strict=True, more="or None for no early stop")
        share = self.measure_fraction
        if not (isinstance(share, (int, float)) and not isinstance(share, bool) and 0 <= share <= 1):  # (NaN: no)
            raise ValueError(f"measure_fraction={share!r}: give a share of the batch in [0, 1] (1: all, 0: no pass)")



@dataclass
class TrainConfig:
    """Everything ``mosaic train`` can set. Defaults: the embedded CPU demo (a tiny model, easy tasks)."""

    algo: str = _setting("mosaic", help="credit assignment: broadcast or mosaic")
    env_id: str = _setting("mosaic/WebQA-v0", help="environment id")
    # A window that holds a search and one page, so two sessions are needed: search and read, compact (the env
    # asks; the policy picks the complete or a lossy summary), then answer from the summary; at T=5 only the
    # complete summary leaves the steps to answer (the session decision decides the reward: docs/results.md)
    env_kwargs: dict = _setting(factory=lambda: {
        "site_size": 600, "hops": 1, "max_steps": 5, "candidates": True, "session_max_tokens": 600,
        "summary_choices": True}, help="gym.make kwargs of the env (the demo: a 600-entity site, one-hop tasks, "
                                       "T=5, a 600-token window, summary choices)")
    model: str = _setting("tiny-1m", help="the policy model: tiny-100k | tiny-1m | tiny-3m | tiny-10m | smollm2 | "
                                          "a folder | a hub id")
    mode: str = _setting("choose", help="choose: score the env's candidate actions; generate: free text "
                                        "(pretrained models)")
    temperature: float = _setting(1.0, help="sampling temperature of the policy's rollouts (choose mode: "
                                            "softmax(score / T); 0: greedy)")
    eval_temperature: float | None = _setting(None, help="sampling temperature of held-out evaluation (none: "
                                                         "the rollouts' temperature)")
    eval_greedy: bool = _setting(True, help="also held-out success at temperature 0 (one run per test task: it "
                                            "is deterministic)")
    # (length_normalize: so a long candidate, such as a fork's sub-question or the complete summary, is not less
    # likely for its length alone: summed, the warm start put P(complete summary) at 0.003, docs/findings.md)
    length_normalize: bool = _setting(True, help="choose mode: score a candidate by its mean token log-prob "
                                                 "(off: the sum)")
    max_new_tokens: int = _setting(128, help="generate mode: a step's tokens stop at its first complete call, "
                                             "or after this many")
    # (prompt_examples: envs.prompts.EXAMPLE_EXCHANGE; its tokens are the agent's, outside the env's window)
    prompt_examples: bool = _setting(False, help="show the model a worked exchange before each session (the "
                                                 "call format, for pretrained instruct models)")
    lora_rank: int = _setting(0, help="train LoRA adapters of this rank (needs peft) instead of every weight "
                                      "(0: full fine-tuning)")
    bc_episodes: int = _setting(100, help="oracle demonstrations of the warm start (0: no warm start)")
    bc_epochs: int = _setting(2, help="warm-start passes over the demonstrations")
    bc_lr: float = _setting(2e-3, help="warm-start learning rate")
    bc_compact_at: float | None = _setting(None, help="the demonstrating oracle compacts past this fraction of "
                                                      "the window (none: only when the env asks)")
    bc_fork: bool = _setting(True, help="the demonstrating oracle forks one subagent per sub-question")
    # (bc_max_steps: a larger one lets the oracle's recoveries, after an error or a lossy summary, succeed, so
    # they are cloned)
    bc_max_steps: int | None = _setting(12, help="step budget of the demonstrations (none: the env's)")
    # bc_styles: the default takes the lossy summary half the time (then reads again), so the warm start leaves
    # the summary decision near P(complete) = 0.35-0.5 for RL
    bc_styles: list | None = _setting(factory=lambda: [{"lossy_summary": 0.5}], help=(
        "varied demonstrations: oracle styles used in turn, each a dict of OracleAgent knobs (compact_at, fork, "
        "error_rate, lossy_summary), as JSON; none: one style, --bc-compact-at and --bc-fork"))
    iterations: int = _setting(10, help="RL iterations (one PPO update each)")  # the probe passes 0.9 after
    # about 7 (docs/results.md)
    tasks_per_iter: int = _setting(6, help="groups per RL iteration")
    log_groups: int = _setting(2, help="groups per iteration whose trajectories go to OUT/trajectories/ (mosaic "
                                       "view OUT; 0: none)")
    group_size: int = _setting(8, help="trajectories per group (G: one task, one budget)")
    dynamic_sampling: int = _setting(0, help="DAPO-style: draw groups until this many have unequal rewards, and "
                                             "train on those alone (0: off)")
    dynamic_max_draws: int = _setting(4, help="dynamic sampling: at most this many rounds of tasks_per_iter "
                                              "groups per iteration")
    probe: str | None = _setting("auto", help="log P(right session decision) at fixed states after every "
                                              "iteration; summary: P(complete summary) at a forced compaction "
                                              "(needs choose mode and summary choices); auto: that one wherever "
                                              "the env offers summaries to choose from; none: off")
    probe_states: int = _setting(32, help="fixed states the probe measures (one per training task, at most)")
    budgets: str | None = _setting(None, help="BudgetMix: '8' fixed, '4,8,16' uniform set, 'log:4-32' "
                                              "log-uniform, 'schedule:0=4,20=8' (none: the env's max_steps)")
    estimator: str = _setting("rollout", help="Mosaic: how marginal contributions are estimated")
    continuations: int = _setting(2, help="Mosaic rollout estimator: continuations M per session boundary")
    root_start: str = _setting("rollout", help="Mosaic rollout estimator: V(reset) from M continuations per "
                                               "trajectory (rollout), or M per group, shared (group_rollout)")
    eval_episodes: int = _setting(4, help="held-out runs per test task")
    eval_tasks: int | None = _setting(None, help="evaluate on N test tasks only, for quick checks (none: every "
                                                 "test task)")
    eval_initial: bool = _setting(False, help="also measure held-out success (and parse rate) before the warm "
                                              "start")
    eval_budgets: list | None = _setting(None, help="also held-out Pass@(1,T) at these step budgets T after warm "
                                                    "start and RL, e.g. 4,8,16")
    # Envs stepped side by side, their contexts acting as one batch. 24, not 48: on 2 cores a run took as long
    # either way and peaked at 1.3 GB against 1.8 (docs/performance.md); more pays where a GPU batches.
    num_envs: int = _setting(24, help="envs stepped side by side (their contexts one batch)")
    seed: int = _setting(0, help="seeds everything")
    out: str = _setting("runs/train", help="run folder: config, model, checkpoint, metrics, plot")
    resume: bool = _setting(False, help="continue the run in out from its checkpoint")
    ray: str | None = _setting(None, help="env workers on Ray: local (ray.init()), a cluster address (auto, "
                                          "HOST:6379, ray://HOST:10001), or none (in-process)")
    # (warm_start_from: settings but WARM_START_FREE must match)
    warm_start_from: str | None = _setting(None, help="start RL from the warm start of this finished "
                                                      "warm-start-only run (iterations 0), as if computed here "
                                                      "(arms of a comparison share one warm start)")
    # The learner: PPO, 2 epochs of 2 minibatches with a target KL (KL 0.02-0.04 per update; one step of one epoch
    # has no trust region). 2,048 padded tokens per micro-batch: the same gradient as larger ones up to rounding, a
    # third of the memory and 1.4-2.6x the speed of 32,768 on CPU (docs/performance.md)
    pg: PGConfig = _setting(factory=lambda: PGConfig(lr=1e-3, micro_batch_tokens=2048, epochs=2, minibatches=2,
                                                     target_kl=0.03), help="learner settings (PGConfig)")

    @property
    def summary_decision(self) -> bool:
        """Whether the policy chooses its summaries: choose mode in an env made with ``summary_choices``."""
        return self.mode == "choose" and isinstance(self.env_kwargs, dict) and bool(
            self.env_kwargs.get("summary_choices"))

    @property
    def active_probe(self) -> str | None:
        """The probe this run measures: ``probe``, with ``"auto"`` resolved."""
        if self.probe == "auto":
            return "summary" if self.summary_decision else None
        return self.probe

    def __post_init__(self):
        if self.algo not in ALGORITHMS:
            raise ValueError(f"algo={self.algo!r}: use one of {ALGORITHMS}")
        if self.estimator not in ("rollout", "likelihood"):
            raise ValueError(f"estimator={self.estimator!r}: use 'rollout' or 'likelihood'")
        if self.root_start not in ("rollout", "group_rollout"):
            raise ValueError(f"root_start={self.root_start!r}: use 'rollout' or 'group_rollout'")
        self.bc_styles = check_styles(self.bc_styles)
        _check_count("log_groups", self.log_groups, 0, "give how many groups per iteration to log (0: none)")
        _check_count("dynamic_sampling", self.dynamic_sampling, 0, "give how many groups of unequal rewards an "
                     "iteration trains on (0: off)")
        _check_count("dynamic_max_draws", self.dynamic_max_draws, 1, "give the most rounds of groups an iteration "
                     "draws, an integer >= 1")
        _check_count("probe_states", self.probe_states, 1, "give an integer >= 1")
        if self.probe not in (None, "summary", "auto"):
            raise ValueError(f"probe={self.probe!r}: use 'summary', 'auto' or None")
        if self.probe == "summary" and not self.summary_decision:
            raise ValueError("probe='summary' measures the summary choice: it needs mode='choose' and "
                             "env_kwargs summary_choices=True (mosaic train --summary-choices), or probe=None "
                             "(--probe none)")
        if self.bc_max_steps is not None:
            _check_count("bc_max_steps", self.bc_max_steps, 1, "give a step budget >= 1, or None for the env's")
        for name in ("temperature", "eval_temperature"):
            if getattr(self, name) is not None:
                _check_number(name, getattr(self, name), strict=False, more="(0: greedy)")
        if self.eval_tasks is not None:
            _check_count("eval_tasks", self.eval_tasks, 1, "give how many test tasks to evaluate on (None: all)")
        if self.eval_budgets is not None:
            if not (isinstance(self.eval_budgets, (list, tuple)) and self.eval_budgets
                    and all(isinstance(t, int) and not isinstance(t, bool) and t >= 1 for t in self.eval_budgets)):
                raise ValueError(f"eval_budgets={self.eval_budgets!r}: give a list of step budgets >= 1, e.g. [4, 8, 16]")
            self.eval_budgets = sorted(set(self.eval_budgets))
        # Checked whatever the estimator: a resumed or edited run may switch to "rollout" later.
        _check_count("continuations", self.continuations, 1, "the rollout estimator needs at least 1 continuation "
                     "per session boundary; use continuations=1 or more (default 2)")
        _check_count("max_new_tokens", self.max_new_tokens, 1, "give an integer >= 1")
        _check_count("lora_rank", self.lora_rank, 0, "give an integer >= 0")
        if isinstance(self.pg, dict):
            self.pg = PGConfig(**self.pg)
        # A copy: a PGConfig shared by two TrainConfigs (or kept by dataclasses.replace) keeps its own advantage.
        self.pg = dataclasses.replace(self.pg, advantage=self.algo)


def _check_number(name: str, value: Any, strict: bool, more: str = "") -> None:
    """A ValueError ``name=value: give a finite number > 0`` (``strict``; else ``>= 0``) unless it is one (a bool,
    a string, NaN or an infinity is not)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not (number and (0 < value if strict else 0 <= value) and value < float("inf")):
        raise ValueError(f"{name}={value!r}: give a finite number {'>' if strict else '>='} 0"
                         f"{' ' + more if more else ''}")


def _check_count(name: str, value: Any, least: int, hint: str) -> None:
    """A ValueError ``name=value: hint`` unless ``value`` is an int (not a bool) of at least ``least``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ValueError(f"{name}={value!r}: {hint}")


STYLE_KNOBS = {"compact_at": (float, type(None)), "fork": (bool,), "error_rate": (float,), "lossy_summary": (float,)}


def check_styles(styles: Any) -> list[dict[str, Any]] | None:
    """``bc_styles`` as a list of dicts of OracleAgent knobs (:data:`STYLE_KNOBS`), or None; one clear error else.

    >>> check_styles([{"compact_at": 0.5, "error_rate": 0.1}, {"fork": False}])
    [{'compact_at': 0.5, 'error_rate': 0.1}, {'fork': False}]
    """
    if styles is None:
        return None
    if not isinstance(styles, (list, tuple)) or not styles:
        raise ValueError(f"bc_styles={styles!r}: give a non-empty list of dicts of {sorted(STYLE_KNOBS)}, or None")
    out = []
    for style in styles:
        if not isinstance(style, dict):
            raise ValueError(f"bc_styles entry {style!r} is not a dict of {sorted(STYLE_KNOBS)}")
        unknown = sorted(set(style) - set(STYLE_KNOBS))
        if unknown:
            raise ValueError(f"bc_styles entry {style!r} has unknown knobs {unknown}: use {sorted(STYLE_KNOBS)}")
        clean = {}
        for key, value in style.items():
            if key != "fork" and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not isinstance(value, STYLE_KNOBS[key]):
                raise ValueError(f"bc_styles entry {style!r}: {key} must be {' or '.join(t.__name__ for t in STYLE_KNOBS[key])}")
            clean[key] = value
        out.append(clean)
    return out


def config_to_json(config: TrainConfig) -> dict[str, Any]:
    """The settings as JSON data (tuples become lists), without :data:`NOT_SETTINGS`: the folder a run's
    ``config.json`` lies in is its ``out`` (wherever it was moved), and ``resume`` is how it starts."""
    data = json.loads(json.dumps(dataclasses.asdict(config), default=str))
    for name in NOT_SETTINGS:
        data.pop(name)
    return data


ABSENT_MEANS = {"eval_temperature": None, "eval_greedy": False, "bc_max_steps": None, "dynamic_sampling": 0,
                "dynamic_max_draws": 4, "probe": None, "probe_states": 32}
"""What a setting that an older ``config.json`` lacks meant when that run was made: off. (Defaults change; a run
written before a setting existed is resumed, extended or compared as what it was.)"""


def config_from_json(data: dict[str, Any], out: str | Path) -> TrainConfig:
    """The :class:`TrainConfig` that :func:`config_to_json` wrote, run in ``out`` (unknown fields are an error;
    fields it lacks, written before they existed, take :data:`ABSENT_MEANS`)."""
    known = {f.name for f in dataclasses.fields(TrainConfig)} - set(NOT_SETTINGS)
    unknown = sorted(set(data) - known)
    if unknown:
        raise TypeError(f"unknown settings {unknown}")
    return TrainConfig(**{**ABSENT_MEANS, **data}, out=str(out))


COMPACTION_DEMO: dict[str, Any] = {
    "env_kwargs": {"site_size": 600, "hops": 1, "max_steps": 8, "candidates": True, "session_max_tokens": 600},
    "iterations": 40, "bc_styles": None, "bc_max_steps": None, "length_normalize": False, "probe": None,
    "eval_greedy": False}
"""The demo before the summary decision was the default (one summary, T = 8, one PPO step per iteration): what
docs/results.md's earlier rows, the iteration bench and examples/budgetmix.py measure."""


def compaction_demo(**changes: Any) -> TrainConfig:
    """:data:`COMPACTION_DEMO` as a :class:`TrainConfig` (its learner: lr 1e-3, one epoch of one step), with
    ``changes``."""
    return TrainConfig(**{**COMPACTION_DEMO, "pg": PGConfig(lr=1e-3, micro_batch_tokens=2048), **changes})


def write_config(path: str | Path, config: TrainConfig) -> None:
    """Write ``config`` to ``path`` as JSON atomically (:func:`write_text_atomic`): never half a file."""
    write_text_atomic(path, json.dumps(config_to_json(config), indent=2) + "\n")


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed over it: a kill midway leaves the old file or
    the new one, never half of one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # (mkstemp makes it private; a run's files are as readable as any other it writes)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_config(path: str | Path) -> TrainConfig:
    """The run's settings from its ``config.json``; a :class:`ConfigError` naming the file if unusable."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"no run to resume in {path.parent}: it has no {path.name} (start the run without --resume)")
    try:
        return config_from_json(json.loads(path.read_text()), out=path.parent)
    except (ValueError, TypeError) as err:
        raise ConfigError(f"{path} is not a run's settings ({type(err).__name__}: {err})") from None


def setting(config: TrainConfig, name: str) -> Any:
    """A setting by dotted name (``"pg.lr"``, ``"env_kwargs.hops"``) as JSON data; None where absent."""
    value: Any = config_to_json(config)
    for part in name.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def changed_settings(saved: TrainConfig, config: TrainConfig, free: tuple[str, ...] = RESUMABLE
                     ) -> list[tuple[str, Any, Any]]:
    """``(name, saved value, new value)`` of every setting that ``config`` changes and may not (``free``: those
    that may change; by default what a resume may change)."""
    def flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k: v})
        return out

    before, after = flat(config_to_json(saved)), flat(config_to_json(config))
    return [(k, before.get(k), after.get(k)) for k in sorted(set(before) | set(after))
            if k not in free and before.get(k) != after.get(k)]
