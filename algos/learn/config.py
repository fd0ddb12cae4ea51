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
                   "pg.minibatches", "pg.target_kl", "pg.entropy_coef",
                   "estimator", "continuations", "root_start", "budgets", "iterations", "tasks_per_iter", "group_size",
                   "log_groups", "dynamic_sampling", "dynamic_max_draws")
"""The settings a run may change from the run whose warm start it takes (``warm_start_from``): nothing before the
first RL iteration reads them, so arms that differ only in these start RL from one warm start, computed once.
(The RL optimiser has taken no step when a warm start ends, so its learning rate and the update's other settings
are free too: the run takes the warm start's weights and RNG states and builds its own optimiser.)"""


class ConfigError(ValueError):
    """A run's ``config.json`` that is missing or unreadable, or settings that contradict it; one line."""


@dataclass
class PGConfig:
    """Learner settings (CleanRL-style: one line each)."""

    lr: float = 3e-4  # AdamW learning rate
    weight_decay: float = 0.0  # AdamW weight decay
    clip_eps: float = 0.2  # PPO/GRPO clip range of the per-token importance ratio
    kl_coef: float = 0.0  # weight of the k3 KL to a frozen reference copy of the initial model (0: none)
    epochs: int = 1  # passes over each batch; after the first step, ratios differ from 1 and clipping bites
    minibatches: int = 1  # optimizer steps per epoch, each on its own share of the batch (PPO's minibatches)
    target_kl: float | None = None  # stop the update's steps once the KL measured after a step passes 1.5x this
    entropy_coef: float = 0.0  # weight of an entropy bonus (per choice or per generated token) in the loss
    micro_batch_tokens: int = 8192  # padded tokens per forward/backward (gradient accumulation fits memory)
    max_grad_norm: float = 1.0  # gradient clipping
    advantage: str = "broadcast"  # "broadcast" or "mosaic"
    normalize_std: bool = True  # False: Dr. GRPO (no division by the group's reward std)
    lambda_use: float = 0.5  # Mosaic: weight of the session-usage term
    beta: float = 0.5  # Mosaic: weight of the session-level marginal-contribution term
    adv_clip: float = 5.0  # Mosaic: advantages clipped to [-adv_clip, adv_clip]
    device: str = "cpu"  # "cpu", "cuda", "cuda:1", ...
    dtype: str = "float32"  # "float32" or "bfloat16" (GPU)

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



@dataclass
class TrainConfig:
    """Everything ``mosaic train`` can set. Defaults: the embedded CPU demo (a tiny model, easy tasks)."""

    algo: str = "mosaic"  # credit assignment: "broadcast" or "mosaic"
    env_id: str = "mosaic/WebQA-v0"  # environment id
    env_kwargs: dict = field(default_factory=lambda: {
        "site_size": 600, "hops": 1, "max_steps": 5, "candidates": True, "session_max_tokens": 600,
        "summary_choices": True})  # gym.make kwargs: a window that holds a search and one page, so two sessions
    # are needed: search and read, compact (the env asks; the policy picks the complete or a lossy summary), then
    # answer from the summary; at T=5 only the complete summary leaves the steps to answer (the session decision
    # decides the reward: docs/results.md)
    model: str = "tiny-1m"  # tiny-100k | tiny-1m | tiny-3m | tiny-10m | smollm2 | a folder | a hub id
    mode: str = "choose"  # LLMAgent mode: "choose" (score candidates) or "generate" (free text)
    temperature: float = 1.0  # sampling temperature of the RL rollouts (mosaic train --rl-temperature)
    eval_temperature: float | None = None  # sampling temperature of held-out evaluation (None: as in RL)
    eval_greedy: bool = True  # also held-out success at temperature 0 (one run per test task: it is deterministic)
    length_normalize: bool = True  # choose mode: score a candidate by its mean token log-prob, not the sum (so a
    # long candidate, such as a fork's sub-question or the complete summary, is not less likely for its length
    # alone: summed, the warm start put P(complete summary) at 0.003, docs/findings.md)
    max_new_tokens: int = 128  # generate mode: a step's tokens stop at the first complete call, or here
    prompt_examples: bool = False  # put envs.prompts.EXAMPLE_EXCHANGE (a worked exchange) in every prompt: shows a
    # pretrained instruct model the call format (its tokens are the agent's, outside the env's window)
    lora_rank: int = 0  # train LoRA adapters of this rank (peft) instead of every weight (0: full fine-tuning)
    bc_episodes: int = 100  # oracle demonstrations for the warm start (0: no warm start)
    bc_epochs: int = 2  # passes over the demonstrations
    bc_lr: float = 2e-3  # warm-start learning rate
    bc_compact_at: float | None = None  # oracle compacts past this fraction of the window (None: when asked)
    bc_fork: bool = True  # oracle forks one subagent per sub-question
    bc_max_steps: int | None = 12  # step budget of the demonstrations (None: the env's); a larger one lets the
    # oracle's recoveries (after an error or a lossy summary) succeed, so they are cloned
    bc_styles: list | None = field(default_factory=lambda: [{"lossy_summary": 0.5}])  # varied demonstrations: oracle
    # styles used in turn, each a dict of OracleAgent knobs ({"compact_at": 0.5, "fork": False, "error_rate": 0.1,
    # "lossy_summary": 0.5}); None: one style, bc_compact_at/bc_fork. The default takes the lossy summary half the
    # time (then reads again), so the warm start leaves the summary decision near P(complete) = 0.35-0.5 for RL
    iterations: int = 10  # RL iterations (one PPO update each); the probe passes 0.9 after about 7 (docs/results.md)
    tasks_per_iter: int = 6  # groups per iteration
    log_groups: int = 2  # groups per iteration whose trajectories are logged to out/trajectories/ (0: none)
    group_size: int = 8  # trajectories per group (one task, one budget)
    dynamic_sampling: int = 0  # DAPO-style: draw groups (tasks_per_iter at a time) until this many have unequal
    # rewards, and train on those alone (0: off, every drawn group is trained on)
    dynamic_max_draws: int = 4  # dynamic sampling: at most this many rounds of tasks_per_iter groups per iteration
    probe: str | None = "auto"  # "summary": P(complete summary) at fixed compaction states after every iteration;
    # "auto": that probe where the env offers summaries to choose from (choose mode, summary_choices), none elsewhere
    probe_states: int = 32  # how many fixed states the probe measures (one per training task, at most)
    budgets: str | None = None  # BudgetMix spec ("8", "4,8,16", "log:4-32", "schedule:0=4,20=8"); None: env's
    estimator: str = "rollout"  # Mosaic's marginal contribution: "rollout" or "likelihood"
    continuations: int = 2  # Mosaic rollout estimator: continuations M per session boundary
    # Mosaic rollout estimator: the root chain's start, V(reset): "rollout" (M continuations per trajectory) or
    # "group_rollout" (M per group, shared: every trajectory of a group resets to the same state)
    root_start: str = "rollout"
    eval_episodes: int = 4  # held-out runs per test task for the success rate
    eval_tasks: int | None = None  # held-out evaluation on the first N test tasks only (None: every test task); for
    # quick checks: the full held-out success needs every task
    eval_initial: bool = False  # also measure held-out success before the warm start
    eval_budgets: list | None = None  # also held-out Pass@(1,T) at these budgets T, after warm start and RL
    # Envs stepped side by side, their contexts acting as one batch. 24, not 48: on 2 cores a run took as long
    # either way and peaked at 1.3 GB against 1.8 (docs/performance.md); more pays where a GPU batches.
    num_envs: int = 24
    seed: int = 0  # seeds everything
    out: str = "runs/train"  # run folder: config, model, checkpoint, metrics, plot
    resume: bool = False  # continue from out/checkpoint.pt
    ray: str | None = None  # env workers on Ray: "local" (ray.init()), a cluster address, or None (in-process)
    warm_start_from: str | None = None  # a finished warm-start-only run (iterations=0) whose warm start this run
    # continues from, exactly as if it had computed it (settings but WARM_START_FREE must match); None: its own
    pg: PGConfig = field(default_factory=lambda: PGConfig(lr=1e-3, micro_batch_tokens=2048, epochs=2, minibatches=2,
                                                          target_kl=0.03))  # learner settings: PPO, 2 epochs of 2
    # minibatches with a target KL (KL 0.02-0.04 per update; one step of one epoch has no trust region). 2,048 padded
    # tokens per micro-batch: the same gradient as larger ones up to rounding, a third of the memory and 1.4-2.6x
    # the speed of 32,768 on CPU (docs/performance.md)

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
