"""Write x, torch.nn.functional.gelu(x) float32 pairs to argv[1]: random bit
patterns, a dense grid on [-14, 14] and special values."""
import sys

import numpy as np
import torch
import torch.nn.functional as F
g = torch.Generator().manual_seed(11)
bits = torch.randint(-2**31, 2**31 - 1, (1 << 20,), generator=g, dtype=torch.int64)
sp = [float('inf'), -float('inf'), float('nan'), 0.0, -0.0, 1e-45, -1e-45, 5.8, -5.8, 5.79, -5.81, 13.2, -13.2, 3e38, -3e38, 2.0**127, 1.7e38]
x = torch.cat([bits.to(torch.int32).view(torch.float32), torch.linspace(-14, 14, 1 << 20), torch.tensor(sp)])
y = F.gelu(x)
np.stack([x.numpy(), y.numpy()], 1).astype(np.float32).tofile(sys.argv[1])
print(torch.__version__, torch.backends.cpu.get_cpu_capability())
