"""Env pools: where a run's envs live. :class:`LocalPool` (in this process, the default) or :class:`RayPool`.

A pool holds ``num_envs`` env slots. The driver (``algos.rollout.Collector``) resets a slot with a request's
seed and options and steps slots with a batch of actions; it gets back plain, picklable data: the observation,
reward, terminated, truncated and info of each, and, when asked, env snapshots taken on the env's side
(:func:`reset_env`, :func:`step_env`: the one piece of code both pools run). The same requests give the same
results in either pool, bit for bit: the env is deterministic given its reset seed and options, and its
results are data.

:class:`RayPool` spreads the slots over Ray actors, each holding a few envs (``envs_per_worker``); one batch of
actions goes to each worker per step, and the workers step their envs in parallel. Envs are built on the
worker by ``gym.make(env_id, **env_kwargs)``: a builtin site is regenerated there from its seed; a corpus
``site`` path must exist on every node (a shared file system), or be sent with ``ship_corpus=True`` through
Ray's object store. A worker that dies (its process killed, its node lost) or stops answering (no reply to a
reset or step within ``step_timeout_s``: a stopped or hung process) is replaced by a new one, and the episodes
it held are rerun on it from their reset seeds and options, replaying the actions they had taken, so every
result comes back complete and in order; each replacement is logged (logger ``envs.pool``). A replacement that
dies or hangs while it replays is replaced in turn; after ``max_restarts`` replacements in all the pool gives up
with a :class:`PoolError`, one line naming the worker and its last failure.

Example:
    >>> import gymnasium as gym, envs
    >>> pool = LocalPool(lambda: gym.make("mosaic/WebQA-v0", site_size=120), num_envs=2)
    >>> [r.info["task_id"] == s.info["task_id"] for r, s in zip(pool.reset([0, 1], [3, 3], [{}, {}]),
    ...                                                         pool.reset([1, 0], [3, 3], [{}, {}]))]
    [True, True]
    >>> step = pool.step([0], ['search("x")'])[0]
    >>> step.reward, step.terminated, step.info["steps_used"]
    (0.0, False, 1)
    >>> pool.close()
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import gymnasium as gym

from .actions import ActionError, parse_action
from .webqa import view

logger = logging.getLogger(__name__)

RAY_INSTALL = "pip install 'mosaic-gym[ray]'"


class PoolError(RuntimeError):
    """The env pool cannot go on: its workers kept dying or hanging beyond the replacements allowed; one line."""


@dataclass
class StepResult:
    """What one env returned from a reset or a step, as data.

    Attributes:
        observation, reward, terminated, truncated, info: the env's (a reset gives reward 0, not done).
        snapshot_before: asked for by ``snapshot_before``: the env's snapshot just before this step.
        snapshot_after: when snapshots are on and the episode goes on: the env's snapshot after a reset, and
            after a step whose acting session differs from the one that acts next (a session boundary).
    """

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    snapshot_before: Any = None
    snapshot_after: Any = None


def reset_env(env: gym.Env, seed: int, options: dict[str, Any], snapshots: bool = False) -> StepResult:
    """Reset ``env`` with a request's seed and options; with ``snapshots``, its snapshot at the start."""
    obs, info = env.reset(seed=seed, options=options)
    return StepResult(obs, 0.0, False, False, info, snapshot_after=view(env).snapshot() if snapshots else None)


def step_env(env: gym.Env, action: str, acting: int, snapshot_before: bool = False,
             snapshots: bool = False) -> StepResult:
    """Step ``env``, whose session ``acting`` acts; snapshots taken before the step (when asked) and after it at
    a session boundary."""
    before = view(env).snapshot() if snapshot_before else None
    obs, reward, terminated, truncated, info = env.step(action)
    after = None
    if snapshots and not (terminated or truncated) and info["session_id"] != acting:
        after = view(env).snapshot()
    return StepResult(obs, float(reward), bool(terminated), bool(truncated), info, before, after)


def is_fork(action: str) -> bool:
    """Whether ``action`` parses as a ``fork`` call (the step a learner wants the state before)."""
    try:
        return parse_action(action).name == "fork"
    except ActionError:
        return False


class EnvPool:
    """Env slots ``0 .. num_envs - 1`` that reset and step in batches. Subclasses: :class:`LocalPool`,
    :class:`RayPool`.

    ``envs`` lists the envs held in this process (none for a Ray pool).
    """

    num_envs: int
    envs: list[gym.Env]

    def reset(self, slots: Sequence[int], seeds: Sequence[int], options: Sequence[dict[str, Any]],
              snapshots: bool = False) -> list[StepResult]:
        """Reset each slot with its seed and options (:func:`reset_env`); results in the order of ``slots``."""
        raise NotImplementedError

    def step(self, slots: Sequence[int], actions: Sequence[str], snapshot_before: Sequence[bool] | None = None,
             snapshots: bool = False) -> list[StepResult]:
        """Step each slot with its action (:func:`step_env`); results in the order of ``slots``."""
        raise NotImplementedError

    def close(self) -> None:
        """Close the envs (and stop the workers)."""

    def __enter__(self) -> "EnvPool":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class LocalPool(EnvPool):
    """Envs in this process, made by ``make_env`` when a slot is first used; stepped one after another.

    Args:
        make_env: builds one env.
        num_envs: how many slots.
    """

    def __init__(self, make_env: Callable[[], gym.Env], num_envs: int):
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        self.make_env = make_env
        self.num_envs = num_envs
        self.envs = []
        self._acting: dict[int, int] = {}  # slot -> the session that acts next (info["session_id"])

    def _env(self, slot: int) -> gym.Env:
        if not 0 <= slot < self.num_envs:
            raise IndexError(f"slot {slot} is not in this pool of {self.num_envs} envs")
        while len(self.envs) <= slot:
            self.envs.append(self.make_env())
        return self.envs[slot]

    def reset(self, slots, seeds, options, snapshots=False):
        results = [reset_env(self._env(s), seed, opts, snapshots) for s, seed, opts in zip(slots, seeds, options)]
        self._acting.update((s, r.info["session_id"]) for s, r in zip(slots, results))
        return results

    def step(self, slots, actions, snapshot_before=None, snapshots=False):
        before = snapshot_before if snapshot_before is not None else [False] * len(slots)
        results = []
        for s, a, b in zip(slots, actions, before):
            if s not in self._acting:
                raise RuntimeError(f"slot {s} was stepped before it was reset")
            results.append(step_env(self._env(s), a, self._acting[s], b, snapshots))
            self._acting[s] = results[-1].info["session_id"]
        return results

    def close(self) -> None:
        for env in self.envs:
            env.close()
        self.envs = []


class EnvWorker:
    """A few envs in one process: the body of a :class:`RayPool` actor (plain Python, so it tests alone).

    ``corpus`` (a folder's files as ``{relative path: bytes}``) is written to a temporary folder that then
    stands for the kwargs' ``site``.
    """

    def __init__(self, env_id: str, env_kwargs: dict[str, Any], num_envs: int,
                 corpus: dict[str, bytes] | None = None):
        kwargs = dict(env_kwargs)
        self._corpus_root: Path | None = None
        if corpus is not None:
            root = self._corpus_root = Path(tempfile.mkdtemp(prefix="mosaic-corpus-"))
            for rel, data in corpus.items():
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_bytes(data)
            kwargs["site"] = str(root / Path(env_kwargs["site"]).name)
        self.pool = LocalPool(lambda: gym.make(env_id, **kwargs), num_envs)

    def pid(self) -> int:
        return os.getpid()

    def reset(self, items: list[tuple[int, int, dict[str, Any]]], snapshots: bool) -> list[StepResult]:
        slots, seeds, options = zip(*items)
        return self.pool.reset(slots, seeds, options, snapshots)

    def step(self, items: list[tuple[int, str, bool]], snapshots: bool) -> list[StepResult]:
        slots, actions, before = zip(*items)
        return self.pool.step(slots, actions, before, snapshots)

    def replay(self, slot: int, seed: int, options: dict[str, Any], actions: list[str]) -> None:
        """Bring ``slot`` to where an episode was: reset it, then take the episode's actions again."""
        self.pool.reset([slot], [seed], [options])
        for action in actions:
            self.pool.step([slot], [action])

    def close(self) -> None:
        """Close the envs and remove the corpus copy this worker wrote (its index too)."""
        self.pool.close()
        if self._corpus_root is not None:
            shutil.rmtree(self._corpus_root, ignore_errors=True)
            self._corpus_root = None


@dataclass
class _Episode:
    """What a Ray pool needs to rerun a slot's episode on a new worker: its reset and the actions since."""

    seed: int
    options: dict[str, Any]
    actions: list[str] = field(default_factory=list)


class RayPool(EnvPool):
    """Env slots on Ray actors, ``envs_per_worker`` envs each (slot ``s`` on worker ``s // envs_per_worker``).

    Ray must be initialised (``ray.init()``, or ``ray.init(address=...)`` to join a cluster: see
    :func:`init_ray`). Each actor asks for ``num_cpus`` CPUs, so Ray places as many workers on a node as it has
    CPUs for.

    Args:
        env_id: a registered env id (``mosaic/WebQA-v0``, ...).
        env_kwargs: the ``gym.make`` kwargs (picklable: a builtin site's seed and size, a corpus path, the
            backend).
        num_envs: how many slots.
        envs_per_worker: envs per actor (the last actor may hold fewer).
        num_cpus: CPUs Ray reserves per actor (default: 1 where the cluster has them free, else a share of the
            free CPUs, possibly 0).
        ship_corpus: send the corpus folder named by ``env_kwargs["site"]`` through the object store, for
            nodes that do not share its file system.
        max_restarts: how many times in all a dead or hung worker is replaced before the pool gives up
            (:class:`PoolError`).
        start_timeout_s: how long the cluster may take to start a worker (the first ones, and each replacement).
        step_timeout_s: how long a worker may take to answer one reset or step of its envs (and a replacement
            to replay each action) before it counts as hung, is killed and replaced.
    """

    def __init__(self, env_id: str, env_kwargs: dict[str, Any], num_envs: int, envs_per_worker: int = 4,
                 num_cpus: float | None = None, ship_corpus: bool = False, max_restarts: int = 8,
                 start_timeout_s: float = 300.0, step_timeout_s: float = 120.0):
        ray = _import_ray()
        if not ray.is_initialized():
            raise RuntimeError("RayPool needs a running Ray: call envs.pool.init_ray() (or ray.init()) first")
        if num_envs < 1 or envs_per_worker < 1:
            raise ValueError(f"num_envs and envs_per_worker must be at least 1, got {num_envs}, {envs_per_worker}")
        if not step_timeout_s > 0 or not start_timeout_s > 0:
            raise ValueError(f"step_timeout_s and start_timeout_s must be positive, got {step_timeout_s}, "
                             f"{start_timeout_s}")
        self.start_timeout_s, self.step_timeout_s = start_timeout_s, step_timeout_s
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs)
        self.num_envs, self.envs_per_worker = num_envs, envs_per_worker
        self.envs = []
        self.max_restarts, self.restarts = max_restarts, 0
        self._ray = ray
        if num_cpus is None:
            # A CPU per worker where the cluster has them free; else a share of what is free (none: the workers
            # share the CPUs with whatever holds them, e.g. a second pool of the same run).
            num_cpus = min(1.0, ray.available_resources().get("CPU", 0.0) / self.num_workers)
        self.num_cpus = num_cpus
        self._actor_class = ray.remote(num_cpus=num_cpus, max_restarts=0)(EnvWorker)
        self._corpus = ray.put(_read_corpus(env_kwargs["site"])) if ship_corpus else None
        self._episodes: dict[int, _Episode] = {}
        self.workers = [self._start_worker(w) for w in range(self.num_workers)]
        try:
            ray.get([w.pid.remote() for w in self.workers], timeout=start_timeout_s)
        except ray.exceptions.GetTimeoutError:
            self.close()
            raise RuntimeError(
                f"the cluster did not start {self.num_workers} env workers of {num_cpus:g} CPU each within "
                f"{start_timeout_s:g} s (it has {ray.cluster_resources().get('CPU', 0):g} CPUs): use fewer workers "
                "(more envs_per_worker) or a smaller num_cpus") from None

    @property
    def num_workers(self) -> int:
        return -(-self.num_envs // self.envs_per_worker)

    def _size(self, worker: int) -> int:
        return min(self.envs_per_worker, self.num_envs - worker * self.envs_per_worker)

    def _start_worker(self, worker: int):
        return self._actor_class.remote(self.env_id, self.env_kwargs, self._size(worker), self._corpus)

    def _check(self, slots: Sequence[int]) -> None:
        for s in slots:
            if not 0 <= s < self.num_envs:
                raise IndexError(f"slot {s} is not in this pool of {self.num_envs} envs")

    def reset(self, slots, seeds, options, snapshots=False):
        self._check(slots)
        for s, seed, opts in zip(slots, seeds, options):
            self._episodes[s] = _Episode(seed, opts)
        items = [(s, (s % self.envs_per_worker, seed, opts)) for s, seed, opts in zip(slots, seeds, options)]
        return self._call(lambda actor, batch: actor.reset.remote(batch, snapshots), items)

    def step(self, slots, actions, snapshot_before=None, snapshots=False):
        self._check(slots)
        missing = [s for s in slots if s not in self._episodes]
        if missing:
            raise RuntimeError(f"slots {missing} were stepped before they were reset")
        before = snapshot_before if snapshot_before is not None else [False] * len(slots)
        items = [(s, (s % self.envs_per_worker, a, b)) for s, a, b in zip(slots, actions, before)]
        results = self._call(lambda actor, batch: actor.step.remote(batch, snapshots), items)
        for s, a, r in zip(slots, actions, results):
            if r.terminated or r.truncated:
                del self._episodes[s]
            else:
                self._episodes[s].actions.append(a)
        return results

    def _call(self, submit: Callable[[Any, list[tuple]], Any], items: list[tuple[int, tuple]]) -> list[StepResult]:
        """``submit(actor, batch)`` once per worker holding any of the slots, all in flight at once; a worker that
        dies, or has not answered within ``step_timeout_s``, is replaced, its episodes rerun, and its batch
        submitted again. Results in the order of ``items``."""
        by_worker: dict[int, list[tuple[int, tuple]]] = {}
        for index, (slot, item) in enumerate(items):
            by_worker.setdefault(slot // self.envs_per_worker, []).append((index, item))
        results: list[StepResult | None] = [None] * len(items)
        pending = dict(by_worker)
        while pending:
            refs = {w: submit(self.workers[w], [it for _, it in batch]) for w, batch in pending.items()}
            # One deadline for the batch: the workers step in parallel, so each has step_timeout_s to answer.
            answered, _ = self._ray.wait(list(refs.values()), num_returns=len(refs), timeout=self.step_timeout_s)
            answered = set(answered)
            failed = {}
            for w, ref in refs.items():
                if ref not in answered:
                    failed[w] = pending[w]
                    self._replace(w, f"stopped answering (no answer within {self.step_timeout_s:g} s)")
                    continue
                try:
                    out = self._ray.get(ref)
                except self._ray.exceptions.RayActorError as err:
                    failed[w] = pending[w]
                    self._replace(w, _reason(err))
                    continue
                for (index, _), result in zip(pending[w], out):
                    results[index] = result
            pending = failed
        return results  # type: ignore[return-value]

    def _replace(self, worker: int, reason: str) -> None:
        """A new actor in place of dead or hung ``worker``, with every episode the old one held rerun on it; a
        replacement that dies or hangs while it replays is replaced in turn, up to ``max_restarts`` in all."""
        first = worker * self.envs_per_worker
        held = {s: e for s, e in sorted(self._episodes.items()) if first <= s < first + self._size(worker)}
        # Each replayed action may take as long as a step; the new worker may take as long as a start.
        deadline = self.start_timeout_s + self.step_timeout_s * sum(1 + len(e.actions) for e in held.values())
        failures = [reason]
        while True:
            self.restarts += 1
            if self.restarts > self.max_restarts:
                raise PoolError(f"env worker {worker} failed ({'; then '.join(failures)}) and the pool has already "
                                f"replaced {self.max_restarts} workers (max_restarts): giving up")
            started = time.perf_counter()
            self._ray.kill(self.workers[worker], no_restart=True)
            self.workers[worker] = actor = self._start_worker(worker)
            replays = [actor.replay.remote(s - first, e.seed, e.options, list(e.actions)) for s, e in held.items()]
            try:
                self._ray.get([actor.pid.remote(), *replays], timeout=deadline)
                break
            except self._ray.exceptions.RayActorError as err:
                failures.append(f"its replacement {_reason(err)} while it replayed")
            except self._ray.exceptions.GetTimeoutError:
                failures.append(f"its replacement did not finish replaying within {deadline:g} s")
            logger.warning("env worker %d: %s; replacing it again", worker, failures[-1])
        logger.warning(
            "env worker %d %s; replaced it and reran its %d episode(s) from their reset seeds and options "
            "in %.1f s: %s", worker, failures[0], len(held), time.perf_counter() - started,
            ", ".join(f"slot {s} (seed {e.seed}, {len(e.actions)} actions replayed)" for s, e in held.items())
            or "none in flight")

    def close(self) -> None:
        for actor in self.workers:
            try:
                self._ray.get(actor.close.remote(), timeout=30)
            except (self._ray.exceptions.RayActorError, self._ray.exceptions.GetTimeoutError):
                pass
            self._ray.kill(actor)
        self.workers = []


def _reason(err: Exception) -> str:
    """Why an actor call failed, in a few words: ``died (ActorDiedError: ...first line...)``."""
    text = (str(err).strip().splitlines() or [""])[0]
    return f"died ({type(err).__name__}: {text[:120]})"


def _read_corpus(site: Any) -> dict[str, bytes]:
    """A corpus folder (or file) as ``{path relative to its parent: bytes}``, for :class:`EnvWorker`."""
    if not isinstance(site, str) or site == "builtin":
        raise ValueError(f"ship_corpus needs env_kwargs['site'] to be a corpus path, got {site!r}")
    path = Path(site).resolve()
    if not path.exists():
        raise FileNotFoundError(f"no corpus at {site}")
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p.relative_to(path.parent)): p.read_bytes() for p in files}


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ModuleNotFoundError(f"the Ray env pool needs Ray: {RAY_INSTALL}") from None
    return ray


def init_ray(address: str | None = None, **kwargs: Any) -> None:
    """Start a local Ray cluster (``address`` None or ``"local"``) or join one (``"auto"``, ``"HOST:PORT"``,
    ``"ray://HOST:10001"``); nothing when Ray is already running. ``kwargs`` go to ``ray.init``.

    The env code must be importable on every node: the workers run ``gym.make`` there (install mosaic-gym on
    each node, or pass ``runtime_env={"working_dir": ...}``).
    """
    ray = _import_ray()
    if ray.is_initialized():
        return
    kwargs.setdefault("include_dashboard", False)
    kwargs.setdefault("logging_level", logging.WARNING)
    if address not in (None, "local"):
        kwargs["address"] = address
    ray.init(**kwargs)


def make_pool(env_id: str, env_kwargs: dict[str, Any], num_envs: int, ray: str | None = None,
              envs_per_worker: int | None = None) -> EnvPool:
    """A :class:`LocalPool` (``ray`` None), or a :class:`RayPool` on a local Ray cluster (``ray="local"``) or
    the cluster at ``ray`` (an address: ``"auto"``, ``"HOST:6379"``, ``"ray://HOST:10001"``).

    ``envs_per_worker`` None: as many workers as the cluster has CPUs (at most one per env)."""
    if ray is None:
        return LocalPool(lambda: gym.make(env_id, **env_kwargs), num_envs)
    init_ray(ray)
    if envs_per_worker is None:
        cpus = max(1, int(_import_ray().cluster_resources().get("CPU", 1)))
        envs_per_worker = -(-num_envs // cpus)
    return RayPool(env_id, env_kwargs, num_envs, envs_per_worker=envs_per_worker)


class PoolEnv:
    """One slot of a pool with an env's ``reset``/``step``, for code that steps one env at a time.

    Example:
        >>> import gymnasium as gym, envs
        >>> env = PoolEnv(LocalPool(lambda: gym.make("mosaic/WebQA-v0", site_size=120), 1))
        >>> obs, info = env.reset(seed=0)
        >>> env.step("scroll(\\"down\\")")[4]["steps_used"]
        1
        >>> env.close()
    """

    def __init__(self, pool: EnvPool, slot: int = 0):
        self.pool, self.slot = pool, slot

    def reset(self, *, seed: int, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        result = self.pool.reset([self.slot], [seed], [options or {}])[0]
        return result.observation, result.info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        r = self.pool.step([self.slot], [action])[0]
        return r.observation, r.reward, r.terminated, r.truncated, r.info

    def close(self) -> None:
        self.pool.close()
