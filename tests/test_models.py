"""Model building and loading: the tiny tokenizer's guarantees, tiny model presets, save/load, SmolLM2."""

from __future__ import annotations


import json

import pytest
import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

from agents.llm import LLMAgent
from agents.models import (
    ALIGNMENT,
    EOS_TOKEN,
    TINY_SIZES,
    TRANSCRIPT_CHAT_TEMPLATE,
    build_tiny_model,
    load_model,
    _save_cache,
    load_smollm2,
    make_tiny,
    smollm2_cache_copy,
    smollm2_cache_dir,
    smollm2_gguf,
    train_tokenizer,
)
from envs.prompts import ROLE_TAG, render_transcript

TEXTS = [
    f'Edra Vane (born {1850 + i}) was a painter from Oskarde. search("Edra Vane") open({i % 9 + 1})'
    for i in range(200)
] + ["Tolis Marr taught Ikel Osk at the Varnholt Institute."] * 100


@pytest.fixture(scope="module")
def tokenizer():
    torch.set_num_threads(1)
    return train_tokenizer(TEXTS, vocab_size=500)


@pytest.mark.parametrize(
    "text",
    [
        'search("Edra Vane")',
        "<|system|>\nYou browse.\n<|user|>\nQuestion: where?\n<|assistant|>\n",
        "  two  spaces,\ttabs\n\n\nand blank lines  ",
        "accents: Édra Vañe, Zürich; CJK: 北京; emoji: 🙂; unseen bytes \x00\x7f",
        f"ends with eos{EOS_TOKEN}",
    ],
)
def test_tokenizer_round_trips_any_text(tokenizer, text):
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False) == text


@pytest.mark.parametrize("context", [" ", '("', "\n", "(", "[1] "])
def test_a_word_is_the_same_tokens_wherever_it_appears(tokenizer, context):
    word = tokenizer.encode("Edra Vane")
    in_context = tokenizer.encode(context + "Edra Vane")
    assert in_context[len(in_context) - len(word) :] == word
    assert tokenizer.encode(context) == in_context[: len(in_context) - len(word)]


def test_role_tags_and_eos_are_single_special_tokens(tokenizer):
    for tag in (*ROLE_TAG.values(), EOS_TOKEN):
        assert len(tokenizer.encode(tag)) == 1
        assert tokenizer.encode(f"x{tag}y")[1] == tokenizer.convert_tokens_to_ids(tag)
    assert tokenizer.eos_token == tokenizer.pad_token == EOS_TOKEN
    # The plain transcript (envs.prompts.render_transcript), so a saved tiny model can be served
    # (tests/test_chat_template.py).
    assert tokenizer.chat_template == TRANSCRIPT_CHAT_TEMPLATE


def test_tiny_sizes_are_about_their_names(tokenizer):
    expected = {"100k": 1e5, "1m": 1e6, "3m": 3e6, "10m": 10e6}
    big = train_tokenizer(TEXTS * 3 + [str(i) for i in range(3000)], vocab_size=2000)
    assert len(big) == 2000
    for size in TINY_SIZES:
        model = build_tiny_model(big, size)
        assert 0.75 * expected[size] < model.num_parameters() < 1.35 * expected[size]
        assert model.dtype == torch.float32


def test_tiny_model_seed_decides_the_weights(tokenizer):
    a, b, c = (build_tiny_model(tokenizer, "1m", seed=s) for s in (0, 0, 1))
    assert torch.equal(a.lm_head.weight, b.lm_head.weight)
    assert not torch.equal(a.lm_head.weight, c.lm_head.weight)
    with pytest.raises(ValueError, match="1m"):
        build_tiny_model(tokenizer, "7m")


def test_make_tiny_saves_what_from_pretrained_loads(tmp_path):
    model, tokenizer = make_tiny(tmp_path, TEXTS, size="1m", seed=3, vocab_size=400)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    loaded_tokenizer = PreTrainedTokenizerFast.from_pretrained(tmp_path)
    text = render_transcript([{"role": "user", "content": 'where was Edra Vane born? search("Edra Vane")'}])
    ids = torch.tensor([tokenizer.encode(text)])
    assert loaded_tokenizer.encode(text) == ids[0].tolist()
    assert loaded_tokenizer.eos_token_id == tokenizer.eos_token_id
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits, atol=0, rtol=0)
    via_spec, spec_tokenizer = load_model(str(tmp_path))
    assert type(spec_tokenizer) is PreTrainedTokenizerFast
    assert spec_tokenizer.encode(text) == ids[0].tolist()
    assert via_spec.dtype == torch.float32
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "llama"


def test_a_model_loaded_from_a_folder_lies_in_memory_as_a_built_one(tmp_path):
    """Every tensor of a folder's model starts on the allocator's boundary, as the built model's do, and tied
    weights stay one tensor: BLAS may sum in another order at another alignment, and a run resumed from its
    folder must compute the same bits as the run that built its model."""
    model, tokenizer = make_tiny(tmp_path, TEXTS, size="1m", seed=3, vocab_size=400)
    loaded, _ = load_model(str(tmp_path))
    for name, tensor in [*loaded.named_parameters(), *loaded.named_buffers()]:
        assert tensor.data_ptr() % ALIGNMENT == 0, name
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    assert {k for k, _ in loaded.named_buffers()} == {k for k, _ in model.named_buffers()}
    assert loaded.state_dict().keys() == model.state_dict().keys()
    assert all(torch.equal(v, loaded.state_dict()[k]) for k, v in model.state_dict().items())


def test_load_model_builds_tiny_presets():
    model, tokenizer = load_model("tiny-3m", texts=TEXTS)
    assert model.config.hidden_size == TINY_SIZES["3m"]["hidden_size"]
    assert model.config.vocab_size == len(tokenizer)
    again, _ = load_model("tiny-3m", texts=TEXTS)
    assert torch.equal(model.lm_head.weight, again.lm_head.weight)


def test_default_tiny_tokenizer_knows_the_envs_words():
    """Without texts, tiny presets train their tokenizer on oracle transcripts of the builtin site."""
    _, tokenizer = load_model("tiny-1m")
    for word in ("search", "scroll", "answer", "wiki", "Steps"):
        assert len(tokenizer.encode(word)) == 1, word
    pieces = ("/wiki/", "Edra", "_", "Vane")
    assert tokenizer.encode("".join(pieces)) == [t for p in pieces for t in tokenizer.encode(p)]


def test_smollm2_loads_offline_and_keeps_its_chat_template_append_only(tmp_path):
    """Needs the ``smollm2`` extra (part of the README setup): a missing package fails here, naming the fix."""
    torch.set_num_threads(1)
    # A copy left damaged (a disk that filled up, a hand edit) is converted again and replaced, with a warning.
    damaged = smollm2_cache_copy(tmp_path, smollm2_gguf())
    damaged.mkdir()
    (damaged / "complete").write_text("")
    (damaged / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.warns(UserWarning, match="(?s)does not load.*converting the GGUF again"):
        model, tokenizer = load_smollm2(cache_dir=tmp_path)  # converted from the GGUF, and the copy kept
    assert model.config.model_type == "llama" and 130e6 < model.num_parameters() < 140e6
    assert tokenizer.chat_template
    agent = LLMAgent(model, tokenizer, temperature=0, max_new_tokens=3)
    messages = [{"role": "system", "content": "Call one tool."}, {"role": "user", "content": "Question: Oskarde?"}]
    (first_action,), (first,) = agent.act_batch_recorded([render_transcript(messages)],
                                                         [{"session_id": 0, "messages": messages}])
    messages += [{"role": "assistant", "content": first_action}, {"role": "user", "content": "[No results]"}]
    _, (second,) = agent.act_batch_recorded([render_transcript(messages)], [{"session_id": 0, "messages": messages}])
    # The template only appends, so the second step reuses the first step's tokens and cache.
    assert second.prompt_ids[: len(first.prompt_ids) + len(first.gen_ids)] == first.prompt_ids + first.gen_ids
    with torch.no_grad():
        logits = model(torch.tensor([second.prompt_ids + second.gen_ids])).logits[0].float()
    n = len(second.prompt_ids)
    fresh = torch.log_softmax(logits[n - 1 : -1], -1).gather(1, torch.tensor(second.gen_ids)[:, None]).squeeze(1)
    torch.testing.assert_close(second.logprobs, fresh, atol=1e-3, rtol=0)
    # The converted copy was saved with save_pretrained, as a training run saves its model (a GGUF load used to
    # refuse: "quantized with gguf and is not serializable"), whole; the next load reads it (load_model on the
    # folder, as for a run's model): the same model, bit for bit, and the same tokenizer.
    [copy] = tmp_path.iterdir()
    assert (copy / "complete").is_file() and not [p for p in tmp_path.iterdir() if p != copy]
    again, again_tokenizer = load_smollm2(cache_dir=tmp_path)
    with torch.no_grad():
        reloaded = again(torch.tensor([second.prompt_ids + second.gen_ids])).logits[0].float()
    assert torch.equal(reloaded, logits)
    assert again_tokenizer.chat_template == tokenizer.chat_template
    assert again_tokenizer.encode(messages[1]["content"]) == tokenizer.encode(messages[1]["content"])


def test_the_smollm2_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("MOSAIC_GYM_CACHE", str(tmp_path / "mine"))
    assert smollm2_cache_dir() == tmp_path / "mine"
    monkeypatch.setenv("MOSAIC_GYM_CACHE", "")
    assert smollm2_cache_dir() is None  # empty: no cache
    monkeypatch.delenv("MOSAIC_GYM_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert smollm2_cache_dir() == tmp_path / "xdg" / "mosaic-gym"


def test_a_cache_copy_is_whole_or_absent_and_an_unwritable_cache_is_skipped(tokenizer, tmp_path):
    model = build_tiny_model(tokenizer, "100k")
    _save_cache(model, tokenizer, tmp_path / "copy")
    assert (tmp_path / "copy" / "complete").is_file() and [p.name for p in tmp_path.iterdir()] == ["copy"]
    again, _ = load_model(str(tmp_path / "copy"))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    # Beside a copy already there (another process won the race), or in a folder that cannot be written: no
    # error, nothing half-written left behind.
    _save_cache(model, tokenizer, tmp_path / "copy")
    assert [p.name for p in tmp_path.iterdir()] == ["copy"]
    (tmp_path / "a-file").write_text("not a folder")
    _save_cache(model, tokenizer, tmp_path / "a-file" / "copy")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "copy"]
