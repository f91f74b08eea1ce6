"""The benchmark's dynamic group (issue 32): `python -m cdynamo.bench --dynamic`.

Batch sweeps (pointwise, softmax, layer_norm, mlp, transformer_stack, encoder_layer): each
workload is called with batch sizes 1..64 in order (--quick: 1, 2, 3, 4,
6, 8, 12, 16, 24, 32, 48, 64), by eager, torch.compile (its default: automatic dynamic
shapes) and cdynamo.optimize (its default: automatic dynamic shapes).  Every call is
checked against eager.  The table gives per system the compiles over the sweep (cdynamo's
frames_compiled, torch.compile's unique graphs), the wall time of the first sweep (with
its compiles), and the steady per-call time (the median over rounds of a second sweep,
averaged over the sizes).  Decode: a LLaMA causal LM from a small config, generate() with
its default DynamicCache, greedy, per-token time per system (compiled forward).
Sequence sweeps (the names ending _seq: transformer_stack, encoder_layer, and transformers'
BERT and GPT-2 built from small configs): batch 2, sequence lengths 1..64 in the same order."""
from __future__ import annotations

import statistics
import time

import torch


def _pointwise(x, y):
    return torch.relu(x * y + 1.0) - torch.sigmoid(x)


def _softmax(x):
    return torch.softmax(x, dim=-1)


def _layernorm_gelu(x, w, b):
    return torch.nn.functional.gelu(torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b))


_MLP = {}


def _mlp(x):
    m = _MLP.get("m")
    if m is None:
        torch.manual_seed(0)
        m = _MLP["m"] = torch.nn.Sequential(
            torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
            torch.nn.GELU(), torch.nn.Linear(512, 10)).eval()
    return m(x)


def _stack(x):
    """The main group's transformer_stack (4 pre-norm blocks, d=256, written out by hand:
    `b, t, c = x.shape`, views to heads) over n x 32 tokens."""
    m = _MLP.get("stack")
    if m is None:
        from .bench import _Stack   # noqa: PLC0415 (the main group's model)
        torch.manual_seed(0)
        m = _MLP["stack"] = _Stack().eval()
    return m(x)


def _encoder(x):
    """torch's nn.TransformerEncoderLayer (d=128, 4 heads, batch_first, eval) over n x 24."""
    m = _MLP.get("encoder")
    if m is None:
        torch.manual_seed(0)
        m = _MLP["encoder"] = torch.nn.TransformerEncoderLayer(
            128, 4, dim_feedforward=256, batch_first=True).eval()
    return m(x)


def _hf_encoder(name):
    """A small transformers model from its config (random weights): BERT or GPT-2."""
    m = _MLP.get(name)
    if m is None:
        import transformers as T   # noqa: PLC0415 (optional dependency)
        torch.manual_seed(0)
        if name == "bert":
            cfg = T.BertConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=128)
            m = T.BertModel(cfg)
        else:
            m = T.GPT2Model(T.GPT2Config(vocab_size=512, n_embd=64, n_layer=2, n_head=4,
                                         n_positions=256))
        m = _MLP[name] = m.eval()
    return m


def _bert(ids):
    return _hf_encoder("bert")(input_ids=ids).last_hidden_state


def _gpt2(ids):
    return _hf_encoder("gpt2")(input_ids=ids, use_cache=False).last_hidden_state


def _inputs(name, n):
    if name in ("bert_seq", "gpt2_seq"):
        return (torch.randint(3, 512, (2, n)),)
    if name == "transformer_stack_seq":
        return (torch.randn(2, n, 256),)
    if name == "encoder_layer_seq":
        return (torch.randn(2, n, 128),)
    if name == "pointwise":
        return torch.randn(n, 4096), torch.randn(4096)
    if name == "softmax":
        return (torch.randn(n, 1024),)
    if name == "layer_norm":
        return torch.randn(n, 768), torch.randn(768), torch.randn(768)
    if name == "transformer_stack":
        return (torch.randn(n, 32, 256),)
    if name == "encoder_layer":
        return (torch.randn(n, 24, 128),)
    return (torch.randn(n, 256),)


SWEEPS = {"pointwise": _pointwise, "softmax": _softmax, "layer_norm": _layernorm_gelu,
          "mlp": _mlp, "transformer_stack": _stack, "encoder_layer": _encoder,
          "transformer_stack_seq": _stack, "encoder_layer_seq": _encoder,
          "bert_seq": _bert, "gpt2_seq": _gpt2}


def _counts(system, cdynamo):
    if system == "cdynamo":
        return cdynamo.stats()["frames_compiled"]
    if system == "inductor":
        from torch._dynamo.utils import counters   # noqa: PLC0415
        return int(counters["stats"]["unique_graphs"])
    return 0


def _build(system, fn, cdynamo):
    if system == "inductor":
        return torch.compile(fn)
    if system == "cdynamo":
        return cdynamo.optimize(fn)
    return fn


def _reset(cdynamo):
    torch._dynamo.reset()
    if cdynamo is not None:
        cdynamo.reset()


def _per_call(f, args, rounds):
    """Median seconds per call of f(*args) over rounds batches of about 2 ms."""
    t0 = time.perf_counter()
    f(*args)
    one = max(time.perf_counter() - t0, 1e-7)
    reps = max(1, min(1000, int(2e-3 / one)))
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            f(*args)
        times.append((time.perf_counter() - t0) / reps)
    return statistics.median(times)


def sweep(name, system, sizes, cdynamo, rounds):
    """One system over one sweep: a dict of compiles, first-sweep seconds, mean steady
    per-call microseconds, and the first mismatch with eager (None if none)."""
    fn = SWEEPS[name]
    _reset(cdynamo)
    f = _build(system, fn, cdynamo)
    torch.manual_seed(0)
    data = {n: _inputs(name, n) for n in sizes}
    expected = {n: fn(*data[n]) for n in sizes}
    before = _counts(system, cdynamo)
    wrong = None
    t0 = time.perf_counter()
    for n in sizes:
        out = f(*data[n])
        try:
            torch.testing.assert_close(out, expected[n])
        except AssertionError as e:
            wrong = wrong or f"size {n}: {str(e).splitlines()[0]}"
    first = time.perf_counter() - t0
    compiles = _counts(system, cdynamo) - before
    per = [_per_call(f, data[n], rounds) for n in sizes]
    for n in sizes:   # checked again after the timing (entries served steady)
        try:
            torch.testing.assert_close(f(*data[n]), expected[n])
        except AssertionError as e:
            wrong = wrong or f"size {n} (steady): {str(e).splitlines()[0]}"
    return {"compiles": compiles, "first_s": first, "us": 1e6 * statistics.fmean(per),
            "wrong": wrong}


def _decoder(name):
    """A small causal LM of transformers (random weights, from its config): name is
    decode_llama or decode_gpt2."""
    import transformers as T   # noqa: PLC0415 (optional dependency)
    if name == "decode_gpt2":
        return T.GPT2LMHeadModel(T.GPT2Config(vocab_size=512, n_embd=64, n_layer=2, n_head=4,
                                              n_positions=256)).eval()
    return T.LlamaForCausalLM(T.LlamaConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)).eval()


def decode(name, system, cdynamo, tokens, rounds):
    """Greedy generate() of `tokens` new tokens by a small causal LM (_decoder) with its
    DynamicCache: per token us of the later generations (the first compiles), compiles,
    and whether their tokens equal eager's."""
    torch.manual_seed(0)
    model = _decoder(name)
    ids = torch.randint(3, 512, (1, 8))
    kw = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        ref = model.generate(ids, **kw)
        _reset(cdynamo)
        if system != "eager":
            model.forward = _build(system, model.forward, cdynamo)
        before = _counts(system, cdynamo)
        t0 = time.perf_counter()
        out = model.generate(ids, **kw)
        first = time.perf_counter() - t0
        compiles = _counts(system, cdynamo) - before
        times, same = [], torch.equal(out, ref)
        for _ in range(rounds):
            t0 = time.perf_counter()
            out = model.generate(ids, **kw)
            times.append(time.perf_counter() - t0)
            same = same and torch.equal(out, ref)
    return {"compiles": compiles, "first_s": first,
            "us": 1e6 * statistics.median(times) / tokens,
            "wrong": None if same else "generated tokens differ from eager's"}


DECODERS = ("decode_llama", "decode_gpt2")
DECODE_TOKENS = 64


def _row(name, system, r):
    if "error" in r:
        return f"{name:17s} {system:9s} {'error: ' + r['error'][:90]}"
    ok = "ok" if not r["wrong"] else "WRONG: " + r["wrong"][:60]
    return (f"{name:17s} {system:9s} {r['compiles']:8d} {r['first_s']:10.2f} "
            f"{r['us']:12.1f} {r.get('vs', float('nan')):9.2f}x  {ok}")


def main(args, cdynamo) -> int:
    quick = args.quick
    sizes = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64] if quick else list(range(1, 65))
    rounds = 3 if quick else 7
    systems = ["eager"] + ([] if args.no_inductor else ["inductor"]) + \
              ([] if cdynamo is None else ["cdynamo"])
    filters = [f for arg in args.filter or [] for f in arg.split(",") if f]
    names = [n for n in list(SWEEPS) + list(DECODERS)
             if not filters or "dynamic" in filters or any(f in n for f in filters)]
    print(f"dynamic shapes: batch sweep (_seq: sequence lengths at batch 2) "
          f"{sizes[0]}..{sizes[-1]} ({len(sizes)} sizes), "
          f"threads {torch.get_num_threads()}; per call: mean over the sizes of the median "
          f"of {rounds} rounds (decode: per token, {DECODE_TOKENS} tokens)")
    print(f"{'workload':17s} {'system':9s} {'compiles':>8s} {'1st sweep s':>10s} "
          f"{'us/call':>12s} {'vs eager':>10s}  check")
    bad = 0
    for name in names:
        res = {}
        for s in systems:
            try:
                with torch.no_grad():
                    res[s] = (decode(name, s, cdynamo, DECODE_TOKENS, rounds)
                              if name in DECODERS
                              else sweep(name, s, sizes, cdynamo, rounds))
            except Exception as e:  # noqa: BLE001
                res[s] = {"error": f"{type(e).__name__}: {e}"}
        base = res.get("eager", {}).get("us")
        for s in systems:
            r = res[s]
            if base and "us" in r:
                r["vs"] = base / r["us"]
            bad += bool(r.get("wrong"))
            print(_row(name, s, r), flush=True)
    return 1 if bad else 0
