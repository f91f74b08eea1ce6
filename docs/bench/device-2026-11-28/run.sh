export PYTHONUNBUFFERED=1
export CFLAGS="-I$PWD/.devffi/include" LDFLAGS="-L$PWD/.devffi/lib" LD_LIBRARY_PATH=$PWD/.devffi/lib
[ -f python/cdynamo/_C.cpython-312-x86_64-linux-gnu.so ] || python3 setup.py build_ext --inplace -q >/dev/null 2>&1 || { echo BUILD FAILED; exit 1; }
export PYTHONPATH=$PWD/python
python3 - <<'PY'
import torch, cdynamo, time
torch.set_num_threads(16)
m = torch.nn.Sequential(torch.nn.Linear(256,512), torch.nn.ReLU(), torch.nn.Linear(512,512), torch.nn.GELU(), torch.nn.Linear(512,10)).eval()
x = torch.randn(64,256)
def t(f, n=300):
    for _ in range(20): f(x)
    ts=[]
    for _ in range(7):
        s=time.perf_counter()
        for _ in range(n): f(x)
        ts.append((time.perf_counter()-s)/n*1e6)
    return sorted(ts)[3]
with torch.no_grad():
    print("eager", t(m))
    for pack in (True, False):
        cdynamo.config.pack_linear_weights = pack
        cdynamo.reset() if hasattr(cdynamo,'reset') else None
        f = cdynamo.optimize(lambda x: m(x))
        print("pack", pack, t(f))
        try: print(cdynamo.overhead_breakdown(f, x, calls=2000))
        except Exception as e: print("bd", e)
    from torch.profiler import profile
    with profile() as p:
        for _ in range(50): f(x)
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
PY
F=add1,pointwise,sigmoid,where,maximum,neg_u8,broadcast,channels,flip,cat_u8,smooth,softmax,layernorm,row_sum,mlp,cnn,transformer_stack,t5_small,int64
timeout 250 python3 -m cdynamo.bench --quick --threads 16 --no-progress --inductor-budget 200 --filter $F --json $OUT/q16.json > $OUT/q16.txt 2>&1; echo rc=$?; cat $OUT/q16.txt
timeout 230 python3 -m cdynamo.bench --quick --threads 2 --no-progress --inductor-budget 200 --filter $F --json $OUT/q2.json > $OUT/q2.txt 2>&1; echo rc=$?; cat $OUT/q2.txt
