"""agents.attention: attention that skips the keys a mask hides gives SDPA's outputs and gradients.

Every class of mask the project runs (causal after a cache, padded rows, candidate trees, any mask at all) is
checked against Transformers' SDPA on the same tensors, forward and backward, by each path (the causal kernel,
blocks, whole queries; additive or boolean masks; shared key heads); the tolerance is float32 rounding of a
softmax-weighted sum over at most a few thousand keys (values of order 1: |error| <= keys x eps_f32). A query
that sees no key gets what SDPA gives it (zeros, in torch 2.13).
"""

from __future__ import annotations

import copy
import gc
from typing import NamedTuple

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

from agents import attention
from agents.attention import BLOCK, skip_hidden_keys, use_skip_hidden_keys
from mosaic_gym.bench.bench_attention import tree_mask

EPS = float(torch.finfo(torch.float32).eps)


class _Module(torch.nn.Module):  # what the attention functions read of a layer
    is_causal = True

    def __init__(self, groups: int = 1):
        super().__init__()
        self.num_key_value_groups = groups  # query heads per key head


def _both(query, key, value, mask):
    """Output and the gradients of query, key and value, by SDPA and by skip_hidden_keys."""
    out = []
    for fn in (sdpa_attention_forward, skip_hidden_keys):
        q, k, v = (t.detach().clone().requires_grad_() for t in (query, key, value))
        result, _ = fn(_Module(q.shape[1] // k.shape[1]), q, k, v, mask, scaling=q.shape[-1] ** -0.5)
        weights = torch.linspace(-1, 1, result.numel()).reshape(result.shape)
        (result * weights).sum().backward()
        out.append((result.detach(), q.grad, k.grad, v.grad))
    return out


def _check(query, key, value, mask):
    """skip_hidden_keys gives SDPA's outputs (every query's, those that see no key too) and gradients."""
    (a, *grads_a), (b, *grads_b) = _both(query, key, value, mask)
    tol = key.shape[2] * EPS * 8
    torch.testing.assert_close(b, a, atol=tol, rtol=tol, equal_nan=True)
    for ga, gb in zip(grads_a, grads_b):
        torch.testing.assert_close(gb, ga, atol=tol * 4, rtol=tol * 4, equal_nan=True)


def _qkv(batch, queries, keys, seed, heads=2, dim=8, groups=1):
    """Queries, keys and values; ``groups`` query heads share a key head (GQA)."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, heads, queries, dim, generator=g),
            torch.randn(batch, heads // groups, keys, dim, generator=g),
            torch.randn(batch, heads // groups, keys, dim, generator=g))


def _causal(queries: int, keys: int, batch: int = 1) -> torch.Tensor:
    """Causal aligned bottom-right, every row the same, as Transformers makes it after a cache without padding (one
    row expanded)."""
    return sdpa_mask(batch_size=batch, q_length=queries, kv_length=keys, q_offset=keys - queries,
                     allow_is_causal_skip=False)


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


@settings(max_examples=25, deadline=None)
@given(queries=st.integers(2, 4 * BLOCK + 9), share=st.floats(0.0, 2.0), batch=st.integers(1, 2),
       groups=st.sampled_from([1, 2]), seed=st.integers(0, 2**16))
def test_pure_causal_masks_after_a_prefix_of_any_length_give_sdpa_outputs_and_gradients(queries, share, batch,
                                                                                       groups, seed):
    """A prefix of ``share`` x the padding the causal kernel allows (beyond 1: too long for it), with shared key
    heads or not: the kernel is used exactly when it pays, and gives SDPA's outputs and gradients either way."""
    past = round(share * max(queries - 2 * BLOCK, 0)) if share <= 1 else round(share * queries)
    mask = _causal(queries, past + queries, batch)
    _check(*_qkv(batch, queries, past + queries, seed, heads=4, groups=groups), mask)
    assert attention._last[0].causal == (queries >= 2 * BLOCK and past <= queries - 2 * BLOCK)


@settings(max_examples=15, deadline=None)
@given(queries=st.integers(2 * BLOCK, 3 * BLOCK), data=st.data(), seed=st.integers(0, 2**16))
def test_a_causal_mask_with_one_pair_changed_is_not_taken_for_causal(queries, data, seed):
    """One query-key pair of one row flipped (seen or hidden), anywhere: not causal, so not the causal kernel."""
    past = data.draw(st.integers(0, queries - 2 * BLOCK))  # (short enough for the kernel, were it causal)
    mask = _causal(queries, past + queries, batch=2).clone()
    row, query, key = (data.draw(st.integers(0, n - 1)) for n in (2, queries, past + queries))
    mask[row, 0, query, key] = ~mask[row, 0, query, key]
    _check(*_qkv(2, queries, past + queries, seed), mask)
    assert not attention._last[0].causal


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bound", [attention.ADDITIVE_BYTES, 0])
def test_short_queries_float_masks_and_no_mask_are_sdpa_itself(dtype, bound, monkeypatch):
    """Under two blocks a boolean mask goes to SDPA whole, made additive once for the pass (or left boolean above
    the bound): SDPA makes the same additive mask itself, so the outputs are SDPA's to the bit, in any dtype."""
    monkeypatch.setattr(attention, "ADDITIVE_BYTES", bound)
    q, k, v = (t.to(dtype) for t in _qkv(2, BLOCK, 300, seed=1))
    mask = _causal_after(300 - BLOCK, [BLOCK, BLOCK - 40])
    mask[1, :, :5] = False  # queries that see no key
    float_mask = torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, float("-inf"))
    for m in (mask, float_mask, None):
        a, _ = sdpa_attention_forward(_Module(), q, k, v, m)
        b, _ = skip_hidden_keys(_Module(), q, k, v, m)
        assert torch.equal(a, b)
    assert (attention._last[0].additive is None) == (bound == 0)


def test_without_autograd_a_mask_above_the_inference_bound_stays_boolean(monkeypatch):
    """A pass without autograd keeps its additive mask only up to INFERENCE_ADDITIVE_BYTES (it would hold it across
    the layers, where SDPA made and freed one per layer); the same mask under autograd is planned again and made
    additive. The outputs are SDPA's to the bit either way."""
    monkeypatch.setattr(attention, "INFERENCE_ADDITIVE_BYTES", 1024)
    q, k, v = _qkv(2, BLOCK, 300, seed=4)
    mask = _causal_after(300 - BLOCK, [BLOCK, BLOCK - 40])
    expected, _ = sdpa_attention_forward(_Module(), q, k, v, mask)
    with torch.no_grad():
        quiet, _ = skip_hidden_keys(_Module(), q, k, v, mask)
    assert not attention._last[0].grad and attention._last[0].additive is None
    trained, _ = skip_hidden_keys(_Module(), q, k, v, mask)
    assert attention._last[0].grad and attention._last[0].additive is not None
    assert torch.equal(quiet, expected) and torch.equal(trained, expected)


def test_a_mask_broadcast_over_the_queries_is_left_to_sdpa():
    """A mask of one query row for all (Transformers' masks have a row per query) is SDPA's to broadcast."""
    q, k, v = _qkv(1, 3 * BLOCK, 600, seed=6)
    mask = torch.rand(1, 1, 1, 600, generator=torch.Generator().manual_seed(6)) < 0.5
    assert torch.equal(skip_hidden_keys(_Module(), q, k, v, mask)[0], sdpa_attention_forward(_Module(), q, k, v, mask)[0])


@pytest.mark.parametrize("bound", [attention.ADDITIVE_BYTES, 0])
@pytest.mark.parametrize("queries, past", [(100, 30), (3 * BLOCK, 0), (3 * BLOCK, 400)])
def test_left_padded_rows_whose_first_queries_see_no_key_give_sdpa_outputs(queries, past, bound, monkeypatch):
    """Transformers' own masks hide every key from a left-padded row's first queries (when the padding is not
    cached): those queries get SDPA's output (zeros) whatever the path, additive mask or boolean (above the bound),
    and the others SDPA's too."""
    monkeypatch.setattr(attention, "ADDITIVE_BYTES", bound)
    padding = torch.ones(3, past + queries, dtype=torch.bool)
    padding[0, :past + 20] = False
    padding[1, :past + queries // 2] = False
    mask = sdpa_mask(batch_size=3, q_length=queries, kv_length=past + queries, q_offset=past,
                     attention_mask=padding)
    assert not mask[0, 0, :20].any()  # (the class of inputs: queries that see nothing)
    (a, *_), (b, *_) = _both(*_qkv(3, queries, past + queries, seed=2), mask)
    assert torch.equal(b[0, :20], a[0, :20])  # (to the bit: both are the kernel's answer to a row of -inf)
    _check(*_qkv(3, queries, past + queries, seed=2), mask)


@pytest.mark.parametrize("queries, past", [(1000, 455), (2 * BLOCK, 0), (3 * BLOCK, 2 * BLOCK)])
def test_the_causal_kernel_in_bfloat16_gives_sdpa_outputs(queries, past):
    q, k, v = (t.to(torch.bfloat16) for t in _qkv(1, queries, past + queries, seed=3, heads=4, groups=2))
    mask = _causal(queries, past + queries)
    a, _ = sdpa_attention_forward(_Module(2), q, k, v, mask)
    b, _ = skip_hidden_keys(_Module(2), q, k, v, mask)
    assert attention._last[0].causal == (past <= queries - 2 * BLOCK)
    torch.testing.assert_close(b, a)  # (bfloat16 rounding)


class _Call(NamedTuple):
    queries: int
    keys: int
    mask: str  # "none", "additive" or "boolean"
    is_causal: bool | None


@pytest.fixture
def sdpa_calls(monkeypatch) -> list[_Call]:
    """Each call of SDPA, in order: its queries, keys, mask and is_causal (SDPA itself still answers)."""
    seen: list[_Call] = []

    def spy(module, query, key, value, mask, **kwargs):
        kind = "none" if mask is None else "boolean" if mask.dtype == torch.bool else "additive"
        seen.append(_Call(query.shape[2], key.shape[2], kind, kwargs.get("is_causal")))
        return sdpa_attention_forward(module, query, key, value, mask, **kwargs)

    import transformers.integrations.sdpa_attention as sdpa
    monkeypatch.setattr(sdpa, "sdpa_attention_forward", spy)
    return seen


def test_a_causal_block_attends_to_fewer_keys(sdpa_calls):
    """What the skipping is for: each block of a causal mask (here padded: no causal kernel) gets only the keys up
    to its last query, and an additive mask."""
    past, queries = 100, 3 * BLOCK
    skip_hidden_keys(_Module(), *_qkv(2, queries, past + queries, seed=0), _causal_after(past, [queries, 500]))
    assert [call.keys for call in sdpa_calls] == [past + BLOCK, past + 2 * BLOCK, past + 3 * BLOCK]
    assert {call.mask for call in sdpa_calls} == {"additive"}


def test_a_tree_block_gathers_the_keys_its_candidates_see(sdpa_calls):
    """A block of early candidates (they see 50 of 1,000 past keys) attends to those and their own tokens only."""
    mask = tree_mask(1000, [(50, 32)] * 8 + [(1000, 32)] * 8)  # 2 blocks of 256 tree tokens
    skip_hidden_keys(_Module(), *_qkv(1, mask.shape[-2], mask.shape[-1], seed=0), mask)
    assert [call.keys for call in sdpa_calls] == [50 + BLOCK, mask.shape[-1]]


def test_a_pure_causal_mask_runs_the_causal_kernel_on_padded_queries(sdpa_calls):
    """After 100 keys, 3 blocks of queries: one call, no mask, as many queries as keys (so none is cropped)."""
    skip_hidden_keys(_Module(), *_qkv(1, 3 * BLOCK, 100 + 3 * BLOCK, seed=0), _causal(3 * BLOCK, 100 + 3 * BLOCK))
    assert sdpa_calls == [_Call(100 + 3 * BLOCK, 100 + 3 * BLOCK, "none", True)]


def test_a_learner_pass_after_a_shared_prefix_takes_the_causal_kernel_and_a_padded_batch_does_not(sdpa_calls):
    """algos.logprobs on one sequence after the shared prefix: every layer's attention is the causal kernel, and the
    log-probs and gradients are plain SDPA's; two sequences of different lengths (padding) take the blocks."""
    from agents.records import TrainSequence
    from algos.logprobs import SharedPrefix, sequence_logprobs

    rng = np.random.default_rng(0)
    prefix = rng.integers(1, 64, 100).tolist()
    sequences = [TrainSequence(prefix + rng.integers(1, 64, n).tolist(), [False] * 100 + [True] * n, [0.0] * (100 + n))
                 for n in (3 * BLOCK, 2 * BLOCK + 40)]
    plain = _model()
    skipping = copy.deepcopy(plain)
    use_skip_hidden_keys(skipping)
    cpu = torch.device("cpu")
    results = []
    for model in (plain, skipping):
        shared = SharedPrefix.of(model, sequences, cpu)
        assert shared is not None and len(shared) == 99  # (up to the column that predicts the first action)
        sdpa_calls.clear()
        logp, _ = sequence_logprobs(model, sequences[:1], cpu, shared)
        logp.sum().backward()
        shared.backward()
        results.append((logp.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    layers, length = plain.config.num_hidden_layers, len(sequences[0].token_ids)
    assert sdpa_calls == [_Call(length, length, "none", True)] * layers
    torch.testing.assert_close(results[1][0], results[0][0], atol=1e-5, rtol=1e-5)
    for a, b in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-3)
    with torch.no_grad():
        shared = SharedPrefix.of(skipping, sequences, cpu)
        sdpa_calls.clear()
        sequence_logprobs(skipping, sequences, cpu, shared)
    assert len(sdpa_calls) == len(attention._blocks(length - 99)) * layers
    assert {(call.mask, call.is_causal) for call in sdpa_calls} == {("additive", None)}


def test_a_pass_plans_its_mask_once_and_lets_it_go_with_the_mask():
    """Every layer of a pass reuses the plan (the same additive mask); queries of another dtype get their own; the
    plan goes when the mask does (its additive mask would otherwise outlive the pass)."""
    q, k, v = _qkv(1, 2 * BLOCK, 2 * BLOCK + 50, seed=5)
    mask = _causal_after(50, [2 * BLOCK])
    mask[..., 3] = False  # (not causal: the blocks)
    skip_hidden_keys(_Module(), q, k, v, mask)
    plan = attention._last[0]
    skip_hidden_keys(_Module(), q, k, v, mask)
    assert attention._last[0] is plan and {m.dtype for _, m in plan.blocks} == {torch.float32}
    skip_hidden_keys(_Module(), *(t.double() for t in (q, k, v)), mask)
    assert {m.dtype for _, m in attention._last[0].blocks} == {torch.float64}
    del mask, plan
    gc.collect()
    assert attention._last[0] is None


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
        assert row["sdpa_forward_ms"] > 0 and row["skip_forward_ms"] > 0
    causal = next(row for row in report["rows"] if row["mask"] == "causal after a shared prefix")
    assert causal["pairs_computed"] < 0.9  # blocks skip most of the hidden triangle
    assert {row["path"] for row in report["rows"]} <= {"causal kernel", "blocks", "whole"}
    assert next(row for row in report["rows"] if row["mask"] == "acting step")["path"] == "whole"
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
