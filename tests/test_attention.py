"""agents.attention: attention that skips the keys a mask hides gives SDPA's outputs and gradients.

Every class of mask the project runs (causal after a cache, padded rows, candidate trees, any mask at all) is
checked against Transformers' SDPA on the same tensors, forward and backward; the tolerance is float32 rounding
of a softmax-weighted sum over at most a few thousand keys (values of order 1: |error| <= keys x eps_f32).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from agents import attention
from agents.attention import BLOCK, skip_hidden_keys, use_skip_hidden_keys
from mosaic_gym.bench.bench_attention import tree_mask

EPS = float(torch.finfo(torch.float32).eps)


class _Module(torch.nn.Module):  # what the attention functions read of a layer
    num_key_value_groups = 1
    is_causal = True


def _both(query, key, value, mask):
    """Output and the gradients of query, key and value, by SDPA and by skip_hidden_keys."""
    out = []
    for fn in (sdpa_attention_forward, skip_hidden_keys):
        q, k, v = (t.detach().clone().requires_grad_() for t in (query, key, value))
        result, _ = fn(_Module(), q, k, v, mask, scaling=q.shape[-1] ** -0.5)
        weights = torch.linspace(-1, 1, result.numel()).reshape(result.shape)
        (result * weights).sum().backward()
        out.append((result.detach(), q.grad, k.grad, v.grad))
    return out


def _check(query, key, value, mask):
    (a, *grads_a), (b, *grads_b) = _both(query, key, value, mask)
    live = mask.any(-1).reshape(mask.shape[0], mask.shape[-2])  # queries that see a key (others: undefined)
    tol = key.shape[2] * EPS * 8
    torch.testing.assert_close(b[live], a[live], atol=tol, rtol=tol)
    for ga, gb in zip(grads_a, grads_b):
        torch.testing.assert_close(gb, ga, atol=tol * 4, rtol=tol * 4)


def _qkv(batch, queries, keys, seed, heads=2, dim=8):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, heads, queries, dim, generator=g), torch.randn(batch, heads, keys, dim, generator=g),
            torch.randn(batch, heads, keys, dim, generator=g))


def _causal_after(past: int, lengths: list[int]) -> torch.Tensor:
    """Rows of different lengths after ``past`` cached keys: causal, aligned bottom-right, padded on the right."""
    queries = max(lengths)
    i = torch.arange(queries)[:, None]
    j = torch.arange(past + queries)[None]
    rows = [(j <= i + past) & (j < past + n) & (i < n) for n in lengths]
    mask = torch.stack(rows)[:, None]
    # a padding query sees its row's first key (SDPA's masks keep such rows finite)
    mask[..., 0] |= ~mask.any(-1)
    return mask


@settings(max_examples=25, deadline=None)
@given(past=st.integers(0, 700), lengths=st.lists(st.integers(1, 3 * BLOCK), min_size=1, max_size=3),
       seed=st.integers(0, 2**16))
def test_causal_masks_after_a_cache_and_padding_give_sdpa_outputs_and_gradients(past, lengths, seed):
    mask = _causal_after(past, lengths)
    _check(*_qkv(len(lengths), mask.shape[-2], mask.shape[-1], seed), mask)


@settings(max_examples=20, deadline=None)
@given(past=st.integers(1, 900), data=st.data(), seed=st.integers(0, 2**16))
def test_candidate_trees_give_sdpa_outputs_and_gradients(past, data, seed):
    branches = data.draw(st.lists(st.tuples(st.integers(1, past), st.integers(1, 60)), min_size=1, max_size=30))
    mask = tree_mask(past, sorted(branches))
    _check(*_qkv(1, mask.shape[-2], mask.shape[-1], seed), mask)


@settings(max_examples=15, deadline=None)
@given(queries=st.integers(2 * BLOCK, 3 * BLOCK + 7), keys=st.integers(1, 900), density=st.floats(0.0, 1.0),
       seed=st.integers(0, 2**16))
def test_any_mask_gives_sdpa_outputs_and_gradients(queries, keys, density, seed):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(2, 1, queries, keys, generator=g) < density
    _check(*_qkv(2, queries, keys, seed), mask)


def test_short_queries_float_masks_and_no_mask_are_sdpa_itself():
    q, k, v = _qkv(1, BLOCK, 300, seed=1)
    mask = _causal_after(300 - BLOCK, [BLOCK])
    float_mask = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    for m in (mask, float_mask, None):
        a, _ = sdpa_attention_forward(_Module(), q, k, v, m)
        b, _ = skip_hidden_keys(_Module(), q, k, v, m)
        assert torch.equal(a, b)


@pytest.fixture
def keys_given(monkeypatch) -> list[int]:
    """How many keys each call of SDPA gets, in order (SDPA itself still answers)."""
    seen: list[int] = []

    def spy(module, query, key, value, mask, **kwargs):
        seen.append(key.shape[2])
        return sdpa_attention_forward(module, query, key, value, mask, **kwargs)

    import transformers.integrations.sdpa_attention as sdpa
    monkeypatch.setattr(sdpa, "sdpa_attention_forward", spy)
    return seen


def test_a_causal_block_attends_to_fewer_keys(keys_given):
    """What the skipping is for: each block of a causal mask gets only the keys up to its last query."""
    past, queries = 100, 3 * BLOCK
    skip_hidden_keys(_Module(), *_qkv(1, queries, past + queries, seed=0), _causal_after(past, [queries]))
    assert keys_given == [past + BLOCK, past + 2 * BLOCK, past + 3 * BLOCK]


def test_a_tree_block_gathers_the_keys_its_candidates_see(keys_given):
    """A block of early candidates (they see 50 of 1,000 past keys) attends to those and their own tokens only."""
    mask = tree_mask(1000, [(50, 32)] * 8 + [(1000, 32)] * 8)  # 2 blocks of 256 tree tokens
    skip_hidden_keys(_Module(), *_qkv(1, mask.shape[-2], mask.shape[-1], seed=0), mask)
    assert keys_given == [50 + BLOCK, mask.shape[-1]]


def test_a_mask_changed_in_place_is_read_again():
    """The blocks of the last mask are kept for the next layer; a mask changed in place since is not that mask."""
    q, k, v = _qkv(1, 2 * BLOCK, 2 * BLOCK, seed=4)
    mask = _causal_after(0, [2 * BLOCK])
    skip_hidden_keys(_Module(), q, k, v, mask)
    mask[..., -1] = True  # every query now sees the last key too
    a, _ = sdpa_attention_forward(_Module(), q, k, v, mask)
    b, _ = skip_hidden_keys(_Module(), q, k, v, mask)
    torch.testing.assert_close(b, a, atol=2 * BLOCK * EPS * 8, rtol=2 * BLOCK * EPS * 8)


def _model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, attn_implementation="sdpa")
    return LlamaForCausalLM(config)


def test_a_model_switched_to_it_gives_the_same_logits_and_gradients_on_a_padded_batch():
    plain = _model()
    skipping = copy.deepcopy(plain)
    assert use_skip_hidden_keys(skipping) == attention.NAME and use_skip_hidden_keys(skipping) == attention.NAME
    assert plain.config._attn_implementation == "sdpa"
    ids = torch.randint(1, 64, (3, 2 * BLOCK + 50), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    mask[1, 300:] = 0
    mask[2, 520:] = 0
    outs = []
    for model in (plain, skipping):
        logits = model(ids, attention_mask=mask).logits
        (logits * mask[..., None]).sum().backward()
        outs.append((logits.detach(), [p.grad.clone() for p in model.parameters()]))
    real = mask.bool()
    torch.testing.assert_close(outs[1][0][real], outs[0][0][real], atol=1e-4, rtol=1e-4)
    for a, b in zip(outs[0][1], outs[1][1]):
        torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-3)


def test_other_implementations_are_left_alone():
    model = _model()
    model.set_attn_implementation("eager")
    assert use_skip_hidden_keys(model) == "eager"
    assert use_skip_hidden_keys(torch.nn.Linear(2, 2)) is None


def test_a_model_under_lora_adapters_is_switched():
    pytest.importorskip("peft")
    from algos.learn.lora import add_lora

    adapted = add_lora(_model(), rank=2)
    assert use_skip_hidden_keys(adapted) == attention.NAME
    assert adapted.get_base_model().config._attn_implementation == attention.NAME


def test_the_implementation_is_not_saved_with_the_model(tmp_path):
    model = _model()
    use_skip_hidden_keys(model)
    model.save_pretrained(tmp_path)
    loaded = LlamaForCausalLM.from_pretrained(tmp_path)
    assert loaded.config._attn_implementation != attention.NAME
    ids = torch.arange(1, 40)[None]
    assert np.allclose(loaded(ids).logits.detach().numpy(), model(ids).logits.detach().numpy(), atol=1e-5)


def test_the_agent_and_the_learner_switch_the_model_they_are_given():
    from agents.llm import LLMAgent
    from algos.learn.config import PGConfig
    from algos.learn.pg import PolicyGradient
    from agents.models import load_model

    model, tokenizer = load_model("tiny-100k", texts=["a small text to train a tokenizer on"], seed=0)
    model.set_attn_implementation("sdpa")
    LLMAgent(model, tokenizer)
    assert model.config._attn_implementation == attention.NAME
    model.set_attn_implementation("sdpa")
    learner = PolicyGradient(model, PGConfig(kl_coef=0.1))
    assert model.config._attn_implementation == attention.NAME
    assert learner.ref_model is not None and learner.ref_model.config._attn_implementation == attention.NAME


def test_the_attention_benchmark_reports_each_mask_beside_sdpa():
    from mosaic_gym.bench.bench_attention import BENCHMARK, MASKS

    report = BENCHMARK.run("smoke")
    assert [row["mask"] for row in report["rows"]] == list(MASKS)
    for row in report["rows"]:
        assert row["max_abs_difference"] <= row["keys"] * EPS * 8, row  # the same outputs, to float rounding
        assert 0 < row["pairs_computed"] <= 1 and row["sdpa_ms"] > 0 and row["skip_ms"] > 0
    causal = next(row for row in report["rows"] if row["mask"] == "causal after a shared prefix")
    assert causal["pairs_computed"] < 0.9  # blocks skip most of the hidden triangle
    assert len(BENCHMARK.figures(report)) == len(report["rows"])


@pytest.mark.parametrize("argv, named", [
    (["--lengths", "abc"], "give whole numbers"), (["--lengths", "300,1000"], "longer than the 455-token prefix"),
    (["--repeat", "0"], "must be at least 1"), (["--repeat", "x"], "not an integer")])
def test_the_attention_benchmark_refuses_bad_options_in_one_line(argv, named, capsys):
    from mosaic_gym.bench.bench_attention import BENCHMARK

    with pytest.raises(SystemExit):
        BENCHMARK.parse(argv)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert named in err and "--" in err
