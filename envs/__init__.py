"""mosaic-gym environments. ``import envs`` registers them with Gymnasium, in namespace ``mosaic``.

| id                         | what                                                  |
|----------------------------|-------------------------------------------------------|
| ``mosaic/WebQA-v0``        | compact and fork enabled                              |
| ``mosaic/WebQA-Compact-v0``| compact only                                          |
| ``mosaic/WebQA-Fork-v0``   | fork only                                             |
| ``mosaic/WebQA-Single-v0`` | one session: neither compact nor fork                 |

Example:
    >>> import gymnasium as gym, envs
    >>> env = gym.make("mosaic/WebQA-Single-v0", site_size=120)
    >>> obs, info = env.reset(seed=0)
    >>> info["session_kind"]
    'root'
    >>> envs.view(env).allow_fork  # what code outside the env reads of it, through any wrappers
    False
"""

from __future__ import annotations

import gymnasium as gym

from .actions import Action, ActionError, format_action, parse_action
from .prompts import render_transcript
from .spaces import AnyText
from .session import SessionView, Snapshot
from .webqa import EnvView, WebQAEnv, view

VARIANTS = {
    "mosaic/WebQA-v0": {"allow_compact": True, "allow_fork": True},
    "mosaic/WebQA-Compact-v0": {"allow_compact": True, "allow_fork": False},
    "mosaic/WebQA-Fork-v0": {"allow_compact": False, "allow_fork": True},
    "mosaic/WebQA-Single-v0": {"allow_compact": False, "allow_fork": False},
}

for _env_id, _kwargs in VARIANTS.items():
    if _env_id not in gym.registry:
        # No max_episode_steps: the env truncates on its own budget, so TimeLimit must not count too.
        gym.register(id=_env_id, entry_point="envs.webqa:WebQAEnv", kwargs=_kwargs)

__all__ = ["Action", "ActionError", "AnyText", "EnvView", "SessionView", "Snapshot", "VARIANTS", "WebQAEnv",
           "format_action", "parse_action", "render_transcript", "view"]
