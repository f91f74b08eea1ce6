"""tools/gen_sweep.py [ARCH,ARCH...]: greedy generate() of 32 tokens by small causal LMs (and T5) of
transformers (random weights, from their configs) through cdynamo (model.forward optimized),
each arch in turn: tokens equal to eager's on three generations, eager's and cdynamo's per-token
CPU time at 1 thread, and cdynamo's counters (frames compiled, graph breaks, recompiles,
fallbacks).  Real third-party code for issue 32: a growing DynamicCache per arch.
With CDYNAMO_LOGS=recompiles,graph_breaks it says why an arch compiles more than twice."""
import sys, time, warnings, torch, transformers as T
import cdynamo
torch.set_num_threads(1)
warnings.simplefilter("ignore")
C = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
ARCH = {
 "llama": lambda: T.LlamaForCausalLM(T.LlamaConfig(**C)),
 "mistral": lambda: T.MistralForCausalLM(T.MistralConfig(**C, sliding_window=8)),
 "mistral_nowin": lambda: T.MistralForCausalLM(T.MistralConfig(**C, sliding_window=None)),
 "qwen2": lambda: T.Qwen2ForCausalLM(T.Qwen2Config(**C)),
 "qwen3": lambda: T.Qwen3ForCausalLM(T.Qwen3Config(**C, head_dim=16)),
 "gemma": lambda: T.GemmaForCausalLM(T.GemmaConfig(**C, head_dim=16)),
 "gemma2": lambda: T.Gemma2ForCausalLM(T.Gemma2Config(**C, head_dim=16, sliding_window=8)),
 "phi3": lambda: T.Phi3ForCausalLM(T.Phi3Config(**C, pad_token_id=0)),
 "olmo": lambda: T.OlmoForCausalLM(T.OlmoConfig(**C, pad_token_id=0)),
 "starcoder2": lambda: T.Starcoder2ForCausalLM(T.Starcoder2Config(**C)),
 "gemma3": lambda: T.Gemma3ForCausalLM(T.Gemma3TextConfig(**C, head_dim=16, sliding_window=8)),
 "mixtral": lambda: T.MixtralForCausalLM(T.MixtralConfig(**C, num_local_experts=4, num_experts_per_tok=2)),
 "qwen2_moe": lambda: T.Qwen2MoeForCausalLM(T.Qwen2MoeConfig(**C, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64, shared_expert_intermediate_size=128)),
 "cohere": lambda: T.CohereForCausalLM(T.CohereConfig(**C, pad_token_id=0, bos_token_id=1, eos_token_id=2)),
 "stablelm": lambda: T.StableLmForCausalLM(T.StableLmConfig(**C)),
 "phi": lambda: T.PhiForCausalLM(T.PhiConfig(**C)),
 "granite": lambda: T.GraniteForCausalLM(T.GraniteConfig(**C)),
 "olmo2": lambda: T.Olmo2ForCausalLM(T.Olmo2Config(**C, pad_token_id=0, eos_token_id=2)),
 "llama_rope3": lambda: T.LlamaForCausalLM(T.LlamaConfig(**C, rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64))),
 "llama_ropedyn": lambda: T.LlamaForCausalLM(T.LlamaConfig(**{**C, "max_position_embeddings": 16}, rope_scaling=dict(rope_type="dynamic", factor=2.0))),
 "gpt2": lambda: T.GPT2LMHeadModel(T.GPT2Config(vocab_size=512, n_embd=64, n_layer=2, n_head=4, n_positions=256)),
 "gpt_neox": lambda: T.GPTNeoXForCausalLM(T.GPTNeoXConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=256)),
 "opt": lambda: T.OPTForCausalLM(T.OPTConfig(vocab_size=512, hidden_size=64, ffn_dim=128, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=256, word_embed_proj_dim=64)),
 "falcon": lambda: T.FalconForCausalLM(T.FalconConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4)),
 "bloom": lambda: T.BloomForCausalLM(T.BloomConfig(vocab_size=512, hidden_size=64, n_layer=2, n_head=4)),
 "gptj": lambda: T.GPTJForCausalLM(T.GPTJConfig(vocab_size=512, n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=256)),
 "t5": lambda: T.T5ForConditionalGeneration(T.T5Config(vocab_size=512, d_model=64, d_ff=128, num_layers=2, num_heads=4, d_kv=16, decoder_start_token_id=0)),
}
names = sys.argv[1].split(",") if len(sys.argv) > 1 else list(ARCH)
N = 32
for name in names:
    try:
        torch.manual_seed(0)
        m = ARCH[name]().eval()
        ids = torch.randint(3, 512, (1, 8))
        kw = dict(max_new_tokens=N, min_new_tokens=N, do_sample=False, pad_token_id=0)
        with torch.no_grad():
            ref = m.generate(ids, **kw)
            t = time.thread_time(); ref = m.generate(ids, **kw); te = time.thread_time() - t
            cdynamo.reset()
            fwd = m.forward
            m.forward = cdynamo.optimize(fwd)
            s0 = cdynamo.stats()
            out = m.generate(ids, **kw)
            out2 = m.generate(ids, **kw)
            t = time.thread_time(); out3 = m.generate(ids, **kw); tc = time.thread_time() - t
            st = cdynamo.stats()
            m.forward = fwd
        same = torch.equal(out, ref) and torch.equal(out2, ref) and torch.equal(out3, ref)
        keys = {k: st[k] for k in ("frames_compiled", "graph_breaks", "recompiles", "fallbacks", "eager_reruns") if k in st}
        print(f"{name:14s} same={same} eager {1e3*te/N:.2f} ms/tok cdy {1e3*tc/N:.2f} -> {te/tc:.2f}x {keys}", flush=True)
    except Exception as e:
        print(f"{name:14s} ERROR {type(e).__name__}: {str(e)[:200]}", flush=True)
