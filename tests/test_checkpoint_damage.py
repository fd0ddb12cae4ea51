"""Damaged and inconsistent checkpoints: flipped bytes are caught by the payload's checksum; a state no run
writes (unknown phase, iteration -5 or 10**12, NaN weights or optimiser values, settings that contradict
config.json, unreadable generator states) is refused, even with a checksum forged to match; every refusal is
one line naming the file, from ``mosaic train --resume`` and from ``mosaic study``; a checkpoint of format 2
(before the checksum) is still resumed, with a line in the log saying its damage could not be detected."""

from __future__ import annotations

import math
import shutil
import zipfile
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

import algos.learn.train
from algos.learn.checkpoint import CheckpointError, check_training_state, payload_digest, read_checkpoint
from algos.learn.config import read_config, write_config
from algos.study import warm_start_configs
from mosaic_gym.cli import build_parser, main
from mosaic_gym.commands.train import config_from_args

from helpers import SITE_SIZE, TEST_MODEL

# A warm start and no RL iteration (phase "rl", iteration 0), the KL reference kept: every entry a resume reads.
ARGS = ["--model", TEST_MODEL, "--site-size", str(SITE_SIZE), "--max-steps", "6", "--bc-episodes", "2",
        "--bc-epochs", "1", "--iterations", "0", "--eval-episodes", "1", "--eval-tasks", "2", "--num-envs", "2",
        "--seed", "3", "--kl-coef", "0.05", "--no-progress"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run")
    config = config_from_args(build_parser().parse_args(["train", *ARGS, "--out", str(out)]))
    algos.learn.train.train(config, log=lambda *_: None)
    return out


def _load(run: Path) -> dict[str, Any]:
    return torch.load(run / "checkpoint.pt", weights_only=True)


def _forged(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], bytes]:
    """The run's checkpoint changed by ``change`` and given the checksum of what it now holds (as a forger, or
    a bug in a writer, would): only the state's own checks can refuse it."""
    def content(run: Path) -> bytes:
        payload = _load(run)
        change(payload)
        payload["sha256"] = payload_digest(payload)
        return _torch_bytes(payload)
    return content


def _torch_bytes(obj: Any) -> bytes:
    import io

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _flipped(count: int) -> Callable[[Path], bytes]:
    """The file with ``count`` bytes flipped inside its largest tensor record (the zip still reads, the pickle
    still loads: only the values change)."""
    def content(run: Path) -> bytes:
        path = run / "checkpoint.pt"
        data = bytearray(path.read_bytes())
        with zipfile.ZipFile(path) as archive:
            entry = max(archive.infolist(), key=lambda e: e.file_size)
            assert entry.compress_type == zipfile.ZIP_STORED
        header = entry.header_offset
        name_length = int.from_bytes(data[header + 26: header + 28], "little")
        extra_length = int.from_bytes(data[header + 28: header + 30], "little")
        start = header + 30 + name_length + extra_length
        for k in range(count):
            data[start + k * (entry.file_size // count)] ^= 0xFF
        return bytes(data)
    return content


def _set(path: tuple, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(payload: dict[str, Any]) -> None:
        target = payload
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return change


def _first_weight_nan(payload: dict[str, Any]) -> None:
    name = next(k for k, v in payload["model"].items() if v.is_floating_point())
    payload["model"][name].view(-1)[0] = math.nan


def _iteration(value: int) -> Callable[[dict[str, Any]], None]:
    def change(payload: dict[str, Any]) -> None:
        payload["extra"]["state"]["iteration"] = payload["step"] = value
    return change


def _another_runs_lr(payload: dict[str, Any]) -> None:
    payload["extra"]["config"]["pg"]["lr"] = payload["extra"]["config"]["pg"]["lr"] * 10


def _reference_of_another_shape(payload: dict[str, Any]) -> None:
    name = next(iter(payload["extra"]["ref_model"]))
    payload["extra"]["ref_model"][name] = torch.zeros(1)


# (case, the checkpoint's bytes given a finished run, what the one line says)
DAMAGED = [
    ("64 flipped bytes", _flipped(64), "do not match their checksum"),
    ("1 flipped byte", _flipped(1), "do not match their checksum"),
    ("truncated", lambda run: (run / "checkpoint.pt").read_bytes()[:-100], "truncated"),
    ("checksum removed", lambda run: _torch_bytes({k: v for k, v in _load(run).items() if k != "sha256"}),
     "it has no 'sha256' entry"),
    ("format True", _forged(_set(("format",), True)), "its format is True"),
    ("phase 'zzz'", _forged(_set(("extra", "state", "phase"), "zzz")), "its phase is 'zzz', not one of"),
    ("iteration -5", _forged(_iteration(-5)), "its iteration is -5, not a count"),
    ("iteration 10**12", _forged(_iteration(10**12)), "its iteration 1000000000000 is beyond the 0 RL iterations"),
    ("iteration True", _forged(_iteration(True)), "its iteration is True, not a count"),
    ("iteration beyond its history", _forged(lambda p: (_iteration(1)(p), _set(
        ("extra", "config", "iterations"), 1)(p))), "differs from its step (1) or the iterations in its history (0)"),
    ("warm start at iteration 1", _forged(lambda p: (_iteration(1)(p), _set(("extra", "state", "phase"),
                                                                             "warm_start")(p))), "beyond the 0 RL"),
    ("NaN weight", _forged(_first_weight_nan), "holds NaN or infinite values"),
    ("infinite optimiser lr", _forged(_set(("optimizer", "param_groups", 0, "lr"), math.inf)),
     "its optimizer['param_groups'][0]['lr'] holds NaN or infinite"),
    ("NaN reference weights", _forged(lambda p: next(iter(p["extra"]["ref_model"].values())).fill_(math.nan)),
     "its extra['ref_model']"),
    ("settings of another run", _forged(_another_runs_lr), "its settings contradict the run's config.json: pg.lr"),
    ("settings unreadable", _forged(_set(("extra", "config"), {"no_such_setting": 1})), "its settings are unreadable"),
    ("sampler state unreadable", _forged(_set(("extra", "rng"), {"bit_generator": "PCG64"})),
     "its generator states are unreadable"),
    ("agent generator state unreadable", _forged(_set(("extra", "agent_rng"), torch.zeros(3, dtype=torch.uint8))),
     "its generator states are unreadable"),
    ("reference of another shape", _forged(_reference_of_another_shape), "its reference model is not the shape"),
]


@pytest.mark.parametrize("name,content,problem", DAMAGED, ids=[d[0] for d in DAMAGED])
def test_a_damaged_or_inconsistent_checkpoint_is_refused_in_one_line_naming_it(finished, tmp_path, name, content,
                                                                                problem):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    (run / "checkpoint.pt").write_bytes(content(run))
    files = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    with pytest.raises(SystemExit) as refused:
        main(["train", "--resume", "--out", str(run)])
    message = str(refused.value.code)
    assert message.startswith(f"mosaic train: cannot resume from {run / 'checkpoint.pt'}: "), message
    assert problem in message, message
    assert "\n" not in message and len(message) < 400
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == files  # refused before any write


def test_the_checkpoint_a_run_wrote_passes_every_check(finished):
    path = finished / "checkpoint.pt"
    payload = read_checkpoint(path)
    notes: list[str] = []
    check_training_state(path, payload, read_config(finished / "config.json"), notes.append)
    assert payload["sha256"] == payload_digest(payload) and len(payload["sha256"]) == 64 and notes == []


def test_a_checkpoint_without_a_checksum_is_resumed_with_a_line_saying_so(finished, tmp_path):
    """Format 2, written before the checksum: refusing it would end runs nothing is wrong with."""
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    payload = _load(run)
    del payload["sha256"]
    payload["format"] = 2
    (run / "checkpoint.pt").write_bytes(_torch_bytes(payload))
    (run / "summary.json").unlink()
    lines: list[str] = []
    config = read_config(run / "config.json")
    config.resume = True
    algos.learn.train.train(config, log=lines.append)
    assert any(line.startswith(f"{run / 'checkpoint.pt'} was written before checkpoints carried a checksum")
               for line in lines)
    assert any(line.startswith(f"resumed from {run / 'checkpoint.pt'}") for line in lines)
    assert (run / "summary.json").is_file()  # the resumed run finished


def test_the_digest_tells_apart_what_a_load_could_confuse():
    """Values that print alike but differ (an int and a float, a list and a tuple, a tensor's dtype or shape)
    give different checksums; the same payload built twice gives the same one."""
    base = {"a": [1, (2, 3)], "t": torch.arange(6, dtype=torch.float32)}
    variants = [{"a": [1.0, (2, 3)], "t": base["t"]}, {"a": [1, [2, 3]], "t": base["t"]},
                {"a": [1, (2, 3)], "t": base["t"].double()}, {"a": [1, (2, 3)], "t": base["t"].reshape(2, 3)},
                {"t": base["t"], "a": [1, (2, 3)]}]
    digests = {payload_digest(v) for v in variants}
    assert len(digests) == len(variants) and payload_digest(base) not in digests
    assert payload_digest(base) == payload_digest({"a": [1, (2, 3)], "t": torch.arange(6, dtype=torch.float32)})
    with pytest.raises(TypeError, match="plain data only, not a object"):
        payload_digest({"x": object()})


def test_a_checkpoint_error_survives_the_trip_from_a_study_process():
    import pickle

    error = pickle.loads(pickle.dumps(CheckpointError("/r/checkpoint.pt", "its phase is 'zzz'")))
    assert str(error) == "cannot resume from /r/checkpoint.pt: its phase is 'zzz'" and error.problem.endswith("'zzz'")


def _study_warm_start(out: Path) -> Path:
    return Path(warm_start_configs("compaction", out, seeds=1, quick=True)[0].out)


# (case, what is written in the study's first run folder, what the line says); the study resumes that run first
STUDY = [
    ("damaged config.json", lambda folder: (folder / "config.json").write_text('{"seed": '), "is not a run's settings"),
    ("damaged checkpoint", lambda folder: (
        write_config(folder / "config.json", warm_start_configs("compaction", folder.parents[2], 1, quick=True)[0]),
        (folder / "checkpoint.pt").write_bytes(b"PK\x03\x04 not a checkpoint")), "cannot resume from"),
]


@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize("name,damage,problem", STUDY, ids=[s[0] for s in STUDY])
def test_mosaic_study_reports_a_damaged_run_in_one_line(tmp_path, capsys, name, damage, problem, jobs):
    folder = _study_warm_start(tmp_path)
    folder.mkdir(parents=True)
    damage(folder)
    with pytest.raises(SystemExit) as stopped:
        main(["study", "compaction", "--quick", "--seeds", "1", "--jobs", jobs, "--no-progress", "--out",
              str(tmp_path)])
    message = str(stopped.value.code)
    assert message.startswith("mosaic study: ") and problem in message and str(folder) in message, message
    assert "\n" not in message and "Traceback" not in capsys.readouterr().err
