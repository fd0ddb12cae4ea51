"""One command line (issue 40): every setting of ``mosaic train`` is a flag named after it, with its field's help
and default; ``--config FILE`` (TOML, YAML, JSON) reads the same settings; a flag that two commands take has one
name and one default; older spellings still read."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pytest

from algos.learn.config import NOT_SETTINGS, ConfigError, PGConfig, TrainConfig, config_to_json, setting, write_config
from mosaic_gym.cli import build_parser, main
from mosaic_gym.commands import common, study
from mosaic_gym.commands.train import DERIVED, NOT_FLAGS, cli_defaults, config_from_args, resume_config, train_flags

FIXTURES = Path(__file__).parent / "fixtures"

# Values no type or choice list suggests (the rest are derived from the field: another choice, the other bool,
# a larger number).
VALUES = {"bc_styles": ('[{"fork": false}]', [{"fork": False}]), "budgets": ("4,8", "4,8"),
          "eval_budgets": ("8,4", [4, 8]), "warm_start_from": ("runs/w", "runs/w"), "pg.device": ("meta", "meta"),
          "model": ("tiny-100k", "tiny-100k"), "out": ("x/run", "x/run"), "ray": ("auto", "auto"),
          "env_kwargs.site": (str(FIXTURES / "corpus_jsonl"), str((FIXTURES / "corpus_jsonl").resolve())),
          "env_kwargs.hops": ("1-3", [1, 3]), "env_kwargs.backend": ("playwright", "playwright"),
          "env_id": ("mosaic/WebQA-Fork-v0", "mosaic/WebQA-Fork-v0"), "probe": ("none", None),
          "bc_compact_at": ("0.5", 0.5), "eval_temperature": ("0.5", 0.5), "eval_tasks": ("3", 3),
          "pg.measure_fraction": ("0.25", 0.25)}


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def other_value(flag, name: str, default):
    """``(argv, the setting's value then)`` for a flag that moves ``name`` off its default."""
    if name in VALUES:
        text, value = VALUES[name]
        return [flag.name, text], value
    if flag.switch:
        return [flag.name if not default else "--no-" + flag.name[2:]], None if name.startswith("env_kwargs.") \
            and default else not default
    if flag.choices:
        choice = next(c for c in flag.choices if c != default)
        return [flag.name, choice], choice
    if isinstance(default, bool) or default is None:
        raise AssertionError(f"add a value for {name} to VALUES")
    value = default + 1 if isinstance(default, int) else default * 2 or 0.25
    return [flag.name, str(value)], value


def test_every_setting_is_a_flag_named_after_it_with_its_fields_help():
    pairs = train_flags()
    by_setting = {name: flag for flag, name in pairs}
    fields = [f.name for f in dataclasses.fields(TrainConfig)] + [f"pg.{f.name}" for f in dataclasses.fields(PGConfig)]
    env_keys = [f"env_kwargs.{key}" for key in ("site", "site_seed", "site_size", "hops", "max_steps",
                                                "session_max_tokens", "summary_choices", "backend")]
    defaults = cli_defaults()
    train = dict(_subcommands(build_parser()))["train"]
    helps = {option: action.help for action in train._actions for option in action.option_strings}
    for name in fields + env_keys:
        if name in DERIVED or name in ("pg", *NOT_FLAGS):
            continue
        assert name in by_setting, f"no flag sets {name}"
        flag = by_setting[name]
        if not name.startswith("env_kwargs.") and name not in ("env_id",):
            assert flag.name == "--" + name.removeprefix("pg.").replace("_", "-")
        if "." not in name or name.startswith("pg."):
            assert common.help_of(name) in helps[flag.name]
        def value(config):  # (where the run lives and how it steps are no settings of config.json)
            return getattr(config, name) if name in NOT_SETTINGS else setting(config, name)

        default = None if name == "out" else value(TrainConfig(**defaults))
        argv, expected = other_value(flag, name, default)
        got = value(config_from_args(parse("train", *argv)))
        assert got == expected and got != default, (name, argv, got)
    # Settings no flag of its own sets are set through the flags named.
    assert config_from_args(parse("train", "--algo", "broadcast")).pg.advantage == "broadcast"
    assert config_from_args(parse("train", "--mode", "generate")).env_kwargs["candidates"] is False


def test_train_with_no_arguments_is_the_dataclass_demo():
    config = config_from_args(parse("train"))
    assert config == dataclasses.replace(TrainConfig(), env_kwargs={**TrainConfig().env_kwargs, "site_seed": 0},
                                         out="runs/mosaic")


def _toml(data: dict) -> str:
    """A TOML writer for settings: scalars, lists, lists of tables, and tables (None as "none")."""
    def value(v):
        if v is None:
            return '"none"'
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + "}"
        return repr(v)

    lines = [f"{k} = {value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for k, v in data.items():
        if isinstance(v, dict):
            lines += ["", f"[{k}]"] + [f"{kk} = {value(vv)}" for kk, vv in v.items()]
    return "\n".join(lines) + "\n"


FLAGS = ["--algo", "broadcast", "--lr", "0.01", "--hops", "2", "--site-size", "120", "--no-summary-choices",
         "--probe", "none", "--eval-tasks", "3", "--bc-max-steps", "none", "--bc-styles", '[{"fork": false}]',
         "--target-kl", "none", "--env-kwargs", '{"chunk_tokens": 96}', "--mode", "generate", "--seed", "4",
         "--eval-budgets", "4,8", "--no-length-normalize", "--temperature", "0.5"]


@pytest.mark.parametrize("suffix", [".toml", ".yaml", ".json"])
def test_a_config_file_gives_the_same_settings_as_the_flags(tmp_path, suffix):
    by_flags = config_from_args(parse("train", *FLAGS, "--out", str(tmp_path)))
    data = config_to_json(by_flags)
    file = tmp_path / f"settings{suffix}"
    if suffix == ".yaml":
        yaml = pytest.importorskip("yaml")
        file.write_text(yaml.safe_dump(data))
    else:
        file.write_text(_toml(data) if suffix == ".toml" else json.dumps(data))
    by_file = config_from_args(parse("train", "--config", str(file), "--out", str(tmp_path)))
    assert by_file == by_flags
    assert (by_file.pg.target_kl, by_file.bc_max_steps, by_file.probe) == (None, None, None)
    # A flag given beside the file wins; what the file leaves out is the default.
    mixed = config_from_args(parse("train", "--config", str(file), "--lr", "0.5", "--out", str(tmp_path)))
    assert mixed == dataclasses.replace(by_flags, pg=dataclasses.replace(by_flags.pg, lr=0.5))
    small = tmp_path / f"small{suffix}"
    small.write_text({".toml": 'iterations = 3\n[pg]\nepochs = 4\n', ".json": '{"iterations": 3, "pg": {"epochs": 4}}',
                      ".yaml": "iterations: 3\npg:\n  epochs: 4\n"}[suffix])
    assert config_from_args(parse("train", "--config", str(small))) == dataclasses.replace(
        config_from_args(parse("train", "--iterations", "3", "--epochs", "4")))


def test_a_runs_config_json_is_a_config_file(tmp_path):
    config = config_from_args(parse("train", *FLAGS, "--out", str(tmp_path)))
    write_config(tmp_path / "config.json", config)
    assert config_from_args(parse("train", "--config", str(tmp_path / "config.json"), "--out", str(tmp_path))) == config


@pytest.mark.parametrize("text, named", [
    ("lrr = 0.1\n", "'lrr' is not a setting (did you mean 'pg.lr'?)"),
    ("[pg]\nlrr = 0.1\n", "'pg.lrr' is not a setting (did you mean 'pg.lr'?)"),
    ("site_size = 100\n", "'site_size' is not a setting (did you mean 'env_kwargs.site_size'?)"),
    ("iteration = 3\n", "'iteration' is not a setting (did you mean 'iterations'?)"),
    ('iterations = "ten"\n', "iterations = 'ten' is not int"),
    ("[pg]\nlr = true\n", "pg.lr = True is not float"),
    ("iterations = \n", "is not valid TOML"),
    (b"iterations = 3\n" + b"#" * (1 << 20), "more than 1 MiB"),
    (b"iterations = 3 # \xff\xfe\n", "not UTF-8 text (byte 17)"),
])
def test_a_bad_config_file_is_one_line_naming_the_key(tmp_path, text, named):
    file = tmp_path / "run.toml"
    file.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(SystemExit) as err:
        main(["train", "--config", str(file), "--out", str(tmp_path / "run")])
    message = str(err.value.code)
    assert message.startswith(f"mosaic train: --config {file}") and named in message, message
    assert "\n" not in message and not (tmp_path / "run").exists()


def test_a_yaml_file_without_pyyaml_and_an_unknown_suffix_are_one_line(tmp_path, monkeypatch):
    import sys

    file = tmp_path / "run.yaml"
    file.write_text("iterations: 3\n")
    monkeypatch.setitem(sys.modules, "yaml", None)
    with pytest.raises(ConfigError, match="reading YAML needs PyYAML"):
        config_from_args(parse("train", "--config", str(file)))
    (tmp_path / "run.ini").write_text("x")
    with pytest.raises(ConfigError, match="give a .toml, .yaml, .yml or .json file"):
        config_from_args(parse("train", "--config", str(tmp_path / "run.ini")))


def test_resume_checks_the_config_files_settings_against_the_run(tmp_path):
    write_config(tmp_path / "config.json", config_from_args(parse("train", "--lr", "0.01", "--out", str(tmp_path))))
    file = tmp_path / "arm.toml"
    file.write_text("iterations = 20\n[pg]\nlr = 0.01\n")
    resumed = resume_config(parse("train", "--resume", "--config", str(file), "--out", str(tmp_path)))
    assert resumed.iterations == 20 and resumed.pg.lr == 0.01  # agrees; iterations may change
    file.write_text("[pg]\nlr = 0.5\n")
    with pytest.raises(ConfigError, match=r"^--config .*arm.toml's pg.lr contradicts the run's pg.lr = 0.01"):
        resume_config(parse("train", "--resume", "--config", str(file), "--out", str(tmp_path)))


def _subcommands(parser: argparse.ArgumentParser, prefix: str = ""):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix}{name}", sub
                yield from _subcommands(sub, f"{prefix}{name} ")


def test_a_flag_that_commands_share_has_one_default():
    seen: dict[str, dict[str, object]] = {}
    for command, sub in _subcommands(build_parser()):
        for action in sub._actions:
            if action.help == argparse.SUPPRESS or not action.option_strings or action.dest == "help":
                continue
            # A flag without a value is on or off by default (bench's --quick stores "quick" over "full").
            default = action.default == action.const if action.nargs == 0 else action.default
            for option in action.option_strings:
                seen.setdefault(option, {})[command] = default
    shared = {option: by for option, by in seen.items() if len(by) > 1}
    assert {"--env", "--site", "--site-size", "--model", "--mode", "--temperature", "--max-new-tokens",
            "--prompt-examples", "--eval-episodes", "--eval-tasks", "--seed", "--device", "--out"} <= set(shared)
    ports = shared.pop("--port")
    assert len(set(ports.values())) == len(ports) and 8000 not in ports.values()  # servers that can run together
    shared.pop("--out")  # each command's own folder, named in its help
    for option, by in shared.items():
        if option.removeprefix("--").replace("-", "_") in study.PRESET_OVERRIDES:
            assert by.pop("study") is None  # unset: each run keeps its preset's
        assert len({json.dumps(d, default=str) for d in by.values()}) == 1, (option, by)


def test_the_policy_flags_of_eval_and_rollout_are_train_settings():
    """``--model``, ``--mode``, ``--temperature``, ... default to TrainConfig's: an eval without them scores the
    policy as mosaic train ran it."""
    d = TrainConfig()
    for command in ("eval", "rollout"):
        args = parse(command)
        assert (args.model, args.mode, args.temperature, args.max_new_tokens, args.prompt_examples,
                args.length_normalize, args.device, args.seed) == (d.model, d.mode, d.temperature, d.max_new_tokens,
                                                                   d.prompt_examples, d.length_normalize, d.pg.device,
                                                                   d.seed)


@pytest.mark.parametrize("old, new", [
    (["eval", "--n", "3"], ["eval", "--eval-episodes", "3"]),
    (["eval", "--tasks", "2"], ["eval", "--eval-tasks", "2"]),
    (["rollout", "--examples", "on"], ["rollout", "--prompt-examples"]),
    (["train", "--rl-temperature", "0.5"], ["train", "--temperature", "0.5"]),
    (["train", "--dr-grpo"], ["train", "--no-normalize-std"]),
    (["train", "--env-id", "mosaic/WebQA-Fork-v0"], ["train", "--env", "mosaic/WebQA-Fork-v0"]),
])
def test_older_spellings_still_read_and_are_not_shown(old, new, capsys):
    strip = ("given", "given_as", "run")
    got, want = ({k: v for k, v in vars(parse(*argv)).items() if k not in strip} for argv in (old, new))
    assert got == want
    with pytest.raises(SystemExit):
        main([old[0], "--help"])
    assert old[1] + " " not in capsys.readouterr().out


def test_who_acts_in_eval_and_rollout(tmp_path):
    assert common.agent_name(parse("rollout")) == "oracle"
    assert common.agent_name(parse("rollout", "--model", "tiny-100k")) == "llm"
    assert common.agent_name(parse("rollout", "--agent", "random")) == "random"
    with pytest.raises(ValueError, match="--agent oracle uses none"):
        common.agent_name(parse("rollout", "--agent", "oracle", "--model", "tiny-100k"))
    assert not common.wants_candidates(parse("eval"))  # the oracle: no candidates asked
    assert common.wants_candidates(parse("eval", "--model", "tiny-100k"))  # an LLM in choose mode
    assert not common.wants_candidates(parse("eval", "--model", "tiny-100k", "--mode", "generate"))


def test_eval_takes_a_runs_env_and_policy_settings_from_its_config(tmp_path):
    config = config_from_args(parse("train", "--hops", "1-2", "--temperature", "0.5", "--eval-temperature", "0.2",
                                    "--mode", "generate", "--out", str(tmp_path)))
    write_config(tmp_path / "config.json", config)
    args = parse("eval", "--config", str(tmp_path / "config.json"), "--max-steps", "9")
    common.apply_config(args)
    assert common.env_kwargs(args) == {**config.env_kwargs, "hops": (1, 2), "max_steps": 9, "split": "test"}
    assert (args.mode, args.temperature, args.agent) == ("generate", 0.2, None)  # held-out evaluation's temperature
    assert common.agent_name(args) == "oracle"  # the file's model acts with --agent llm, or a --model given


def test_help_of_train_shows_every_flag_with_its_default(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = capsys.readouterr().out
    for flag, name in train_flags():
        assert flag.name in text, flag.name
    assert "--bc-fork, --no-bc-fork" in text and "(default: 600, the demo's env_kwargs" in text
