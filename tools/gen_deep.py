"""tools/gen_deep.py [LAYERS=40]: greedy generate() of 16 tokens by a deep, narrow LLaMA (hidden 32,
2 heads, LAYERS layers; random weights) through cdynamo: tokens equal to eager's, eager's and
cdynamo's per-token CPU time at 1 thread, compiles and fallbacks.  A model of 32 layers or more
has more than 64 symbolic cache lengths and a residual stream 64 buffers long (issue 32)."""
import sys, time, torch, transformers as T, cdynamo, warnings
warnings.simplefilter("ignore"); torch.set_num_threads(1)
L = int(sys.argv[1]) if len(sys.argv) > 1 else 40; N = 16
torch.manual_seed(0)
m = T.LlamaForCausalLM(T.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=L, num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256)).eval()
ids = torch.randint(3, 128, (1, 5))
kw = dict(max_new_tokens=N, min_new_tokens=N, do_sample=False, pad_token_id=0)
with torch.no_grad():
    ref = m.generate(ids, **kw)
    t = time.thread_time(); ref = m.generate(ids, **kw); te = time.thread_time() - t
    fwd = m.forward
    m.forward = cdynamo.optimize(fwd)
    t = time.thread_time(); out = m.generate(ids, **kw); t1 = time.thread_time() - t
    t = time.thread_time(); out = m.generate(ids, **kw); tc = time.thread_time() - t
st = cdynamo.stats()
print(f"L={L} same={torch.equal(out, ref)} eager {1e3*te/N:.2f} ms/tok cdy {1e3*tc/N:.2f} ms/tok (first generate {t1:.2f}s CPU) compiled={st['frames_compiled']} fallbacks={st['fallbacks']}")
