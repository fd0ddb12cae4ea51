"""mosaic-gym's front door: ``import mosaic_gym`` registers the environments and checks the install.

The code lives in three top-level packages, ``envs`` (the world), ``agents`` (who acts) and ``algos`` (who
learns). Those names are common: PyPI has packages called ``envs`` and ``algos``, ``agents`` is the import name
of ``openai-agents``, and a folder called ``envs/`` in your own project wins over any installed package when you
run from beside it. A shadowed name would otherwise surface far from its cause, as Gymnasium's
``NamespaceNotFound`` on ``gym.make("mosaic/WebQA-v0")``; this module names the shadowing file instead.

``gym.make("mosaic_gym:mosaic/WebQA-v0")`` imports this module on the way (Gymnasium's ``module:id`` form), so
it works in a script that imports nothing of ours.

Example:
    >>> import gymnasium as gym, mosaic_gym
    >>> env = gym.make("mosaic/WebQA-Single-v0", site_size=120)
    >>> env.reset(seed=0)[1]["session_kind"]
    'root'
    >>> sorted(mosaic_gym.ENV_IDS)[0]
    'mosaic/WebQA-Compact-v0'
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from pathlib import Path

PACKAGES = ("envs", "agents", "algos")


class ShadowedPackageError(ImportError):
    """One of our top-level packages resolves to someone else's module or folder."""


def check_packages() -> None:
    """Raise :class:`ShadowedPackageError` if ``envs``, ``agents`` or ``algos`` is not the one installed beside
    this package (already imported, or first on ``sys.path``)."""
    home = Path(__file__).resolve().parent.parent
    for name in PACKAGES:
        module = sys.modules.get(name)
        origin = module.__file__ if module is not None else _find(name)
        if origin is None or Path(origin).resolve().parent.parent != home:
            raise ShadowedPackageError(
                f"the module {name!r} found at {origin or 'nowhere'} is not mosaic-gym's (which lives in {home}): "
                f"rename your own {name!r} (a folder or file beside your script, or a package such as "
                f"openai-agents for 'agents'), or run from another folder"
            )


def _find(name: str) -> str | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None else None


check_packages()

import envs  # noqa: E402  (registers the ids, once the packages are known to be ours)

ENV_IDS = tuple(envs.VARIANTS)

try:
    __version__ = importlib.metadata.version("mosaic-gym")
except importlib.metadata.PackageNotFoundError:  # a checkout used without installing it
    __version__ = "unknown"

__all__ = ["ENV_IDS", "PACKAGES", "ShadowedPackageError", "__version__", "check_packages"]
