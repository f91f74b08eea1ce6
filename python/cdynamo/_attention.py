"""The fused attention that the attention rewrite calls (csrc/trace/attention.c).

A hand-written softmax(q @ k^T * scale [+ mask]) @ v becomes one call of
attention(q, k, v[, attn_mask=mask], scale=scale).  torch's CPU attention
(F.scaled_dot_product_attention, flash kernel) agrees with eager's unfused
ops up to rounding while every row of scores has a finite entry; a row whose
scores are all -inf, or -inf and NaN, it returns as zeros where eager's
softmax gives NaN: the kernel skips a row whose running max is -inf, and its
max drops a NaN that falls in the scalar tail of a block (std::max), so a
NaN in q (a row of NaN scores) comes out as 0.  attention checks, at a cost
of one pass over q and k (and the mask), that no row can be so: q and k
finite with |scores| bounded (no overflow to -inf), the mask without NaN and
with a finite entry per row.  Otherwise it runs eager's unfused ops.
"""
import torch
import torch.nn.functional as F

# Scores and mask entries are kept under this magnitude: a score plus a mask
# entry then stays finite (float32's largest is 3.4e38).
_BOUND = 1e37


def _fused_is_exact(q, k, attn_mask, scale):
    """True when no row of the scores (q @ k^T * scale + mask) is all -inf or NaN."""
    if q.numel() == 0 or k.numel() == 0 or (attn_mask is not None and attn_mask.numel() == 0):
        return False
    qlo, qhi = torch.aminmax(q)          # NaN when q holds one
    klo, khi = torch.aminmax(k)
    parts = [(torch.maximum(-qlo, qhi) * torch.maximum(-klo, khi)).double()]
    if attn_mask is not None:            # the smallest row maximum of the mask, negated
        parts.append(-attn_mask.amax(-1).amin().double())
    bounds = torch.stack(parts).tolist()   # one synchronisation
    score = bounds[0] * q.shape[-1] * abs(scale)
    return score < _BOUND and (attn_mask is None or bounds[1] < _BOUND)


def attention(q, k, v, attn_mask=None, scale=1.0):
    """softmax(q @ k.transpose(-2, -1) * scale [+ attn_mask], -1) @ v, as eager's ops give it."""
    if _fused_is_exact(q, k, attn_mask, scale):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale)
    s = torch.matmul(q, k.transpose(-2, -1)) * scale
    if attn_mask is not None:
        s = s + attn_mask
    return torch.matmul(torch.softmax(s, -1), v)
