"""A tiny llama-architecture GGUF model with random weights (about 470 KB): enough for real
llama.cpp to load, upload to the GPU and run, in tests that run llama.cpp on the emulated
GPU (tests/fault_coverage.rs). Written with Debian's python3-gguf, llama.cpp's own writer.

    python3 tiny_model.py OUT.gguf
"""
import sys
import numpy as np
import gguf

path = sys.argv[1]
n_embd, n_head, n_ff, n_layer, n_ctx = 64, 4, 128, 2, 128
w = gguf.GGUFWriter(path, "llama")
w.add_name("rmcp-tiny")
w.add_context_length(n_ctx)
w.add_embedding_length(n_embd)
w.add_block_count(n_layer)
w.add_feed_forward_length(n_ff)
w.add_head_count(n_head)
w.add_head_count_kv(n_head)
w.add_rope_dimension_count(n_embd // n_head)
w.add_layer_norm_rms_eps(1e-5)
w.add_file_type(0)
w.add_tokenizer_model("llama")
# SentencePiece-style: unknown, BOS, EOS, the 256 byte tokens, and a few pieces.
pieces = ["\u2581", "a", "b", "c", "\u2581a", "ab", "abc"]
tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces
n_vocab = len(tokens)
w.add_token_list(tokens)
w.add_token_scores([0.0] * 259 + [-float(i) for i in range(len(pieces))])
w.add_token_types([2, 3, 3] + [6] * 256 + [1] * len(pieces))
w.add_bos_token_id(1)
w.add_eos_token_id(2)
w.add_unk_token_id(0)
rng = np.random.default_rng(0)
def t(name, *shape):
    w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))
t("token_embd.weight", n_vocab, n_embd)
w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
t("output.weight", n_vocab, n_embd)
for i in range(n_layer):
    w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
    for q in ("q", "k", "v", "output"):
        t(f"blk.{i}.attn_{q}.weight", n_embd, n_embd)
    w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
    t(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
    t(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
    t(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
