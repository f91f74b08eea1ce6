"""Small transformers models built from their configs (random weights, no download),
for the benchmark's transformers group and the model tests.

Each entry of MODELS is a name -> (build, inputs): build() returns the model in eval
mode (seeded), inputs(model) the keyword arguments of one forward call, and call(model,
kwargs) the tensor (or tuple of tensors) to compare with eager.  transformers is
imported lazily: importing this module never needs it; ``available()`` says whether the
models can be built.
"""
from __future__ import annotations

import importlib.util

import torch


def available():
    """None when transformers can be imported, else the reason it cannot."""
    if importlib.util.find_spec("transformers") is None:
        return "transformers is not installed (pip install transformers==5.23.0)"
    return None


def _seeded(build):
    def f():
        torch.manual_seed(0)
        return build().eval()
    return f


def _bert():
    from transformers import BertConfig, BertModel   # noqa: PLC0415 (optional dependency)
    return BertModel(BertConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2,
                                num_attention_heads=4, intermediate_size=128,
                                max_position_embeddings=128))


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel   # noqa: PLC0415
    return GPT2LMHeadModel(GPT2Config(vocab_size=512, n_embd=64, n_layer=2, n_head=4,
                                      n_positions=128, bos_token_id=1, eos_token_id=2,
                                      pad_token_id=0))


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM   # noqa: PLC0415
    return LlamaForCausalLM(LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, max_position_embeddings=128))


def _t5():
    from transformers import T5Config, T5Model   # noqa: PLC0415
    return T5Model(T5Config(vocab_size=512, d_model=64, d_kv=16, d_ff=128, num_layers=2,
                            num_decoder_layers=2, num_heads=4))


def _vit():
    from transformers import ViTConfig, ViTModel   # noqa: PLC0415
    return ViTModel(ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=64,
                              num_hidden_layers=2, num_attention_heads=4, intermediate_size=128))


def _resnet():
    from transformers import ResNetConfig, ResNetModel   # noqa: PLC0415
    return ResNetModel(ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32],
                                    depths=[1, 1], layer_type="basic"))


def _whisper_encoder():
    from transformers import WhisperConfig   # noqa: PLC0415
    from transformers.models.whisper.modeling_whisper import WhisperEncoder   # noqa: PLC0415
    cfg = WhisperConfig(vocab_size=512, num_mel_bins=16, d_model=64, encoder_layers=2,
                        encoder_attention_heads=4, decoder_layers=2, decoder_attention_heads=4,
                        encoder_ffn_dim=128, decoder_ffn_dim=128, max_source_positions=32,
                        max_target_positions=32, pad_token_id=0, bos_token_id=1,
                        eos_token_id=2, decoder_start_token_id=1)
    return WhisperEncoder(cfg)


def _ids(n=16, batch=2):
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 512, (batch, n), generator=g)


def _hidden(out):
    return out.last_hidden_state


#: name -> (build, inputs, result): inputs() gives the forward's keyword arguments,
#: result(out) the tensor compared with eager
MODELS = {
    "bert": (_seeded(_bert), lambda: {"input_ids": _ids(),
                                      "attention_mask": torch.ones(2, 16, dtype=torch.long)},
             _hidden),
    "gpt2": (_seeded(_gpt2), lambda: {"input_ids": _ids()}, lambda o: o.logits),
    "llama": (_seeded(_llama), lambda: {"input_ids": _ids()}, lambda o: o.logits),
    "t5": (_seeded(_t5), lambda: {"input_ids": _ids(), "decoder_input_ids": _ids(8)}, _hidden),
    "vit": (_seeded(_vit), lambda: {"pixel_values": torch.randn(
        2, 3, 32, 32, generator=torch.Generator().manual_seed(2))}, _hidden),
    "resnet": (_seeded(_resnet), lambda: {"pixel_values": torch.randn(
        2, 3, 32, 32, generator=torch.Generator().manual_seed(3))}, _hidden),
    "whisper_encoder": (_seeded(_whisper_encoder), lambda: {"input_features": torch.randn(
        1, 16, 64, generator=torch.Generator().manual_seed(4))}, _hidden),
}
