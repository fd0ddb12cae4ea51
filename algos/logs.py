"""Trajectory logs: one JSON line per trajectory, gzip-compressed, written while a run goes (docs/logs.md).

A record holds what a person needs to see a multi-session trajectory after the fact: the task, the budget,
the reward, the session tree (id, parent, kind, depth, fork task, handoff text, tokens, steps), every step
(which session acted, the action text, its error, the tool result shown), and, where training made them,
each session's advantage under broadcast and under Mosaic with its contribution D. ``mosaic view`` reads
these files; :func:`read` loads them back for analysis, one record at a time.

The writer never holds more than one record: each is written and flushed as its trajectory ends, so a log
of any length costs the memory of one trajectory, and a killed run leaves every finished record readable.

Example:
    >>> import gymnasium as gym, os, tempfile, envs
    >>> from agents import OracleAgent
    >>> env = gym.make("mosaic/WebQA-v0", site_size=120)
    >>> agent = OracleAgent(env)
    >>> obs, info = env.reset(seed=0)
    >>> question, steps, done = info["session_task"], [], False
    >>> while not done:
    ...     action = agent.act(obs, info)
    ...     obs, reward, terminated, truncated, info = env.step(action)
    ...     steps.append(step_record(action, info))
    ...     done = terminated or truncated
    >>> record = trajectory_record(info["trajectory"], steps, question=question, reward=reward, source="rollout")
    >>> path = os.path.join(tempfile.mkdtemp(), "demo" + SUFFIX)
    >>> with TrajectoryLog(path) as log:
    ...     log.write(record)
    >>> [r == record for r in read(path)]
    [True]
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
import warnings
import zlib
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np


__all__ = ["FORMAT_VERSION", "SUFFIX", "LogError", "TrajectoryLog", "TruncatedLogWarning", "credit_by_session",
           "find_logs", "from_trajectory", "read", "step_record", "trajectory_record", "write_records"]

FORMAT_VERSION = 1
"""The version of the record layout (docs/logs.md). A reader refuses records of a later version."""

SUFFIX = ".traj.jsonl.gz"
"""How a trajectory log's file name ends; ``mosaic view`` reads every such file under a run folder."""

SOURCES = ("rollout", "eval", "train")


class LogError(ValueError):
    """A log that cannot be read (not gzip, a line that is not a record, a later format); names file and line."""


class TruncatedLogWarning(UserWarning):
    """A log whose end was cut off (a run killed while it wrote): the records before the cut are read."""


def step_record(action: Any, info: dict[str, Any]) -> dict[str, Any]:
    """What a log keeps of one step besides the env's own ``step_log`` entry: the action as text, its error
    message, the tool result shown, and which session acts next.

    ``info`` is the info ``env.step(action)`` returned. The tool result is the last message of the session
    that acts next: a tool's output, a subagent's result handed to its parent, or a fresh session's opening
    (question and summary, or fork task). ``end`` is the reason the episode ended on this step (``"answer"``,
    a truncation or termination reason), else ``None``.
    """
    messages = info["messages"]
    end = None
    if "truncation_reason" in info:
        end = info["truncation_reason"]
    elif "termination_reason" in info:
        end = info["termination_reason"]
    elif "trajectory" in info:
        end = "answer"
    return {"action": action if type(action) is str else f"<not text: {type(action).__name__}>",
            "error": info["action_error"], "shown": messages[-1]["content"] if messages else "",
            "next_session": int(info["session_id"]), "end": end}


def trajectory_record(tree: dict[str, Any], steps: Sequence[dict[str, Any]], *, question: str, reward: float,
                      source: str, iteration: int | None = None, group: int | None = None,
                      credit: dict[str, Any] | None = None, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """One log record from the env's ``info["trajectory"]`` and the :func:`step_record` of each step.

    Args:
        tree: ``info["trajectory"]`` at the episode's end.
        steps: one :func:`step_record` per step, in order (as many as ``tree["step_log"]``).
        question: the task's question.
        reward: the episode's return.
        source: ``"rollout"``, ``"eval"`` or ``"train"``.
        iteration: the RL iteration that made it (training), else None.
        group: its group within the iteration (training) or its task's index (eval), else None.
        credit: from :func:`credit_by_session`, or None where no learner saw it.
        meta: anything else worth keeping (seeds, sample index, protocol), JSON data.

    Raises:
        ValueError: for an unknown source, or steps that do not match the env's step log.
    """
    if source not in SOURCES:
        raise ValueError(f"source={source!r}: use one of {', '.join(SOURCES)}")
    log = tree["step_log"]
    if len(steps) != len(log):
        raise ValueError(f"{len(steps)} step records for a trajectory of {len(log)} steps: give one "
                         "step_record(action, info) per env.step")
    sessions = [dict(s) for s in tree["sessions"]]
    per_session = credit or {}
    for key in ("advantage", "broadcast", "mosaic", "contribution"):
        values = per_session.get(key)
        for s in sessions:
            s[f"credit_{key}"] = None if values is None else float(values[s["id"]])
    return {
        "format_version": FORMAT_VERSION,
        "source": source,
        "iteration": iteration,
        "group": group,
        "task_id": tree["task_id"],
        "question": question,
        "budget": int(tree["max_steps"]),
        "reward": float(reward),
        "success": bool(tree["success"]),
        "answer": tree["answer"],
        "gold_answer": tree["gold_answer"],
        "steps_used": int(tree["steps_used"]),
        "end": steps[-1]["end"] if steps else None,
        "credit": per_session.get("algo"),
        "sessions": sessions,
        "steps": [{**entry, **step} for entry, step in zip(log, steps)],
        "meta": dict(meta or {}),
    }


def from_trajectory(trajectory: Any, question: str, source: str, **context: Any) -> dict[str, Any]:
    """:func:`trajectory_record` of a :class:`~algos.rollout.Trajectory` collected with ``transcript=True``."""
    if trajectory.transcript is None:
        raise ValueError(f"trajectory of task {trajectory.task_id} has no transcript: collect it with "
                         "Request(..., transcript=True)")
    return trajectory_record(trajectory.tree, trajectory.transcript, question=question, reward=trajectory.reward,
                             source=source, **context)


def credit_by_session(group: Sequence[Any], advantage: dict[tuple[int, int], float],
                      contributions: Sequence[np.ndarray] | None, columns: dict[str, list[float]],
                      algo: str) -> list[dict[str, Any]]:
    """Per trajectory of a group (:class:`algos.rollout.Trajectory` s): each session's advantage under the run's
    credit (``algo``), under every credit side by side, and its contribution D (None where the run estimated
    none).

    ``advantage`` is the run's :meth:`algos.credit.Credit.session_advantages` for the group, ``columns`` its
    :meth:`algos.credit.Credit.columns` (one list per credit name, in the group's session rows). The log format is
    a leaf: it computes no credit itself.
    """
    out, row = [], 0
    for i, t in enumerate(group):
        n = t.num_sessions
        out.append({"algo": algo, "advantage": [advantage[(i, sid)] for sid in t.session_ids],
                    "broadcast": columns["broadcast"][row:row + n], "mosaic": columns["mosaic"][row:row + n],
                    "contribution": None if contributions is None else [float(x) for x in contributions[i]]})
        row += n
    return out


class TrajectoryLog:
    """A trajectory log being written: :meth:`write` appends one record as one line and flushes it.

    Args:
        path: the file (``*.traj.jsonl.gz``); its folder is created. An existing file is replaced.

    Text is written as ASCII JSON (``\\uXXXX`` escapes), so any Python string, even one with lone surrogates
    that UTF-8 cannot encode, is read back equal.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.name.endswith(SUFFIX):
            raise ValueError(f"{self.path}: a trajectory log's name ends in {SUFFIX} (mosaic view looks for it)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = gzip.open(self.path, "wt", encoding="ascii", compresslevel=6)
        self.count = 0

    def write(self, record: dict[str, Any]) -> None:
        """Append ``record`` (from :func:`trajectory_record`); NaN or infinity is an error, not invalid JSON."""
        if record.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"not a version-{FORMAT_VERSION} record: build it with algos.logs.trajectory_record")
        self._file.write(json.dumps(record, ensure_ascii=True, allow_nan=False, separators=(",", ":")) + "\n")
        self._file.flush()  # a sync flush: the record survives a kill of the run
        self.count += 1

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TrajectoryLog:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def write_records(path: str | Path, records: Iterable[dict[str, Any]]) -> Path:
    """Write ``records`` to ``path`` as a whole: into a temporary file renamed over it, so the file is either
    the complete log or absent (a training iteration's log, rewritten when a resumed run redoes it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name.removesuffix(SUFFIX) + ".", suffix=".tmp" + SUFFIX, dir=path.parent)
    os.close(fd)
    try:
        with TrajectoryLog(tmp) as log:
            for record in records:
                log.write(record)
        os.chmod(tmp, 0o644)  # mkstemp's file is private; a log is for reading, like the run's other files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read(path: str | Path) -> Iterator[dict[str, Any]]:
    """The records of a log, one at a time, in the order written.

    A log whose end was cut off (a killed run) yields the records before the cut, with a
    :class:`TruncatedLogWarning`.

    Raises:
        LogError: for a file that is not a gzip log, a line that is not a record, or a later format version.
    """
    path = Path(path)
    if not path.is_file():
        raise LogError(f"{path}: no such log file")
    complete = 0
    try:
        with gzip.open(path, "rt", encoding="ascii") as f:
            for line in f:
                if not line.endswith("\n"):  # the last line, cut off mid-record
                    raise EOFError("the last line is incomplete")
                yield _parse(path, complete + 1, line)
                complete += 1
    except (EOFError, zlib.error) as err:
        warnings.warn(f"{path}: the log is cut off after {complete} complete records ({err}): the run "
                      "that wrote it was probably killed", TruncatedLogWarning, stacklevel=2)
    except gzip.BadGzipFile as err:
        raise LogError(f"{path} is not a gzip trajectory log ({err})") from None
    except UnicodeDecodeError as err:
        raise LogError(f"{path}:{complete + 1}: not ASCII JSON ({err}): not written by algos.logs") from None


def _parse(path: Path, number: int, line: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise LogError(f"{path}:{number}: not a JSON record ({err})") from None
    if not isinstance(record, dict) or not isinstance(record.get("format_version"), int):
        raise LogError(f"{path}:{number}: a record has an integer format_version (is this a trajectory log?)")
    if record["format_version"] > FORMAT_VERSION:
        raise LogError(f"{path}:{number}: format_version {record['format_version']} is newer than this mosaic-gym "
                       f"reads ({FORMAT_VERSION}): upgrade mosaic-gym")
    return record


def find_logs(run_dir: str | Path) -> list[Path]:
    """Every trajectory log under ``run_dir`` (any depth), sorted by path; ``run_dir`` may be one log file."""
    run_dir = Path(run_dir)
    if run_dir.is_file():
        return [run_dir]
    return sorted(p for p in run_dir.rglob("*" + SUFFIX) if ".tmp" not in p.name)
