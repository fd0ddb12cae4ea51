"""The command line refuses bad input with one line on stderr and exit code 2 (issue 13, section 6): no
traceback, no attempt to reach the network for a name that is a typo, and no folder left behind."""

from __future__ import annotations

import os
import shutil
import socket
import sys
from pathlib import Path

import pytest
import torch

from mosaic_gym.cli import main

from helpers import SITE_SIZE

EVAL = ["eval", "--site-size", str(SITE_SIZE), "--n", "1", "--ks", "1", "--ts", "4", "--tasks", "1"]


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse and SystemExit messages
        code = exit_.code if isinstance(exit_.code, int) else 2
        if isinstance(exit_.code, str):
            print(exit_.code, file=sys.stderr)
    return code, capsys.readouterr().err


BAD_AGENTS = [
    ("Random", "(did you mean 'random'?)"),
    ("Oracle", "(did you mean 'oracle'?)"),
    ("tiny-3M", "(did you mean 'tiny-3m'?)"),
    ("smolm2", "(did you mean 'smollm2'?)"),
    ("gpt", "names no agent: use oracle, random, tiny-1m"),
    ("./no/such/folder", "there is no folder at ./no/such/folder"),
    ("runs/nothing-here/final", "there is no folder at runs/nothing-here/final"),
]


@pytest.mark.parametrize("command", ["eval", "rollout"])
@pytest.mark.parametrize("agent, fragment", BAD_AGENTS, ids=[a for a, _ in BAD_AGENTS])
def test_an_agent_name_that_names_nothing_is_one_line(tmp_path, capsys, monkeypatch, command, agent, fragment):
    def no_network(*args, **kwargs):
        raise AssertionError("a name that is not a hub id must not reach the network")

    monkeypatch.setattr(socket, "create_connection", no_network)
    out = tmp_path / "eval-out"
    argv = [*EVAL, "--out", str(out)] if command == "eval" else ["rollout", "--site-size", str(SITE_SIZE)]
    code, err = run_cli([*argv, "--agent", agent], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"mosaic {command}: ") and fragment in lines[0], err
    assert not out.exists()


def test_a_hub_id_offline_is_one_line_and_no_download(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, err = run_cli([*EVAL, "--out", str(tmp_path / "o"), "--agent", "nobody/no-such-model"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "'nobody/no-such-model' is not in the local Hugging Face cache" in err


@pytest.mark.parametrize("argv, fragment", [
    (["--ks", "1,x"], "--ks: '1,x' is not a comma-separated list of integers"),
    (["--ts", "0"], "--ts: '0': give positive integers"),
    (["--tasks", "0"], "--eval-tasks must be at least 1"),  # (--tasks: the older spelling)
    (["--eval-tasks", "0"], "argument --eval-tasks: '0': give how many test tasks to evaluate on"),
    (["--config", "no-such.toml"], "--config no-such.toml: cannot read it"),
    (["--site-size", "5"], "site_size must be a whole number >= 60"),
    (["--env-kwargs", '{"max_step": 3}'], "did you mean 'max_steps'"),
    (["--env-kwargs", "{oops"], "--env-kwargs is not valid JSON"),
    (["--hops", "one"], "argument --hops: 'one': use a number (2) or a range (1-3)"),
])
def test_bad_eval_arguments_are_one_line(tmp_path, capsys, argv, fragment):
    code, err = run_cli([*EVAL, "--out", str(tmp_path / "o"), *argv], capsys)
    assert code == 2 and fragment in err and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()


def test_site_serve_on_a_port_in_use_is_one_line(tmp_path, capsys):
    (tmp_path / "index.html").write_text("<title>Home</title>")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, err = run_cli(["site", "serve", str(tmp_path), "--port", str(port)], capsys)
    assert code == 2 and err.strip() == (f"mosaic site serve: port {port} on 127.0.0.1 is in use: choose another "
                                         "with --port N (--port 0 takes any free port)")


@pytest.mark.parametrize("argv, fragment", [
    (["--device", "cuda:0" if not torch.cuda.is_available() else "cuda:99"], "argument --device: "),
    (["--device", "gpu"], "argument --device: 'gpu' is not a device"),
    (["--budgets", "4,x"], "argument --budgets: invalid budget spec '4,x'"),
    (["--budgets", "log:32-4"], "low must not exceed high"),
    (["--bc-compact-at", "2"], "argument --bc-compact-at: '2' is not a fraction in (0, 1]"),
    (["--model", "Random"], "'Random' is not a model: use one of tiny-1m"),
    (["--site-size", "5"], "site_size must be a whole number >= 60"),
    (["--env-kwargs", '{"max_step": 3}'], "did you mean 'max_steps'"),
    (["--hops", "1-x"], "argument --hops: '1-x': use a number (2) or a range (1-3)"),
    (["--eval-tasks", "0"], "argument --eval-tasks: '0': give how many test tasks to evaluate on"),
    (["--probe", "summary", "--no-summary-choices"], "probe='summary' measures the summary choice"),
    (["--probe", "summary", "--mode", "generate"], "it needs mode='choose'"),
    (["--target-kl", "-1"], "argument --target-kl: -1: give a finite number > 0"),
    (["--rl-temperature", "nan"], "give a temperature >= 0"),
    (["--entropy-coef", "inf"], "argument --entropy-coef: inf: give a finite number >= 0"),
    (["--minibatches", "0"], "give --minibatches 1 or more"),
    (["--measure-fraction", "1.5"], "argument --measure-fraction: '1.5' is not a share in [0, 1]"),
])
def test_bad_train_arguments_are_one_line_and_leave_no_run_folder(tmp_path, capsys, argv, fragment):
    out = tmp_path / "run"
    code, err = run_cli(["train", "--site-size", str(SITE_SIZE), "--out", str(out), *argv], capsys)
    last = err.strip().splitlines()[-1]  # argparse prints its usage first, then the one line
    assert code == 2 and last.startswith("mosaic train") and fragment in last and "Traceback" not in err, err
    assert not out.exists()


CORPUS = Path(__file__).parent / "fixtures" / "corpus_jsonl"


@pytest.mark.parametrize("command", ["train", "eval", "rollout"])
def test_a_site_path_that_holds_no_corpus_is_one_line(tmp_path, capsys, command):
    argv = {"train": ["train", "--out", str(tmp_path / "run")], "eval": [*EVAL, "--out", str(tmp_path / "ev")],
            "rollout": ["rollout"]}[command]
    code, err = run_cli([*argv, "--site", str(tmp_path / "no-such-corpus")], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"mosaic {command}: no corpus at "), err
    assert "no such file or folder" in lines[0]
    assert not (tmp_path / "run").exists() and not (tmp_path / "ev").exists()


def test_rollout_and_eval_browse_a_corpus_given_by_site(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    shutil.copytree(CORPUS, corpus, ignore=shutil.ignore_patterns(".mosaic-index"))
    code, err = run_cli(["rollout", "--site", str(corpus), "--agent", "oracle", "--split", "all"], capsys)
    assert code == 0, err
    code, err = run_cli(["eval", "--site", str(corpus), "--agent", "oracle", "--split", "all", "--n", "1",
                         "--ks", "1", "--ts", "4", "--tasks", "1", "--no-progress", "--out", str(tmp_path / "ev")],
                        capsys)
    assert code == 0, err


def test_train_takes_site_and_keeps_it_as_an_absolute_path(monkeypatch):
    from mosaic_gym.cli import build_parser
    from mosaic_gym.commands.train import config_from_args

    monkeypatch.chdir(CORPUS.parent)
    config = config_from_args(build_parser().parse_args(["train", "--site", "corpus_jsonl"]))
    assert config.env_kwargs["site"] == str(CORPUS.resolve())
    assert "site" not in config_from_args(build_parser().parse_args(["train"])).env_kwargs


def test_length_normalize_reaches_the_runs_agent():
    """``--length-normalize`` (the default) is the run's setting and its agent's scoring; with
    ``--no-length-normalize``, candidates are summed."""
    from agents.models import load_model
    from algos.learn.train import make_agent
    from mosaic_gym.cli import build_parser
    from mosaic_gym.commands.train import config_from_args

    model, tokenizer = load_model("tiny-1m", texts=["open(1) open(2)"] * 30)
    for argv, expected in ((["train", "--length-normalize"], True), (["train"], True),
                           (["train", "--no-length-normalize"], False)):
        config = config_from_args(build_parser().parse_args(argv))
        assert config.length_normalize is expected
        assert make_agent(config, model, tokenizer).length_normalize is expected



def test_no_progress_silences_the_bars_of_code_already_imported(capsys, monkeypatch):
    """tqdm reads TQDM_DISABLE once, when it is imported; --no-progress sets it later (quiet_progress), and the
    bars of code imported before are silenced all the same."""
    import gymnasium as gym

    from agents import OracleAgent
    from algos.rollout import Collector, Request
    from mosaic_gym.commands.common import quiet_progress

    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    make = lambda: gym.make("mosaic/WebQA-v0", site_size=SITE_SIZE)  # noqa: E731
    collector, agent = Collector(make, 2), OracleAgent(make())
    requests = [Request(seed=k, options=None) for k in range(2)]
    collector.run(agent, requests, progress="episodes")
    assert "episodes" in capsys.readouterr().err  # the bar shows by default
    with quiet_progress(True):
        collector.run(agent, requests, progress="episodes")
    assert "episodes" not in capsys.readouterr().err
    assert "TQDM_DISABLE" not in os.environ
