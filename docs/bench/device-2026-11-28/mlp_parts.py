import torch, cdynamo, time, sys
import torch.nn.functional as F
nt=int(sys.argv[1]); torch.set_num_threads(nt)
if len(sys.argv)>2: cdynamo.config.num_threads = int(sys.argv[2])
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(256,512), torch.nn.ReLU(), torch.nn.Linear(512,512), torch.nn.GELU(), torch.nn.Linear(512,10)).eval()
x = torch.randn(64,256); h = torch.randn(64,512)
def t(f, a, n=200):
    for _ in range(20): f(a)
    ts=[]
    for _ in range(7):
        s=time.perf_counter()
        for _ in range(n): f(a)
        ts.append((time.perf_counter()-s)/n*1e6)
    return round(sorted(ts)[3],1)
cases = {"mlp": (lambda x: m(x), x), "lin_relu_lin": (lambda x: m[2](m[1](m[0](x))), x), "lin_gelu": (lambda h: F.gelu(m[2](h)), h), "gelu": (lambda h: F.gelu(h), h), "gelu_lin": (lambda h: m[4](F.gelu(h)), h), "lin_relu": (lambda x: m[1](m[0](x)), x)}
with torch.no_grad():
    out=[]
    for k,(f,a) in cases.items():
        cf = cdynamo.optimize(f)
        out.append((k, t(f,a), t(cf,a)))
print(nt, sys.argv[2:], out, cdynamo.stats())
