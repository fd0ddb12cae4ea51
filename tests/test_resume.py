"""Resuming ``mosaic train``: a run killed in any phase (during the warm start, while or just after its first
checkpoint is written, mid-RL; in-process and with a real SIGKILL) resumes to exactly the parameters, metrics
and summary of a run that never stopped; writes killed midway leave no temporary file for good; a file that is
not a checkpoint is refused in one line, and loading one never runs code; ``--resume`` takes the run's
``config.json`` and refuses flags that contradict it."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import algos.learn.train
from algos.learn.checkpoint import CheckpointError, load_checkpoint, payload_digest, save_checkpoint
from mosaic_gym.cli import build_parser, main
from mosaic_gym.commands.train import config_from_args, resume_config
from algos.learn.config import ConfigError, read_config, write_config
from helpers import SITE_SIZE, TEST_MODEL

# The tiniest run that still does everything: 2 demonstrations, 2 RL iterations of one group of 2, every test
# task evaluated once. One-hop tasks, short chunks and windows: compactions mid-episode, so Mosaic has sessions
# to credit; the likelihood estimator gives them distinct advantages even when every trajectory fails (an
# untrained policy does), so RL moves the parameters.
ARGS = ["--model", TEST_MODEL, "--site-size", str(SITE_SIZE), "--max-steps", "6", "--session-max-tokens", "500",
        "--env-kwargs", '{"chunk_tokens": 96}', "--bc-episodes", "2", "--bc-epochs", "1", "--iterations", "2",
        "--tasks-per-iter", "1", "--group-size", "2", "--estimator", "likelihood", "--continuations", "1",
        "--eval-episodes", "1", "--eval-tasks", "3", "--num-envs", "2", "--seed", "3", "--lr", "0.01",
        "--kl-coef", "0.05"]


def _config(out: Path, **changes):
    config = config_from_args(build_parser().parse_args(["train", *ARGS, "--out", str(out)]))
    return dataclasses.replace(config, **changes)


def _quiet(*args) -> None:
    pass


class _Killed(Exception):
    """Stands for the process being killed."""


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the subprocesses (OMP_NUM_THREADS=1): the same arithmetic, bit for bit
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("uninterrupted")
    algos.learn.train.train(_config(out), log=_quiet)
    return out


def _weights(out: Path) -> dict[str, torch.Tensor]:
    return torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=True)["model"]


def _results(metrics: Path) -> list[dict]:
    """Each iteration's metrics without its phase timings and peak memory (what two equal runs do not share)."""
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert all(line["time_total"] >= 0 for line in lines)
    return [{k: v for k, v in line.items() if not k.startswith(("time_", "memory_"))} for line in lines]


def _assert_same_run(out: Path, expected: Path) -> None:
    """The same parameters (bit for bit), metrics and held-out results as the run that never stopped."""
    want, got = _weights(expected), _weights(out)
    assert want.keys() == got.keys()
    different = [k for k in want if not torch.equal(want[k], got[k])]
    assert not different, f"parameters differ from the uninterrupted run's in {different[:3]}"
    assert _results(out / "metrics.jsonl") == _results(expected / "metrics.jsonl")
    summary, reference = (json.loads((p / "summary.json").read_text()) for p in (out, expected))
    for run in (summary, reference):
        del run["run"], run["model"]  # the run folder's paths
    assert summary == reference
    assert not list(out.glob("*.tmp"))


# --- killed in every phase ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _in_warm_start(monkeypatch):
    def log(message: str) -> None:
        if message.startswith("warm start:"):  # the demonstrations are cloned, the checkpoint is not written
            raise _Killed

    yield log


@contextlib.contextmanager
def _writing_first_checkpoint(monkeypatch):
    real = torch.save

    def half_then_die(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise _Killed

    monkeypatch.setattr(torch, "save", half_then_die)
    yield _quiet
    monkeypatch.setattr(torch, "save", real)


@contextlib.contextmanager
def _after_checkpoint(monkeypatch, number: int = 1):
    real, calls = algos.learn.train.save_checkpoint, []

    def save_then_die(*args, **kwargs):
        real(*args, **kwargs)
        calls.append(1)
        if len(calls) == number:
            raise _Killed

    monkeypatch.setattr(algos.learn.train, "save_checkpoint", save_then_die)
    yield _quiet
    monkeypatch.setattr(algos.learn.train, "save_checkpoint", real)


@contextlib.contextmanager
def _mid_rl(monkeypatch):
    real, calls = algos.learn.train.rl_iteration, []

    def iteration_then_die(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # the second iteration, its rollouts done, its update not
            real(*args, **kwargs)
            raise _Killed
        return real(*args, **kwargs)

    monkeypatch.setattr(algos.learn.train, "rl_iteration", iteration_then_die)
    yield _quiet
    monkeypatch.setattr(algos.learn.train, "rl_iteration", real)


# (where the run is killed, how, what is on disk afterwards: the step and phase of the checkpoint, if any)
KILLS = [
    ("during the warm start", _in_warm_start, None),
    ("while the first checkpoint is written", _writing_first_checkpoint, None),
    ("just after the first checkpoint", _after_checkpoint, (0, "rl")),
    ("mid-RL, in the second iteration", _mid_rl, (1, "rl")),
]


def test_a_run_killed_in_every_phase_resumes_to_the_uninterrupted_run(uninterrupted, tmp_path, monkeypatch):
    """One run folder, killed once in each phase and resumed each time (a kill before the first checkpoint
    starts the run again: then the later kills happen in a run that did)."""
    out = tmp_path / "killed"
    resume = False
    for where, kill, on_disk in KILLS:
        with kill(monkeypatch) as log, pytest.raises(_Killed):
            algos.learn.train.train(_config(out, resume=resume), log=log)
        resume = True
        assert (out / "config.json").is_file(), where
        if on_disk is None:
            assert not (out / "checkpoint.pt").exists(), where
        else:
            payload = torch.load(out / "checkpoint.pt", weights_only=True)
            assert (payload["step"], payload["extra"]["state"]["phase"]) == on_disk, where
    lines: list[str] = []
    algos.learn.train.train(_config(out, resume=True), log=lines.append)
    assert any(line.startswith(f"resumed from {out / 'checkpoint.pt'} at iteration 1") for line in lines)
    first = torch.load(out / "checkpoint.pt", weights_only=True)["extra"]["ref_model"]  # the warm-started policy
    assert any(not torch.equal(first[k], v) for k, v in _weights(out).items())  # RL did change the policy
    _assert_same_run(out, uninterrupted)


@pytest.fixture(scope="module")
def warm_only(tmp_path_factory) -> Path:
    """A warm-start-only run (``iterations=0``) of the other algorithm."""
    warm = tmp_path_factory.mktemp("warm")
    algos.learn.train.train(_config(warm, iterations=0, algo="broadcast"), log=_quiet)
    return warm


def test_a_run_from_a_shared_warm_start_is_the_run_that_warmed_itself(uninterrupted, warm_only, tmp_path):
    """Arms of a comparison share one warm start (``warm_start_from``, what ``mosaic study`` does): a warm-start-only
    run of another algorithm, then RL from its checkpoint, gives the parameters, metrics and summary of the run that
    computed its own warm start; and the shared warm start's folder is left as it was."""
    warm = warm_only
    before = (warm / "checkpoint.pt").read_bytes()
    out, lines = tmp_path / "from-shared", []
    algos.learn.train.train(_config(out, warm_start_from=str(warm)), log=lines.append)
    assert any(line.startswith(f"warm start from {warm}") for line in lines)
    assert not any(line.startswith("warm start:") for line in lines)  # no demonstrations cloned here
    _assert_same_run(out, uninterrupted)
    assert (warm / "checkpoint.pt").read_bytes() == before
    # killed after its first RL checkpoint, it resumes from its own checkpoint, not from the shared one
    resumed: list[str] = []
    algos.learn.train.train(_config(out, warm_start_from=str(warm), resume=True, iterations=3), log=resumed.append)
    assert any(line.startswith("resumed from") for line in resumed)


def test_an_arm_may_take_its_own_learning_rate_from_a_shared_warm_start(warm_only, tmp_path):
    """The RL optimiser has taken no step when a warm start ends, so an arm of another learning rate (and KL
    weight) from the shared warm start is the run of that learning rate that warmed itself."""
    pg = dataclasses.replace(_config(warm_only).pg, lr=0.003, kl_coef=0.0)
    shared, own = tmp_path / "shared", tmp_path / "own"
    algos.learn.train.train(_config(shared, warm_start_from=str(warm_only), pg=pg), log=_quiet)
    algos.learn.train.train(_config(own, pg=pg), log=_quiet)
    _assert_same_run(shared, own)
    optimiser = torch.load(shared / "checkpoint.pt", weights_only=True)["optimizer"]
    assert {group["lr"] for group in optimiser["param_groups"]} == {0.003}


@pytest.mark.parametrize("changes, named", [
    ({"seed": 4}, "seed"),  # another warm start: refused, naming the setting
    ({"bc_episodes": 3}, "bc_episodes"),
    ({"pg": {"micro_batch_tokens": 1024}}, "pg.micro_batch_tokens"),  # the warm start's micro-batches too
])
def test_a_warm_start_of_other_settings_is_refused_in_one_line(warm_only, tmp_path, changes, named):
    warm = warm_only
    if "pg" in changes:
        changes = {"pg": dataclasses.replace(_config(warm).pg, **changes["pg"])}
    with pytest.raises(ConfigError, match=rf"its warm start used {named}=.*only algo, "):
        algos.learn.train.train(_config(tmp_path / "arm", warm_start_from=str(warm), **changes), log=_quiet)


def test_a_warm_start_whose_checkpoint_is_damaged_is_refused_as_a_warm_start(warm_only, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(warm_only, broken)
    (broken / "checkpoint.pt").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"cannot take its warm start from .*checkpoint.pt: the file is empty"):
        algos.learn.train.train(_config(tmp_path / "arm", warm_start_from=str(broken)), log=_quiet)


def test_a_warm_start_from_an_unfinished_or_trained_run_is_refused(uninterrupted, tmp_path):
    with pytest.raises(ConfigError, match="is not a finished run .*--iterations 0"):
        algos.learn.train.train(_config(tmp_path / "a", warm_start_from=str(tmp_path / "nothing")), log=_quiet)
    with pytest.raises(ConfigError, match="has run 2 RL iterations"):
        algos.learn.train.train(_config(tmp_path / "b", warm_start_from=str(uninterrupted)), log=_quiet)


# A child process that runs ``mosaic train`` and SIGKILLs itself at a point: nothing of Python's runs after.
_DRIVER = """
import os, signal, sys
import torch
import algos.learn.train
from mosaic_gym.cli import main

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def half_then_die(obj, f, *args, **kwargs):
    f.write(b"PK half a checkpoint")
    f.flush()
    die()

def save_then_die(*args, **kwargs):
    real_save(*args, **kwargs)
    die()

real_save = algos.learn.train.save_checkpoint
if sys.argv[1] == "during":
    torch.save = half_then_die
else:
    algos.learn.train.save_checkpoint = save_then_die
main(["train", *sys.argv[2:]])
"""


@pytest.mark.parametrize("when", ["during", "after"])
def test_sigkilled_at_the_first_checkpoint_resumes_exactly_with_the_runs_own_settings(uninterrupted, tmp_path,
                                                                                       when):
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    child = subprocess.run([sys.executable, "-c", _DRIVER, when, *ARGS, "--out", str(out)], env=env,
                           capture_output=True, text=True, timeout=600)
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    stale = list(out.glob("checkpoint.pt.*.tmp"))
    assert (len(stale), (out / "checkpoint.pt").exists()) == ((1, False) if when == "during" else (0, True))
    # Only --resume and --out: every other setting comes from the run's config.json, not the defaults.
    assert main(["train", "--resume", "--out", str(out)]) == 0
    _assert_same_run(out, uninterrupted)  # (and no temporary file left)


# --- refused checkpoints ------------------------------------------------------------------------------------


class _Crafted:
    """A pickle that, loaded unsafely, creates ``marker`` (it could as well run any command)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


def _valid(run: Path) -> bytes:
    return (run / "checkpoint.pt").read_bytes()


def _torch_bytes(obj) -> bytes:
    import io

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _without(run: Path, key: str) -> bytes:
    payload = torch.load(run / "checkpoint.pt", weights_only=True)
    del payload[key]
    return _torch_bytes(payload)


def _other_model(run: Path) -> bytes:
    payload = torch.load(run / "checkpoint.pt", weights_only=True)
    payload["model"] = payload["extra"]["ref_model"] = torch.nn.Linear(3, 2).state_dict()
    payload["sha256"] = payload_digest(payload)  # (a checkpoint of another model, not a damaged one)
    return _torch_bytes(payload)


# (what the file is, its bytes given a valid run, what the refusal says)
CORRUPT = [
    ("empty", lambda run: b"", "the file is empty"),
    ("truncated", lambda run: _valid(run)[: len(_valid(run)) // 2], "truncated"),
    ("random bytes", lambda run: bytes(range(256)) * 64, "not a checkpoint"),
    ("no model entry", lambda run: _without(run, "model"), "it has no 'model' entry"),
    ("not a dict", lambda run: _torch_bytes([1, 2, 3]), "it holds a list"),
    ("another model's weights", _other_model, "its weights are another model's"),
    ("a crafted pickle", lambda run: pickle.dumps({"model": _Crafted(run / "marker")}, protocol=2), "refused"),
    ("a crafted torch file", lambda run: _torch_bytes({"model": _Crafted(run / "marker")}), "refused"),
]


@pytest.mark.parametrize("name,content,problem", CORRUPT, ids=[c[0] for c in CORRUPT])
def test_a_file_that_is_not_a_checkpoint_is_refused_in_one_line(uninterrupted, tmp_path, name, content, problem):
    run = tmp_path / "run"
    shutil.copytree(uninterrupted, run)
    (run / "checkpoint.pt").write_bytes(content(run))
    config_before = (run / "config.json").read_text()
    with pytest.raises(SystemExit) as refused:
        main(["train", "--resume", "--out", str(run)])
    message = str(refused.value.code)
    assert message.startswith(f"mosaic train: cannot resume from {run / 'checkpoint.pt'}: ") and problem in message
    assert "\n" not in message and len(message) < 400
    assert not (run / "marker").exists()  # nothing in the file ran
    assert (run / "config.json").read_text() == config_before  # refused before anything was written


def test_loading_a_crafted_checkpoint_never_runs_its_code(tmp_path):
    marker = tmp_path / "marker"
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(_torch_bytes({"model": _Crafted(marker)}))
    with pytest.raises(CheckpointError, match="refused: it holds objects other than tensors"):
        load_checkpoint(path, torch.nn.Linear(3, 2))
    assert not marker.exists()
    torch.load(path, weights_only=False)  # what the unsafe load did: the test's crafted file does run code
    assert marker.exists()


def test_the_command_line_refuses_a_crafted_checkpoint_in_one_line_with_a_failing_exit_code(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write_config(run / "config.json", _config(run))
    (run / "checkpoint.pt").write_bytes(pickle.dumps({"model": _Crafted(run / "marker")}, protocol=2))
    child = subprocess.run([sys.executable, "-m", "mosaic_gym.cli", "train", "--resume", "--out", str(run)],
                           capture_output=True, text=True, timeout=300, env={**os.environ, "TQDM_DISABLE": "1"})
    assert child.returncode != 0
    lines = child.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in child.stderr, child.stderr[-2000:]
    assert lines[0].startswith(f"mosaic train: cannot resume from {run / 'checkpoint.pt'}: refused: ")
    assert not (run / "marker").exists()


def test_a_checkpoint_restores_every_rng_from_plain_data(tmp_path):
    import random

    import numpy as np

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    path = tmp_path / "checkpoint.pt"
    generator = np.random.default_rng(1)
    save_checkpoint(path, model, optimizer, step=7, extra={"rng": generator.bit_generator.state})
    draws = (random.random(), float(np.random.random()), float(torch.rand(1)), generator.random())
    payload = load_checkpoint(path, model, optimizer)  # (weights_only: tensors, lists, dicts and numbers)
    generator.bit_generator.state = payload["extra"]["rng"]
    assert (random.random(), float(np.random.random()), float(torch.rand(1)), generator.random()) == draws
    assert payload["step"] == 7 and optimizer.state_dict()["state"][0]["step"] == 1


def test_a_kill_during_a_write_leaves_no_temporary_file_for_good(tmp_path):
    path = tmp_path / "checkpoint.pt"
    stale = [tmp_path / "checkpoint.pt.abc123.tmp", tmp_path / "checkpoint.pt.x.tmp"]
    for p in stale:
        p.write_bytes(b"half")
    (tmp_path / "notes.tmp").write_text("someone else's")
    from algos.learn.checkpoint import remove_stale_temps

    assert remove_stale_temps(path) == sorted(stale)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.tmp"]


# --- --resume takes the run's config.json -------------------------------------------------------------------


@pytest.fixture()
def saved_run(tmp_path) -> Path:
    """A run folder whose config.json differs from the command line's defaults."""
    run = tmp_path / "run"
    run.mkdir()
    write_config(run / "config.json", _config(run, algo="broadcast"))
    return run


def _resume(*flags: str):
    return resume_config(build_parser().parse_args(["train", "--resume", *flags]))


def test_resume_takes_the_runs_config_and_the_iterations_given(saved_run):
    config = _resume("--out", str(saved_run), "--iterations", "3")
    assert config == dataclasses.replace(read_config(saved_run / "config.json"), iterations=3, resume=True)
    assert (config.algo, config.pg.lr, config.bc_episodes, config.env_kwargs["chunk_tokens"]) == \
        ("broadcast", 0.01, 2, 96)
    # Flags that agree with the run are fine, whatever the defaults.
    assert _resume("--out", str(saved_run), "--algo", "broadcast", "--lr", "0.01", "--hops", "1") == \
        dataclasses.replace(config, iterations=2)
    # How the run shows its progress is not one of its settings.
    assert _resume("--out", str(saved_run), "--no-progress") == dataclasses.replace(config, iterations=2)


@pytest.mark.parametrize("flags,named", [
    (["--lr", "0.5"], "--lr 0.5 contradicts the run's pg.lr = 0.01"),
    (["--algo", "mosaic"], "--algo 'mosaic' contradicts the run's algo = 'broadcast'"),  # the default, given
    (["--eval-episodes", "4"], "--eval-episodes 4 contradicts the run's eval_episodes = 1"),
    (["--dr-grpo"], "--dr-grpo contradicts the run's pg.normalize_std = True"),
    (["--env-kwargs", '{"chunk_tokens": 64}'],
     """--env-kwargs '{"chunk_tokens": 64}' contradicts the run's env_kwargs.chunk_tokens = 96"""),
    (["--mode", "generate"], "--mode 'generate' contradicts the run's mode = 'choose'"),
])
def test_a_flag_that_contradicts_the_runs_config_is_an_error_naming_both_values(saved_run, flags, named):
    with pytest.raises(ConfigError, match="only --iterations may change") as err:
        _resume("--out", str(saved_run), *flags)
    assert str(err.value).startswith(named) and str(saved_run / "config.json") in str(err.value)


def test_resuming_a_folder_without_a_run_is_one_clear_line(tmp_path):
    with pytest.raises(SystemExit) as err:
        main(["train", "--resume", "--out", str(tmp_path)])
    assert err.value.code == (f"mosaic train: no run to resume in {tmp_path}: it has no config.json "
                              f"(start the run without --resume)")


def test_train_refuses_a_resume_that_changes_the_runs_settings(saved_run):
    config = dataclasses.replace(read_config(saved_run / "config.json"), resume=True, eval_episodes=5)
    with pytest.raises(ConfigError, match="would change eval_episodes from 1 to 5"):
        algos.learn.train.train(config, log=_quiet)
    assert read_config(saved_run / "config.json").eval_episodes == 1
