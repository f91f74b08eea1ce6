"""transformers models built from small configs with random weights (no download), under
no_grad (issue 31): each compiles as one graph with no graph break, does not recompile
across repeated calls, and returns eager's whole output (its ModelOutput class, every
field, the key/value caches it builds); generate() on an optimized LLaMA gives eager's
tokens."""
import warnings

import pytest
import torch

import cdynamo
from cdynamo import _support

pytest.importorskip("transformers")
from cdynamo._hf_models import MODELS   # noqa: E402


def same_output(got, want, path="out"):
    """got is eager's want: its class, its fields / items, caches' tensors, all equal."""
    assert type(got) is type(want), (path, type(got), type(want))
    if isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg=path)
    elif isinstance(want, dict):   # a ModelOutput: an OrderedDict whose items are its fields
        assert list(got.keys()) == list(want.keys()), path
        for k in want:
            same_output(got[k], want[k], f"{path}.{k}")
    elif isinstance(want, (tuple, list)):
        assert len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want)):
            same_output(g, w, f"{path}[{i}]")
    elif hasattr(want, "__dict__") and not isinstance(want, type):   # a cache and its layers
        keys = [k for k in vars(want) if not k.startswith("__")]
        assert sorted(vars(got)) == sorted(vars(want)), path
        for k in keys:
            same_output(getattr(got, k), getattr(want, k), f"{path}.{k}")
    else:
        assert got == want, (path, got, want)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_is_one_graph_without_recompiles(name):
    build, inputs, _ = MODELS[name]
    model, kw = build(), inputs()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = model(**kw)
        opt = cdynamo.optimize(model)
        for _ in range(3):
            same_output(opt(**kw), want)
    st = cdynamo.stats()
    assert st["graph_breaks"] == 0 and st["fallbacks"] == 0, (st, _support.breaks)
    assert st["frames_compiled"] == 1 and st["recompiles"] == 0, (st, _support.compiles)
    assert st["cache_hits"] == 2, st


def test_model_explain_reports_one_graph():
    build, inputs, _ = MODELS["bert"]
    model, kw = build(), inputs()
    with torch.no_grad():
        e = cdynamo.explain(model)(**kw)
    assert e.graph_count == 1 and e.graph_break_count == 0 and not e.eager_frames
    assert e.op_count > 50


def test_generate_on_llama_gives_eager_tokens():
    build, _, _ = MODELS["llama"]
    model = build()
    ids = torch.randint(0, 512, (1, 8), generator=torch.Generator().manual_seed(5))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the decoding steps' growing cache: the recompile limit
        want = model.generate(ids, max_new_tokens=16, do_sample=False)
        opt = cdynamo.optimize(model)
        got = opt.generate(ids, max_new_tokens=16, do_sample=False)
        again = opt.generate(ids, max_new_tokens=16, do_sample=False)
    assert torch.equal(got, want) and torch.equal(again, want)
    assert want.shape == (1, 24)
    st = cdynamo.stats()
    assert st["frames_compiled"] >= 1 and st["graph_breaks"] == 0, (st, _support.breaks)


def test_llama_forward_with_a_cache_of_the_caller():
    """A decoding step: the caller's DynamicCache is updated in place (its layers' tensors
    and attributes written back after the graph), as eager updates it."""
    import transformers   # noqa: PLC0415
    build, _, _ = MODELS["llama"]
    model = build()
    ids = torch.randint(0, 512, (1, 6), generator=torch.Generator().manual_seed(7))
    nxt = torch.tensor([[3]])
    with torch.no_grad():
        c_eager = transformers.DynamicCache(config=model.config)
        model(input_ids=ids, past_key_values=c_eager)
        want = model(input_ids=nxt, past_key_values=c_eager)
        c_opt = transformers.DynamicCache(config=model.config)
        opt = cdynamo.optimize(model)
        opt(input_ids=ids, past_key_values=c_opt)
        got = opt(input_ids=nxt, past_key_values=c_opt)
    torch.testing.assert_close(got.logits, want.logits, rtol=1e-4, atol=1e-4)
    assert got.past_key_values is c_opt and c_opt.get_seq_length() == 7
    for lo, le in zip(c_opt.layers, c_eager.layers):
        torch.testing.assert_close(lo.keys, le.keys)
        torch.testing.assert_close(lo.values, le.values)
    assert cdynamo.stats()["graph_breaks"] == 0, _support.breaks


def _ids():
    return torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(1))


#: more transformers models, small configs: each one graph too
MORE = {
    "distilbert": lambda t: (t.DistilBertModel(t.DistilBertConfig(
        vocab_size=512, dim=64, n_layers=2, n_heads=4, hidden_dim=128)), {"input_ids": _ids()}),
    "roberta": lambda t: (t.RobertaModel(t.RobertaConfig(
        vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=130)), {"input_ids": _ids()}),
    "mistral": lambda t: (t.MistralForCausalLM(t.MistralConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2)), {"input_ids": _ids()}),
    "qwen2": lambda t: (t.Qwen2ForCausalLM(t.Qwen2Config(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2)), {"input_ids": _ids()}),
    "bart": lambda t: (t.BartModel(t.BartConfig(
        vocab_size=512, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
        max_position_embeddings=64)), {"input_ids": _ids()}),
    "gemma": lambda t: (t.GemmaForCausalLM(t.GemmaConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16)), {"input_ids": _ids()}),
    # BLOOM: its GeLU is a custom autograd.Function (inlined under no_grad), alibi's
    # repeat, baddbmm; Falcon: the multi-query split indexes with [-2] / [-1]
    "bloom": lambda t: (t.BloomForCausalLM(t.BloomConfig(
        vocab_size=512, hidden_size=64, n_layer=2, n_head=4)), {"input_ids": _ids()}),
    "falcon": lambda t: (t.FalconForCausalLM(t.FalconConfig(
        vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4)),
        {"input_ids": _ids()}),
    "clip_vision": lambda t: (t.CLIPVisionModel(t.CLIPVisionConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        image_size=32, patch_size=8)), {"pixel_values": torch.randn(2, 3, 32, 32)}),
}


@pytest.mark.parametrize("name", sorted(MORE))
def test_more_models_are_one_graph(name):
    import transformers   # noqa: PLC0415
    torch.manual_seed(0)
    model, kw = MORE[name](transformers)
    model.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = model(**kw)
        got = cdynamo.optimize(model, fullgraph=True)(**kw)
    same_output(got, want)
    st = cdynamo.stats()
    assert st["graph_breaks"] == 0 and st["frames_compiled"] == 1, (st, _support.breaks)


@pytest.mark.parametrize("name", ["bloom", "falcon"])
def test_generate_bloom_falcon_two_compiles_eager_tokens(name):
    """generate() of BLOOM / Falcon: the prefill and one decoding graph whose cache length is
    symbolic (no graph break, no recompile past the first size change), eager's tokens."""
    import transformers   # noqa: PLC0415
    torch.manual_seed(0)
    model, _ = MORE[name](transformers)
    model.eval()
    ids = torch.randint(3, 512, (1, 8), generator=torch.Generator().manual_seed(5))
    kw = dict(max_new_tokens=12, min_new_tokens=12, do_sample=False, pad_token_id=0)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = model.generate(ids, **kw)
        fwd = model.forward
        model.forward = cdynamo.optimize(fwd)
        got = model.generate(ids, **kw)
        again = model.generate(ids, **kw)
        model.forward = fwd
    assert torch.equal(got, want) and torch.equal(again, want) and want.shape == (1, 20)
    st = cdynamo.stats()
    assert st["graph_breaks"] == 0 and st["fallbacks"] == 0, (st, _support.breaks)
    assert st["frames_compiled"] == 2 and st["recompiles"] == 1, (st, _support.compiles)


@pytest.mark.parametrize("name", ["encoder_layer", "encoder", "decoder_layer", "transformer",
                                  "mha", "mha_mask", "lstm", "gru"])
def test_torch_nn_modules_are_one_graph(name):
    torch.manual_seed(0)
    nn = torch.nn
    x, y = torch.randn(2, 8, 32), torch.randn(2, 6, 32)
    cases = {
        "encoder_layer": (nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), (x,), {}),
        "encoder": (nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, batch_first=True),
                                          2, enable_nested_tensor=False), (x,), {}),
        "decoder_layer": (nn.TransformerDecoderLayer(32, 4, 64, batch_first=True), (x, y), {}),
        "transformer": (nn.Transformer(32, 4, 2, 2, 64, batch_first=True), (x, y), {}),
        "mha": (nn.MultiheadAttention(32, 4, batch_first=True), (x, x, x), {}),
        "mha_mask": (nn.MultiheadAttention(32, 4), (x, x, x),
                     {"attn_mask": torch.triu(torch.ones(2, 2, dtype=torch.bool), 1)}),
        "lstm": (nn.LSTM(32, 16, 2, batch_first=True), (x,), {}),
        "gru": (nn.GRU(32, 16, batch_first=True), (x,), {}),
    }
    m, args, kw = cases[name]
    m.eval()
    with torch.no_grad():
        want = m(*args, **kw)
        opt = cdynamo.optimize(m)
        for _ in range(2):
            same_output(opt(*args, **kw), want)
    st = cdynamo.stats()
    assert st["graph_breaks"] == 0 and st["frames_compiled"] == 1 and st["recompiles"] == 0, \
        (st, _support.breaks)


def _generate_compiles(model, ids, n=12):
    """generate() twice through an optimized forward: (eager's tokens, ours twice,
    frames compiled by the first generate, by the second)."""
    kw = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = model.generate(ids, **kw)
        cdynamo.reset()
        fwd = model.forward
        model.forward = cdynamo.optimize(fwd)
        try:
            got = model.generate(ids, **kw)
            first = cdynamo.stats()["frames_compiled"]
            again = model.generate(ids, **kw)
            second = cdynamo.stats()["frames_compiled"] - first
        finally:
            model.forward = fwd
    return want, got, again, first, second


def test_generate_on_gptj_compiles_twice():
    """GPT-J's eager_mask calls sdpa_mask(kv_length=..., **kwargs): the size stays symbolic
    through the keyword dict (it pinned, one compile per token before)."""
    import transformers as T   # noqa: PLC0415
    torch.manual_seed(0)
    m = T.GPTJForCausalLM(T.GPTJConfig(vocab_size=512, n_embd=64, n_layer=2, n_head=4,
                                         rotary_dim=8, n_positions=256)).eval()
    ids = torch.randint(3, 512, (1, 8), generator=torch.Generator().manual_seed(3))
    want, got, again, first, second = _generate_compiles(m, ids)
    assert torch.equal(got, want) and torch.equal(again, want)
    assert first == 2 and second == 0, (first, second)
    assert cdynamo.stats()["fallbacks"] == 0


def test_generate_on_gemma2_compiles_twice():
    """Gemma-2's attention asks its registry ALL_ATTENTION_FUNCTIONS.get_interface("eager",
    ...): Mapping.get catches the KeyError of GeneralInterface.__getitem__.  The caught
    exception pins only what the failed lookup read (it pinned every size, one compile per
    token before); sliding and global layers alternate, the window (8) passed mid-generate."""
    import transformers as T   # noqa: PLC0415
    torch.manual_seed(0)
    m = T.Gemma2ForCausalLM(T.Gemma2Config(vocab_size=512, hidden_size=64, intermediate_size=128,
                                           num_hidden_layers=2, num_attention_heads=4,
                                           num_key_value_heads=2, head_dim=16,
                                           sliding_window=8)).eval()
    ids = torch.randint(3, 512, (1, 8), generator=torch.Generator().manual_seed(3))
    want, got, again, first, second = _generate_compiles(m, ids)
    assert torch.equal(got, want) and torch.equal(again, want)
    assert first == 2 and second == 0, (first, second)
    st = cdynamo.stats()
    assert st["fallbacks"] == 0 and st["graph_breaks"] == 0, (st, _support.breaks)


#: decoders of tools/gen_sweep.py that transformers 5.17 has too: generate compiles twice
_C = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
DECODERS = {
    "gemma3": lambda T: T.Gemma3ForCausalLM(T.Gemma3TextConfig(**_C, head_dim=16,
                                                               sliding_window=8)),
    "cohere": lambda T: T.CohereForCausalLM(T.CohereConfig(**_C, pad_token_id=0, bos_token_id=1,
                                                           eos_token_id=2)),
    "phi": lambda T: T.PhiForCausalLM(T.PhiConfig(**_C)),
    "olmo2": lambda T: T.Olmo2ForCausalLM(T.Olmo2Config(**_C, pad_token_id=0, eos_token_id=2)),
    "llama_rope3": lambda T: T.LlamaForCausalLM(T.LlamaConfig(**_C, rope_scaling=dict(
        rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
        original_max_position_embeddings=64))),
    # the experts registry sits in the closure of a forward installed on the class; the
    # default grouped_mm's fallback reads the routing counts (tolist): batched_mm does not
    "mixtral_batched": lambda T: T.MixtralForCausalLM(T.MixtralConfig(
        **_C, num_local_experts=4, num_experts_per_tok=2, experts_implementation="batched_mm")),
    # the default experts: transformers::grouped_mm_fallback, a torch.library custom op with a
    # fake impl, is an opaque extern (trace/libops.c): its data-dependent body is not traced
    "mixtral_grouped": lambda T: T.MixtralForCausalLM(T.MixtralConfig(
        **_C, num_local_experts=4, num_experts_per_tok=2)),
    "qwen2_moe": lambda T: T.Qwen2MoeForCausalLM(T.Qwen2MoeConfig(
        **_C, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
        shared_expert_intermediate_size=128)),
}


@pytest.mark.parametrize("name", sorted(DECODERS))
def test_generate_on_more_decoders_compiles_twice(name):
    """Gemma-3 (sliding window 8, passed mid-generate), Cohere (parallel block, LayerNorm
    without bias), Phi (partial rotary), OLMo-2 (q / k norms), LLaMA with llama3 rope
    scaling, Mixtral's batched_mm and default (custom op) experts, Qwen2-MoE: the prefill and one symbolic decoding graph,
    eager's tokens."""
    import transformers as T   # noqa: PLC0415
    torch.manual_seed(0)
    m = DECODERS[name](T).eval()
    ids = torch.randint(3, 512, (1, 8), generator=torch.Generator().manual_seed(3))
    want, got, again, first, second = _generate_compiles(m, ids)
    assert torch.equal(got, want) and torch.equal(again, want)
    assert first == 2 and second == 0, (first, second)
    st = cdynamo.stats()
    assert st["fallbacks"] == 0 and st["graph_breaks"] == 0, (st, _support.breaks)


def test_generate_on_t5_compiles_once_per_cache_state():
    """T5: the relative position buckets' torch.min(a, b) is a minimum (no size pin), the
    encoder output (a new ModelOutput each generate) is guarded by type: the decoder compiles
    for the empty cache, the 1-token cache and then one symbolic entry; a second generate
    reuses them."""
    import transformers as T   # noqa: PLC0415
    torch.manual_seed(0)
    m = T.T5ForConditionalGeneration(T.T5Config(vocab_size=512, d_model=64, d_ff=128,
                                                num_layers=2, num_heads=4, d_kv=16,
                                                decoder_start_token_id=0)).eval()
    ids = torch.randint(3, 512, (1, 8), generator=torch.Generator().manual_seed(3))
    want, got, again, first, second = _generate_compiles(m, ids)
    assert torch.equal(got, want) and torch.equal(again, want)
    assert first <= 3 and second == 0, (first, second)
    assert cdynamo.stats()["fallbacks"] == 0


def test_generate_on_a_40_layer_llama_compiles_twice():
    """A deep model (40 layers, Llama-2-13B's depth; tiny widths): its cache has 80 tensors
    whose length is symbolic (more than 64 symbols: the masks are wider than one word), and
    its residual stream into every RMSNorm is realized every few layers (recomputed from the
    embedding, a norm's kernel needed more than 64 parameters and the frame fell back)."""
    import transformers as T   # noqa: PLC0415
    torch.manual_seed(0)
    m = T.LlamaForCausalLM(T.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=40, num_attention_heads=2,
                                         num_key_value_heads=1,
                                         max_position_embeddings=256)).eval()
    ids = torch.randint(3, 128, (1, 5), generator=torch.Generator().manual_seed(3))
    want, got, again, first, second = _generate_compiles(m, ids, n=6)
    assert torch.equal(got, want) and torch.equal(again, want)
    assert first == 2 and second == 0, (first, second)
    assert cdynamo.stats()["fallbacks"] == 0


def test_generate_on_mistral_with_a_prompt_shorter_than_its_window():
    """Mistral (sliding_window 8) from a 3-token prompt: the prefill, the growing cache
    (cumulative_length < 7: the mask is skipped), the step where the cache first cuts
    (7: the mask is built, not yet full) and the full window (>= 8: a cut of constant
    size 7, an int symbol) are four code paths of transformers, each compiled once
    (torch.compile compiles this generate 6 times); tokens equal over 40 tokens."""
    import transformers as T   # noqa: PLC0415
    torch.manual_seed(0)
    m = T.MistralForCausalLM(T.MistralConfig(vocab_size=512, hidden_size=64,
                                             intermediate_size=128, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2,
                                             max_position_embeddings=256,
                                             sliding_window=8)).eval()
    ids = torch.randint(3, 512, (1, 3), generator=torch.Generator().manual_seed(3))
    want, got, again, first, second = _generate_compiles(m, ids, n=40)
    assert torch.equal(got, want) and torch.equal(again, want)
    assert first == 4 and second == 0, (first, second)
    assert cdynamo.stats()["fallbacks"] == 0
