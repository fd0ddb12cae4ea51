"""The worked exchange an agent puts before each session (envs.prompts.EXAMPLE_EXCHANGE), and the script that
measures how often SmolLM2 writes a valid call after it (scripts/smollm2_zero_shot.py)."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest

from envs.actions import parse_action
from envs.prompts import EXAMPLE_EXCHANGE

from helpers import SITE_SIZE, TEST_MODEL, load_module

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "smollm2_zero_shot.py"


@pytest.fixture(scope="module")
def script():
    return load_module(SCRIPT, "smollm2_zero_shot")


def calls():
    return [parse_action(m["content"]) for m in EXAMPLE_EXCHANGE if m["role"] == "assistant"]


def test_every_reply_of_the_exchange_is_one_call_of_a_root_tool():
    env = gym.make("mosaic/WebQA-v0", site_size=SITE_SIZE)
    assert calls() and {c.name for c in calls()} <= set(env.unwrapped.tools) - {"finish"}
    env.close()


def test_the_sessions_question_follows_the_exchange_as_the_next_user_turn():
    # Two user turns in a row (the exchange closing on a user note, then the question) had SmolLM2 retell the
    # example: the turns alternate from the exchange's first question to the session's own.
    env = gym.make("mosaic/WebQA-v0", site_size=SITE_SIZE)
    _, info = env.reset(seed=0)
    env.close()
    system, *session = info["messages"]
    roles = [m["role"] for m in (*EXAMPLE_EXCHANGE, *session)]
    assert system["role"] == "system" and roles[0] == "user"
    assert all(a != b for a, b in zip(roles, roles[1:])), roles


@pytest.mark.parametrize("site_size", [SITE_SIZE, 300, 2000])
def test_the_exchange_names_nothing_of_a_builtin_site(site_size):
    env = gym.make("mosaic/WebQA-v0", site_size=site_size)
    titles = {d.title.lower() for d in env.unwrapped.site.documents()}
    answers = {t.answer.lower() for t in env.unwrapped.site.tasks}
    env.close()
    named = [c.arg.lower() for c in calls() if isinstance(c.arg, str)]
    assert named and not set(named) & (titles | answers)


def test_copies_are_the_examples_names_and_placeholders_not_a_result_number(script):
    assert script.copied("Zumbo Bridge") and script.copied("the painter Mira Holt") and script.copied(" NAME ")
    assert not script.copied(1) and not script.copied("Ogrus Domosk") and not script.copied("Named after")


def test_a_share_is_the_pooled_ratio_with_an_interval_clustered_by_episode(script):
    spread = script.share([3, 3, 3, 3], [6, 6, 6, 6])
    lumped = script.share([6, 6, 0, 0], [6, 6, 6, 6])  # the same steps, all or none in each episode
    assert spread["share"] == lumped["share"] == 0.5 and spread["of"] == 24 and spread["episodes"] == 4
    assert spread["low"] == spread["high"] == 0.5  # every episode the same: no spread between episodes
    assert lumped["low"] < 0.5 < lumped["high"]
    assert script.share([], [])["share"] is None
    assert script.share([0, 2], [0, 4])["episodes"] == 1  # an episode of no steps counts in no share


def test_an_unknown_variant_is_one_line_before_any_model_loads(script, capsys):
    with pytest.raises(SystemExit):
        script.main(["--variants", "default,nope"])
    assert "unknown variant(s) ['nope']" in capsys.readouterr().err


def test_the_script_runs_end_to_end_and_repeats_itself(script, tmp_path):
    argv = ["--model", TEST_MODEL, "--variants", "default,none", "--tasks", "2", "--seeds", "0,1",
            "--site-size", str(SITE_SIZE), "--max-steps", "2", "--max-new-tokens", "4", "--threads", "1"]
    runs = []
    for name in ("a.json", "b.json"):
        assert script.main([*argv, "--out", str(tmp_path / name)]) == 0
        runs.append(json.loads((tmp_path / name).read_text()))
    for variant in ("default", "none"):
        a, b = (r["variants"][variant] for r in runs)
        assert a["valid"]["of"] == a["well_formed"]["of"] > 0 and a["valid"]["episodes"] == 4
        assert 0 <= a["valid"]["hits"] <= a["valid"]["of"]
        assert {k: v for k, v in a.items() if k != "seconds"} == {k: v for k, v in b.items() if k != "seconds"}
    assert runs[0]["variants"]["none"]["exchange_tokens"] == 0 < runs[0]["variants"]["default"]["exchange_tokens"]
