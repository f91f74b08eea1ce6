"""tools/gen_short.py ARCH[,ARCH...] [PROMPT_LEN] [TOKENS]: greedy generate() of TOKENS (64)
tokens from a PROMPT_LEN (3) token prompt through cdynamo (model.forward optimized), for the
sliding-window decoders whose prompt is shorter than their window (issue 32): mistral
(window 8), gemma2 (window 8), t5.  Prints tokens equal to eager's (two generations) and
cdynamo's counters; CDYNAMO_LOGS=recompiles,dynamic says why an arch compiles more than twice."""
import sys, warnings, torch, transformers as T
import cdynamo
torch.set_num_threads(1)
warnings.simplefilter("ignore")
C = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
ARCH = {
 "mistral": lambda: T.MistralForCausalLM(T.MistralConfig(**C, sliding_window=8)),
 "gemma2": lambda: T.Gemma2ForCausalLM(T.Gemma2Config(**C, head_dim=16, sliding_window=8)),
 "llama": lambda: T.LlamaForCausalLM(T.LlamaConfig(**C)),
 "t5": lambda: T.T5ForConditionalGeneration(T.T5Config(vocab_size=512, d_model=64, d_ff=128, num_layers=2, num_heads=4, d_kv=16, decoder_start_token_id=0)),
}
names = sys.argv[1].split(",")
P = int(sys.argv[2]) if len(sys.argv) > 2 else 3
N = int(sys.argv[3]) if len(sys.argv) > 3 else 64
for name in names:
    try:
        torch.manual_seed(0)
        m = ARCH[name]().eval()
        ids = torch.randint(3, 512, (1, P))
        kw = dict(max_new_tokens=N, min_new_tokens=N, do_sample=False, pad_token_id=0)
        with torch.no_grad():
            ref = m.generate(ids, **kw)
            cdynamo.reset()
            fwd = m.forward
            m.forward = cdynamo.optimize(fwd)
            out = m.generate(ids, **kw)
            out2 = m.generate(ids, **kw)
            st = cdynamo.stats()
            m.forward = fwd
        same = torch.equal(out, ref) and torch.equal(out2, ref)
        keys = {k: st[k] for k in ("frames_compiled", "graph_breaks", "recompiles", "fallbacks", "eager_reruns") if k in st}
        print(f"{name:10s} prompt={P} tokens={N} same={same} {keys}", flush=True)
    except Exception as e:
        print(f"{name:10s} ERROR {type(e).__name__}: {str(e)[:200]}", flush=True)
