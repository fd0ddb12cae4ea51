"""The settings of the learners, as dataclasses with one documented line per field (no torch here, so the
command line can show its defaults without loading a model)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


@dataclass
class PGConfig:
    """Learner settings (CleanRL-style: one line each)."""

    lr: float = 3e-4  # AdamW learning rate
    weight_decay: float = 0.0  # AdamW weight decay
    clip_eps: float = 0.2  # PPO/GRPO clip range of the per-token importance ratio
    kl_coef: float = 0.0  # weight of the k3 KL to a frozen reference copy of the initial model (0: none)
    epochs: int = 1  # passes over each batch; after the first, ratios differ from 1 and clipping bites
    micro_batch_tokens: int = 8192  # padded tokens per forward/backward (gradient accumulation fits memory)
    max_grad_norm: float = 1.0  # gradient clipping
    advantage: str = "broadcast"  # "broadcast" or "mosaic"
    normalize_std: bool = True  # False: Dr. GRPO (no division by the group's reward std)
    lambda_use: float = 0.5  # Mosaic: weight of the session-usage term
    beta: float = 0.5  # Mosaic: weight of the session-level marginal-contribution term
    adv_clip: float = 5.0  # Mosaic: advantages clipped to [-adv_clip, adv_clip]
    device: str = "cpu"  # "cpu", "cuda", "cuda:1", ...
    dtype: str = "float32"  # "float32" or "bfloat16" (GPU)
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.advantage not in ("broadcast", "mosaic"):
            raise ValueError(f"advantage={self.advantage!r}: use 'broadcast' or 'mosaic'")



@dataclass
class TrainConfig:
    """Everything ``mosaic train`` can set. Defaults: the embedded CPU demo (a tiny model, easy tasks)."""

    algo: str = "mosaic"  # credit assignment: "broadcast" or "mosaic"
    env_id: str = "mosaic/WebQA-v0"  # environment id
    env_kwargs: dict = field(default_factory=lambda: {
        "site_size": 600, "hops": 1, "max_steps": 8, "candidates": True,
        "session_max_tokens": 600})  # gym.make kwargs: a window that holds a search and one page, so two sessions
    # are needed: search and read, compact (the env asks), then answer from the summary
    model: str = "tiny-1m"  # tiny-1m | tiny-3m | tiny-10m | smollm2 | a folder | a hub id
    mode: str = "choose"  # LLMAgent mode: "choose" (score candidates) or "generate" (free text)
    temperature: float = 1.0  # sampling temperature during RL
    bc_episodes: int = 100  # oracle demonstrations for the warm start (0: no warm start)
    bc_epochs: int = 2  # passes over the demonstrations
    bc_lr: float = 2e-3  # warm-start learning rate
    bc_compact_at: float | None = None  # oracle compacts past this fraction of the window (None: when asked)
    bc_fork: bool = True  # oracle forks one subagent per sub-question
    iterations: int = 10  # RL iterations (one policy-gradient step each)
    tasks_per_iter: int = 6  # groups per iteration
    group_size: int = 8  # trajectories per group (one task, one budget)
    budgets: str | None = None  # BudgetMix spec ("8", "4,8,16", "log:4-32", "schedule:0=4,20=8"); None: env's
    estimator: str = "rollout"  # Mosaic's marginal contribution: "rollout" or "likelihood"
    continuations: int = 2  # Mosaic rollout estimator: continuations M per session boundary
    eval_episodes: int = 4  # held-out runs per test task for the success rate
    eval_initial: bool = False  # also measure held-out success before the warm start
    num_envs: int = 48  # envs stepped side by side
    seed: int = 0  # seeds everything
    out: str = "runs/train"  # run folder: config, model, checkpoint, metrics, plot
    resume: bool = False  # continue from out/checkpoint.pt
    pg: PGConfig = field(default_factory=lambda: PGConfig(lr=1e-3, micro_batch_tokens=32768))  # learner settings

    def __post_init__(self):
        if self.algo not in ("broadcast", "mosaic"):
            raise ValueError(f"algo={self.algo!r}: use 'broadcast' or 'mosaic'")
        if self.estimator not in ("rollout", "likelihood"):
            raise ValueError(f"estimator={self.estimator!r}: use 'rollout' or 'likelihood'")
        if isinstance(self.pg, dict):
            self.pg = PGConfig(**self.pg)
        # A copy: a PGConfig shared by two TrainConfigs (or kept by dataclasses.replace) keeps its own advantage.
        self.pg = dataclasses.replace(self.pg, advantage=self.algo)
