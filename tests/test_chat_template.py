"""A saved tiny model carries a chat template (``transformers serve`` answers 400 without one) that renders
messages exactly as the env's transcript, so serving it changes nothing the model sees."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from agents.models import has_own_chat_template, load_model
from envs.prompts import render_transcript
from mosaic_gym.commands.common import build_agent

TEXTS = ["Edra Vane was born in Oskarde.", 'search("Edra Vane")', "answer(\"Oskarde\")"] * 20


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    model, tokenizer = load_model("tiny-100k", texts=TEXTS)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, tokenizer


def test_a_saved_tiny_model_has_a_chat_template(saved):
    folder, _ = saved
    loaded = AutoTokenizer.from_pretrained(folder)
    assert loaded.chat_template and not has_own_chat_template(loaded)


_MESSAGE = st.fixed_dictionaries({
    "role": st.sampled_from(["system", "user", "assistant"]),
    "content": st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40),
})


@settings(max_examples=60, deadline=None)
@given(messages=st.lists(_MESSAGE, min_size=1, max_size=5), generation=st.booleans())
def test_the_template_renders_messages_as_the_transcript_token_for_token(saved, messages, generation):
    _, tokenizer = saved
    loaded = AutoTokenizer.from_pretrained(saved[0])
    text = loaded.apply_chat_template(messages, add_generation_prompt=generation, tokenize=False)
    assert text == render_transcript(messages, add_generation_prompt=generation)
    assert loaded(text, add_special_tokens=False)["input_ids"] == tokenizer(text)["input_ids"]


def test_a_tiny_model_folder_gets_no_worked_example_by_default(saved):
    """``--examples auto`` (the older spelling; ``--prompt-examples`` is off by default) shows the worked exchange
    to instruct models only: a tiny model's transcript template does not make it one."""
    args = argparse.Namespace(agent=str(saved[0]), prompt_examples="auto", mode="generate", temperature=0.0, seed=0,
                              max_new_tokens=8, model="tiny-1m", length_normalize=True, device="cpu", given=())
    assert build_agent(args, env=None).examples == []
